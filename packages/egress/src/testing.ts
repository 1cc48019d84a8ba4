/**
 * Test support shared by the drivers' gateway suites: real upstream servers
 * on a non-loopback host address (plain HTTP and HTTPS with their own test
 * CA) and on loopback, a gateway port over them, and the probe a sandbox
 * runs (node, every way out it can try, one JSON line).
 */
import { randomBytes } from "node:crypto";
import http from "node:http";
import https from "node:https";
import type { AddressInfo } from "node:net";
import { networkInterfaces } from "node:os";
import { expect } from "vitest";
import { SandboxCa } from "./ca.ts";
import type { EgressAuditEvent } from "./gateway.ts";
import { GatewayEgressPort, type SandboxEgressConfig } from "./port.ts";

export interface TestUpstreams {
  /** The host's non-loopback IPv4 address the upstreams listen on. */
  hostIp: string;
  httpPort: number;
  httpsPort: number;
  /** A service on the host's loopback that no sandbox may reach. */
  loopbackPort: number;
  /** The upstream HTTPS server's CA (the gateway trusts it; sandboxes do not). */
  caPem: string;
  /** Names the gateway resolves: api.test, plain.test, other.test to hostIp; loop.test to 127.0.0.1; meta.test to the metadata address. */
  lookup(host: string): Promise<string[]>;
  close(): Promise<void>;
}

/** The host's first non-loopback IPv4 address: where test servers listen so sandboxes can reach them through a gateway. */
export function hostIpv4(): string {
  const nic = Object.values(networkInterfaces())
    .flat()
    .find((n) => n && n.family === "IPv4" && !n.internal);
  if (!nic) throw new Error("the gateway tests need a non-loopback IPv4 address on this host");
  return nic.address;
}

/** Echoes what arrived: method, authorization header, body. */
function echo(req: http.IncomingMessage, res: http.ServerResponse): void {
  let body = "";
  req.on("data", (chunk: Buffer) => {
    body += chunk.toString("utf8");
  });
  req.on("end", () => res.end(JSON.stringify({ method: req.method, auth: req.headers.authorization ?? null, body })));
}

async function listen(server: http.Server, host: string): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return (server.address() as AddressInfo).port;
}

export async function startTestUpstreams(): Promise<TestUpstreams> {
  const hostIp = hostIpv4();
  const ca = new SandboxCa("test-upstream");
  const leaf = ca.issue("api.test");
  const plain = http.createServer(echo);
  const secure = https.createServer({ key: leaf.keyPem, cert: leaf.certPem }, echo);
  const loop = http.createServer((_req, res) => res.end("loopback service"));
  const [httpPort, httpsPort, loopbackPort] = [await listen(plain, hostIp), await listen(secure, hostIp), await listen(loop, "127.0.0.1")];
  const names: Record<string, string> = {
    "api.test": hostIp,
    "plain.test": hostIp,
    "other.test": hostIp,
    "loop.test": "127.0.0.1",
    "meta.test": "169.254.169.254",
  };
  return {
    hostIp,
    httpPort,
    httpsPort,
    loopbackPort,
    caPem: ca.certPem,
    lookup: async (host) => {
      const address = names[host];
      if (!address) throw Object.assign(new Error(`unknown test host ${host}`), { code: "ENOTFOUND" });
      return [address];
    },
    close: async () => {
      for (const server of [plain, secure, loop]) {
        server.closeAllConnections();
        await new Promise((resolve) => server.close(resolve));
      }
    },
  };
}

export const TEST_SECRET_NAME = "API_TOKEN";

/** A fresh secret per run, long and unmistakable, so a leak check cannot miss it or match by accident. */
export function testSecret(): string {
  return `real-secret-${randomBytes(16).toString("hex")}`;
}

export function testGatewayPort(upstreams: TestUpstreams, config: SandboxEgressConfig, audit: EgressAuditEvent[]): GatewayEgressPort {
  return new GatewayEgressPort({
    configFor: async () => config,
    upstreamCa: [upstreams.caPem],
    lookup: upstreams.lookup,
    onAudit: (event) => audit.push(event),
  });
}

/**
 * Run inside the sandbox as `node -e PROBE <json>`: `fetch` through the
 * proxy variables (with the placeholder from the environment where a
 * request says `@API_TOKEN@`), raw requests to the proxy, a direct
 * connection and a DNS lookup.
 */
