/**
 * The gateway on its own, host side: policy, address checks, substitution,
 * and the error answers (bad CONNECT, unresolvable name, unreachable
 * upstream, oversized body). The sandboxed proofs live beside each driver.
 */
import http from "node:http";
import net, { type AddressInfo } from "node:net";
import tls from "node:tls";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxCa } from "./ca.ts";
import { type EgressAuditEvent, EgressGateway, parseAuthority, substituteBuffer } from "./gateway.ts";
import { addressRefusal, EgressPolicy, hostMatches } from "./policy.ts";
import { GatewayEgressPort, gatewaySandboxEnv } from "./port.ts";
import { startTestUpstreams, type TestUpstreams } from "./testing.ts";

describe("policy", () => {
  it("matches hosts exactly or as strict subdomains of a wildcard", () => {
    expect(hostMatches("API.example.com.", "api.example.com")).toBe(true);
    expect(hostMatches("a.example.com", "*.example.com")).toBe(true);
    expect(hostMatches("example.com", "*.example.com")).toBe(false);
    expect(hostMatches("evil-example.com", "*.example.com")).toBe(false);
    expect(hostMatches("", "x")).toBe(false);
  });

  it("refuses loopback, unspecified, link-local, metadata and multicast addresses, mapped forms included", () => {
    for (const address of [
      "127.0.0.1",
      "127.9.9.9",
      "0.0.0.0",
      "::1",
      "::",
      "::ffff:127.0.0.1",
      "169.254.169.254",
      "fe80::1",
      "fd00:ec2::254",
      "224.0.0.1",
    ]) {
      expect(addressRefusal(address), address).not.toBeNull();
    }
    for (const address of ["10.0.0.1", "172.17.0.1", "192.168.1.1", "93.184.216.34", "2001:4860::8888"]) {
      expect(addressRefusal(address), address).toBeNull();
    }
    expect(addressRefusal("not-an-ip")).toMatch(/not an IP/);
  });

  it("limited allows its hosts, the registries with allow_package_managers and MCP hosts with allow_mcp_servers", () => {
    const base = { type: "limited" as const, allowed_hosts: ["api.example.com"] };
    const hosts = { packageManagerHosts: ["registry.test"], mcpServerHosts: ["mcp.test"] };
    const closed = new EgressPolicy({ networking: base, ...hosts });
    expect(closed.mode).toBe("limited");
    expect(closed.hostRefusal("api.example.com")).toBeNull();
    expect(closed.hostRefusal("registry.test")).toMatch(/not in the environment's allowed hosts/);
    expect(closed.hostRefusal("mcp.test")).not.toBeNull();
    const open = new EgressPolicy({ networking: { ...base, allow_package_managers: true, allow_mcp_servers: true }, ...hosts });
    expect(open.hostRefusal("registry.test")).toBeNull();
    expect(open.hostRefusal("mcp.test")).toBeNull();
    expect(new EgressPolicy({ networking: { type: "unrestricted" } }).hostRefusal("anything.test")).toBeNull();
    expect(new EgressPolicy({ networking: { type: "bogus" } as never }).hostRefusal("anything.test")).not.toBeNull();
  });

  it("parses CONNECT authorities and rejects the rest", () => {
    expect(parseAuthority("Example.com:443")).toEqual({ host: "example.com", port: 443 });
    expect(parseAuthority("[::1]:8443")).toEqual({ host: "::1", port: 8443 });
    expect(parseAuthority("example.com")).toBeNull();
    expect(parseAuthority("example.com:0")).toBeNull();
    expect(parseAuthority("http://x:1")).toBeNull();
  });
});

describe("substitution", () => {
  const credential = { secretName: "T", placeholder: "ph-1", secret: "s$&cret", hosts: null, header: true, body: true };
  it("replaces every occurrence byte-for-byte, literal `$` included, and names what it used", () => {
    const out = substituteBuffer(Buffer.from("a ph-1 b ph-1"), [credential]);
    expect(out.data.toString()).toBe("a s$&cret b s$&cret");
    expect(out.used).toEqual(["T"]);
    expect(substituteBuffer(Buffer.from("nothing"), [credential]).used).toEqual([]);
  });
});

describe("gateway answers", () => {
  let upstreams: TestUpstreams;
  let listener: net.Server;
  let port: number;
  const audit: EgressAuditEvent[] = [];
  let gateway: EgressGateway;

  beforeAll(async () => {
    upstreams = await startTestUpstreams();
    gateway = new EgressGateway({
      sandbox: "unit",
      policy: new EgressPolicy({ networking: { type: "unrestricted" } }),
      lookup: async (host) => (host === "nowhere.test" ? [] : upstreams.lookup(host)),
      onAudit: (e) => audit.push(e),
      maxBodyBytes: 1024,
      credentials: [],
    });
    listener = net.createServer((socket) => gateway.accept(socket));
    await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
    port = (listener.address() as AddressInfo).port;
  });

  afterAll(async () => {
    gateway?.close();
    listener?.close();
    await upstreams?.close();
  });

  const ask = (options: http.RequestOptions, body?: string) =>
    new Promise<string>((resolve) => {
      const req = http.request({ host: "127.0.0.1", port, ...options }, (res) => {
        let text = "";
        res.on("data", (c) => (text += c));
        res.on("end", () => resolve(`${res.statusCode}:${text}`));
      });
      req.on("connect", (res, socket) => {
        socket.destroy();
        resolve(`${res.statusCode}`);
      });
      req.on("error", (e) => resolve(`error:${(e as NodeJS.ErrnoException).code}`));
      req.end(body);
    });

  it("answers 400 to a malformed CONNECT and to a relative URL", async () => {
    expect(await ask({ method: "CONNECT", path: "no-port" })).toBe("400");
    expect(await ask({ path: "/relative" })).toMatch(/^400:the sandbox egress proxy accepts absolute/);
    expect(await ask({ path: "ftp://x.test/" })).toMatch(/^400:use CONNECT/);
  });

  it("refuses names that do not resolve, with an audit event", async () => {
    expect(await ask({ path: "http://missing.test/" })).toMatch(/^403:egress refused: cannot resolve missing.test: ENOTFOUND/);
    expect(await ask({ path: "http://nowhere.test/" })).toMatch(/^403:egress refused: cannot resolve nowhere.test/);
    expect(audit).toEqual(expect.arrayContaining([expect.objectContaining({ type: "egress.denied", host: "missing.test" })]));
  });

  it("answers 502 when the upstream cannot be reached", async () => {
    const closed = net.createServer();
    await new Promise<void>((resolve) => closed.listen(0, upstreams.hostIp, resolve));
    const deadPort = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    expect(await ask({ path: `http://${upstreams.hostIp}:${deadPort}/` })).toMatch(/^502:egress gateway: cannot reach .*ECONNREFUSED/);
    expect(await ask({ method: "CONNECT", path: `${upstreams.hostIp}:${deadPort}` })).toBe("502");
  });

  it("forwards plain HTTP to an allowed address", async () => {
    expect(await ask({ method: "POST", path: `http://plain.test:${upstreams.httpPort}/x` }, "hi")).toBe(
      `200:${JSON.stringify({ method: "POST", auth: null, body: "hi" })}`,
    );
  });
});

describe("interception", () => {
  it("never forwards a credential to an upstream whose certificate it cannot verify", async () => {
    const upstreams = await startTestUpstreams();
    const ca = new SandboxCa("unit");
    const audit: EgressAuditEvent[] = [];
    const gateway = new EgressGateway({
      sandbox: "unit",
      policy: new EgressPolicy({ networking: { type: "unrestricted" } }),
      lookup: upstreams.lookup,
      onAudit: (e) => audit.push(e),
      ca,
      // No upstreamCa: the test server's CA is not trusted, as an impostor's would not be.
      credentials: [{ secretName: "T", placeholder: "ph-x", secret: "the-secret", hosts: ["api.test"], header: true, body: false }],
    });
    const listener = net.createServer((socket) => gateway.accept(socket));
    await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
    try {
      const answer = await new Promise<string>((resolve, reject) => {
        const req = http.request({
          host: "127.0.0.1",
          port: (listener.address() as AddressInfo).port,
          method: "CONNECT",
          path: `api.test:${upstreams.httpsPort}`,
        });
        req.on("connect", (_res, socket) => {
          const secure = tls.connect({ socket, servername: "api.test", ca: ca.certPem }, () => {
            secure.write("GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer ph-x\r\nConnection: close\r\n\r\n");
          });
          let text = "";
          secure.on("data", (c) => (text += c));
          secure.on("end", () => resolve(text));
          secure.on("error", reject);
        });
        req.on("error", reject);
        req.end();
      });
      expect(answer).toMatch(/^HTTP\/1.1 502/);
      expect(answer).toMatch(/cannot reach api.test/);
      expect(answer).not.toContain("the-secret");
    } finally {
      gateway.close();
      listener.close();
      await upstreams.close();
    }
  });
});

describe("GatewayEgressPort", () => {
  const open = (credentials: { secretName: string }[]) =>
    new GatewayEgressPort({
      configFor: async () => ({
        networking: { type: "unrestricted" },
        credentials: credentials.map((c) => ({ ...c, secret: "s", hosts: null, header: true, body: false })),
      }),
    }).open({ scope: { environmentId: "env_a", sessionId: "sesn_a" }, runtimeId: "r", signal: new AbortController().signal });

  it("refuses credential names that would shadow the sandbox's plumbing or each other", async () => {
    await expect(open([{ secretName: "HTTPS_PROXY" }])).rejects.toThrow(/cannot be a sandbox variable/);
    await expect(open([{ secretName: "bad-name" }])).rejects.toThrow(/cannot be a sandbox variable/);
    await expect(open([{ secretName: "A" }, { secretName: "A" }])).rejects.toThrow(/share secret_name A/);
  });

  it("without credentials has no CA, and the sandbox env is the proxy only", async () => {
    const gateway = await open([]);
    expect(gateway.caCertPem).toBeNull();
    const env = gatewaySandboxEnv(gateway);
    expect(env.HTTPS_PROXY).toBe("http://127.0.0.1:3128");
    expect(env.NODE_EXTRA_CA_CERTS).toBeUndefined();
    gateway.close();
  });
});