export const PROBE = `
const net = require("node:net"), http = require("node:http"), dns = require("node:dns/promises");
const a = JSON.parse(process.argv[1]);
const fill = (s) => s.split("@API_TOKEN@").join(process.env.API_TOKEN ?? "");
const get = async (url, init = {}) => {
  try {
    const headers = Object.fromEntries(Object.entries(init.headers ?? {}).map(([k, v]) => [k, fill(v)]));
    const res = await fetch(url, { method: init.method ?? "GET", headers, body: init.body === undefined ? undefined : fill(init.body), signal: AbortSignal.timeout(15000) });
    return res.status + ":" + (await res.text());
  } catch (e) { return "error:" + (e.cause?.code ?? e.cause?.message ?? e.message); }
};
const viaProxy = (url) => new Promise((r) => {
  http.get({ host: "127.0.0.1", port: 3128, path: url }, (res) => { let b = ""; res.on("data", (c) => (b += c)); res.on("end", () => r(res.statusCode + ":" + b)); }).on("error", (e) => r("error:" + e.code));
});
const direct = (host, port) => new Promise((r) => { const s = net.connect({ host, port }); s.setTimeout(3000, () => { s.destroy(); r("timeout"); }); s.on("connect", () => { s.destroy(); r("connected"); }); s.on("error", (e) => r(e.code)); });
(async () => {
  const out = { placeholder: process.env.API_TOKEN ?? null, caFile: process.env.NODE_EXTRA_CA_CERTS ?? null, proxy: process.env.HTTPS_PROXY ?? null };
  for (const [key, url, init] of a.fetch) out[key] = await get(url, init);
  for (const [key, url] of a.viaProxy) out[key] = await viaProxy(url);
  out.direct = await direct(a.hostIp, a.httpPort);
  out.dns = await dns.lookup("api.test").then(() => "resolved", (e) => e.code);
  console.log(JSON.stringify(out));
})();
`;

/** The probe's argument for an unrestricted sandbox. */
export function unrestrictedProbe(u: TestUpstreams): string {
  return JSON.stringify({
    hostIp: u.hostIp,
    httpPort: u.httpPort,
    fetch: [
      ["byAddress", `http://${u.hostIp}:${u.httpPort}/a`],
      ["byName", `http://other.test:${u.httpPort}/b`],
    ],
    viaProxy: [
      ["loopback", `http://127.0.0.1:${u.loopbackPort}/`],
      ["loopbackByName", `http://loop.test:${u.loopbackPort}/`],
      ["metadata", "http://169.254.169.254/latest/meta-data/"],
      ["metadataByName", "http://meta.test/latest/meta-data/"],
    ],
  });
}

/**
 * One request to the upstreams by name (api.test, plain.test, other.test),
 * with their CA trusted: the internet as a Worker's `fetch` sees it when a
 * test runs the Worker in workerd (the gateway resolves with `lookup`).
 */
export async function upstreamFetch(u: TestUpstreams, request: Request): Promise<Response> {
  const url = new URL(request.url);
  const body = request.method === "GET" || request.method === "HEAD" ? undefined : Buffer.from(await request.arrayBuffer());
  const [address] = await u.lookup(url.hostname);
  const secure = url.protocol === "https:";
  return new Promise((resolve, reject) => {
    const req = (secure ? https : http).request(
      {
        host: address,
        port: Number(url.port || (secure ? 443 : 80)),
        path: `${url.pathname}${url.search}`,
        method: request.method,
        headers: Object.fromEntries(request.headers),
        ...(secure ? { servername: url.hostname, ca: [u.caPem] } : {}),
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve(new Response(Buffer.concat(chunks), { status: res.statusCode ?? 502 })));
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

/** The probe's argument for a limited sandbox with a credential for api.test. */
export function limitedProbe(u: TestUpstreams): string {
  const init = { method: "POST", headers: { authorization: "Bearer @API_TOKEN@" }, body: "token=@API_TOKEN@" };
  return JSON.stringify({
    hostIp: u.hostIp,
    httpPort: u.httpPort,
    fetch: [
      ["credentialHost", `https://api.test:${u.httpsPort}/echo`, init],
      ["otherAllowedHost", `http://plain.test:${u.httpPort}/echo`, init],
      ["deniedHttps", `https://other.test:${u.httpsPort}/`],
    ],
    viaProxy: [["denied", `http://other.test:${u.httpPort}/`]],
  });
}

/** The limited sandbox's config: api.test and plain.test allowed, the credential only for api.test. */
export function limitedConfig(secret: string): SandboxEgressConfig {
  return {
    networking: { type: "limited", allowed_hosts: ["api.test", "plain.test"] },
    credentials: [{ secretName: TEST_SECRET_NAME, secret, hosts: ["api.test"], header: true, body: true }],
  };
}

/** Lists what a process in the sandbox can read about itself and its files: every environ, cmdline and writable file. */
export const LEAK_SCAN = [
  "/bin/sh",
  "-c",
  'for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do cat "$f" 2>/dev/null; echo; done; env; find /tmp /workspace /run /etc -type f -exec cat {} + 2>/dev/null; true',
];

type Seen = Record<string, string | null>;

/** What an unrestricted sandbox must see: the host's non-loopback address yes, loopback and metadata no, no way around the gateway. */
export function unrestrictedProblems(seen: Seen, u: TestUpstreams): string[] {
  const problems: string[] = [];
  const want = (key: string, ok: boolean) => {
    if (!ok) problems.push(`${key}: ${seen[key]}`);
  };
  want("byAddress", seen.byAddress?.startsWith('200:{"method":"GET"') === true);
  want("byName", seen.byName?.startsWith("200:") === true);
  want("loopback", /^403:egress refused: address 127\.0\.0\.1 is loopback/.test(seen.loopback ?? ""));
  want("loopbackByName", /^403:egress refused: address 127\.0\.0\.1 is loopback/.test(seen.loopbackByName ?? ""));
  want("metadata", /^403:egress refused: address 169\.254\.169\.254 is loopback, link-local, metadata/.test(seen.metadata ?? ""));
  want("metadataByName", /^403:egress refused: address 169\.254\.169\.254/.test(seen.metadataByName ?? ""));
  want("direct", ["ENETUNREACH", "EHOSTUNREACH", "EADDRNOTAVAIL"].includes(seen.direct ?? ""));
  want("dns", seen.dns !== "resolved");
  want("proxy", seen.proxy === "http://127.0.0.1:3128");
  want("placeholder", seen.placeholder === null); // no credential, no placeholder
  if (problems.length > 0) problems.push(`(upstreams on ${u.hostIp})`);
  return problems;
}

/** What a limited sandbox with the api.test credential must see. */
export function limitedProblems(seen: Seen, secret: string): string[] {
  const problems: string[] = [];
  const want = (key: string, ok: boolean) => {
    if (!ok) problems.push(`${key}: ${seen[key]}`);
  };
  const placeholder = seen.placeholder ?? "";
  want("placeholder", placeholder.startsWith("openma-placeholder-api_token-") && !placeholder.includes(secret));
  want(
    "credentialHost",
    seen.credentialHost === `200:${JSON.stringify({ method: "POST", auth: `Bearer ${secret}`, body: `token=${secret}` })}`,
  );
  want(
    "otherAllowedHost",
    seen.otherAllowedHost === `200:${JSON.stringify({ method: "POST", auth: `Bearer ${placeholder}`, body: `token=${placeholder}` })}`,
  );
  want("deniedHttps", seen.deniedHttps?.startsWith("error:") === true);
  want("denied", /^403:egress refused: host other\.test is not in the environment's allowed hosts/.test(seen.denied ?? ""));
  want("direct", ["ENETUNREACH", "EHOSTUNREACH", "EADDRNOTAVAIL"].includes(seen.direct ?? ""));
  want("caFile", seen.caFile === "/run/openma/egress/ca.pem");
  return problems;
}

/** The audit trail an unrestricted probe must leave. */
export function expectUnrestrictedAudit(audit: readonly EgressAuditEvent[], u: TestUpstreams): void {
  expect(audit).toEqual(
    expect.arrayContaining([
      expect.objectContaining({ type: "egress.allowed", host: u.hostIp, port: u.httpPort }),
      expect.objectContaining({ type: "egress.denied", host: "127.0.0.1", reason: expect.stringMatching(/loopback/) }),
      expect.objectContaining({ type: "egress.denied", host: "meta.test", address: "169.254.169.254" }),
    ]),
  );
}

/** The audit trail a limited probe must leave, never holding the secret. */
export function expectLimitedAudit(audit: readonly EgressAuditEvent[], secret: string): void {
  expect(audit).toEqual(
    expect.arrayContaining([
      expect.objectContaining({ type: "egress.allowed", host: "api.test", intercepted: true, credentials: ["API_TOKEN"] }),
      expect.objectContaining({
        type: "egress.denied",
        method: "CONNECT",
        host: "other.test",
        reason: expect.stringMatching(/allowed hosts/),
      }),
      expect.objectContaining({ type: "egress.denied", method: "GET", host: "other.test" }),
    ]),
  );
  expect(JSON.stringify(audit)).not.toContain(secret);
}

/** What the leak scan of a limited sandbox must (and must not) show. */
export function expectNoLeak(scan: string, placeholder: string, secret: string): void {
  expect(scan).toContain(placeholder); // the scan does see the environment
  expect(scan).not.toContain(secret);
  expect(scan).not.toContain("PRIVATE KEY");
}

/** A port as `openma serve` composes it into its drivers, for tests that compare declared capabilities (never opened). */
export function composedPort(): GatewayEgressPort {
  return new GatewayEgressPort({ configFor: async () => ({ networking: { type: "unrestricted" }, credentials: [] }) });
}
