/**
 * The egress gateway through a real `openma serve` child process, on both
 * local drivers, driven with the official SDK (issue 12, ADR 0020). The
 * agent's `bash` (scripted model) runs one probe in its sandbox and writes
 * what it saw, plus a scan of every environ, cmdline, env and file it can
 * read, into the session's outputs, which the test reads on the host.
 *
 * - `limited` with a vault `environment_variable` credential: the allowed
 *   host over HTTPS (intercepted with the sandbox's CA; the gateway trusts
 *   the upstream's test CA through OPENMA_EGRESS_UPSTREAM_CA) receives the
 *   real secret; an upstream path that echoes it back leaves only the
 *   redaction marker in the event log; other hosts and the API get a 403
 *   with the reason; the scan finds the placeholder and never the secret;
 *   the server log has the audit lines and not the secret.
 * - `unrestricted`: the host's non-loopback address is reached, its
 *   loopback (the API itself) and the metadata address are refused.
 */
import { randomBytes } from "node:crypto";
import { readFile, rm, writeFile } from "node:fs/promises";
import http from "node:http";
import https from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SandboxCa } from "@openma/egress";
import { hostIpv4, LEAK_SCAN } from "@openma/egress/testing";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hostProbes } from "../../apps/openma/src/sandbox.ts";
import { type ChildServer, startServeProcess } from "../support/child-server.ts";
import { TEST_API_KEY } from "../support/server.ts";
import { until } from "../support/until.ts";

const MODEL_KEY = "sk-scripted-egress";
const SECRET = `real-secret-${randomBytes(16).toString("hex")}`;

/**
 * What the sandbox runs (heredoc'd into a file): two fetches through the proxy variables (Node's fetch tunnels
 * every URL with CONNECT, so a refusal is a failed tunnel), and a plain-HTTP request in absolute form to the
 * proxy the variables name (what curl sends for http://), whose refusal is the 403 with its reason; one JSON line.
 */
const PROBE = (u: Urls) => `
const http = require("node:http");
const plain = (url) => new Promise((r) => {
  const proxy = new URL(process.env.HTTP_PROXY);
  http.get({ host: proxy.hostname, port: proxy.port, path: url }, (res) => {
    let b = ""; res.on("data", (c) => (b += c)); res.on("end", () => r(res.statusCode + ":" + b));
  }).on("error", (e) => r("error:" + e.code));
});
const get = async (url, headers) => {
  try {
    const res = await fetch(url, { headers, signal: AbortSignal.timeout(15000) });
    return res.status + ":" + (await res.text());
  } catch (e) { return "error:" + (e.cause?.code ?? e.message); }
};
(async () => {
  const auth = { authorization: "Bearer " + process.env.API_TOKEN };
  const out = { placeholder: process.env.API_TOKEN ?? null };
  out.check = await get("${u.https}/check", auth);
  out.echo = await get("${u.https}/echo", auth);
  out.plainUp = await plain("${u.http}/plain");
  out.denied = await plain("http://denied.example/");
  out.deniedTls = await get("https://denied.example/");
  out.api = await plain("${u.api}/v1/agents");
  out.metadata = await plain("http://169.254.169.254/latest/meta-data/");
  console.log(JSON.stringify(out));
})();
`;

/** The upstreams (HTTPS with the test CA, plain HTTP) on the host's non-loopback address, and the server's own API. */
interface Urls {
  https: string;
  http: string;
  api: string;
}

const bashCommand = (u: Urls) =>
  [
    "cat > /tmp/probe.js <<'PROBE'",
    PROBE(u),
    "PROBE",
    "node /tmp/probe.js > /mnt/session/outputs/probe.json",
    `(${LEAK_SCAN[2]}) > /mnt/session/outputs/scan.txt`,
    "cat /mnt/session/outputs/probe.json",
  ].join("\n");

describe.each(["bubblewrap", "docker"] as const)("the egress gateway in openma serve (%s)", (driver) => {
  let upstream: https.Server;
  let plainUpstream: http.Server;
  let model: ScriptedModel;
  let server: ChildServer;
  let urls: Urls;
  const received: (string | null)[] = [];
  const caFile = join(tmpdir(), `openma-egress-ca-${driver}-${randomBytes(4).toString("hex")}.pem`);

  beforeAll(async () => {
    const probe = await hostProbes[driver]();
    if (!probe.ok) throw new Error(`${driver} is required for this test: ${probe.reason}`);
    const hostIp = hostIpv4();
    const ca = new SandboxCa("egress-e2e-upstream");
    const leaf = ca.issue(hostIp);
    await writeFile(caFile, ca.certPem);
    upstream = https.createServer({ key: leaf.keyPem, cert: leaf.certPem }, (req, res) => {
      const auth = req.headers.authorization ?? null;
      received.push(auth);
      // `/echo` answers with what it got, as a careless upstream would: the tool result must not carry it.
      res.end(req.url === "/echo" ? `you sent ${auth}` : auth === `Bearer ${SECRET}` ? "authorized" : "unauthorized");
    });
    plainUpstream = http.createServer((_req, res) => res.end("plain upstream"));
    await new Promise<void>((resolve) => upstream.listen(0, hostIp, resolve));
    await new Promise<void>((resolve) => plainUpstream.listen(0, hostIp, resolve));
    model = await startScriptedModel({ apiKey: MODEL_KEY, script: [] });
    server = await startServeProcess({
      apiKey: TEST_API_KEY,
      outputTail: 4 * 1024 * 1024,
      env: {
        LOG_LEVEL: "info",
        OPENMA_BRAIN: "on",
        OPENMA_SANDBOX: driver,
        OPENMA_AUTO_PROVISION: "off",
        OPENMA_MODEL_BASE_URL: model.url,
        OPENMA_MODEL_API_KEY: MODEL_KEY,
        OPENMA_EXECUTION_POLL_MS: "200",
        OPENMA_EGRESS_UPSTREAM_CA: caFile,
      },
    });
    urls = {
      https: `https://${hostIp}:${(upstream.address() as AddressInfo).port}`,
      http: `http://${hostIp}:${(plainUpstream.address() as AddressInfo).port}`,
      api: server.baseURL,
    };
    model.load([
      { match: { tool_result_for: "bash" }, response: "probed", times: 10 },
      { response: { content: [{ type: "tool_use", name: "bash", input: { command: bashCommand(urls) } }] }, times: 10 },
    ]);
  }, 120_000);
  afterAll(async () => {
    await server?.close();
    await model?.close();
    for (const s of [upstream, plainUpstream]) {
      s?.closeAllConnections();
      await new Promise((resolve) => s?.close(resolve));
    }
    await rm(caFile, { force: true });
  });

  /** One session in a new environment (and vault) whose agent runs the probe once; what it saw, scanned and logged. */
  const probeSession = async (networking: Record<string, unknown>, vaultIds: string[]) => {
    const client = server.client;
    const environment = await client.beta.environments.create({
      name: `egress-${driver}`,
      config: { type: "cloud", networking } as never,
    });
    const agent = await client.beta.agents.create({
      name: "egress",
      model: "claude-test-1",
      tools: [{ type: "agent_toolset_20260401", default_config: { permission_policy: { type: "always_allow" } } }],
    });
    const session = await client.beta.sessions.create({ agent: agent.id, environment_id: environment.id, vault_ids: vaultIds });
    await client.beta.sessions.events.send(session.id, {
      events: [{ type: "user.message", content: [{ type: "text", text: "probe the network" }] }],
    });
    const events = async () => {
      const all = [];
      for await (const e of client.beta.sessions.events.list(session.id)) all.push(e);
      return all;
    };
    await until(
      async () =>
        (await events()).some(
          (e) => e.type === "session.status_idle" && (e as { stop_reason?: { type?: string } }).stop_reason?.type === "end_turn",
        ),
      "the turn to end",
      120_000,
    ).catch((err: unknown) => {
      throw new Error(`${String(err)}\n${server.output().slice(-8000)}`);
    });
    const outputs = join(server.dataDir, "outputs", session.id);
    const log = JSON.stringify(await events());
    const probed = await readFile(join(outputs, "probe.json"), "utf8").catch((err: unknown) => {
      throw new Error(`${String(err)}\nsession events: ${log.slice(-4000)}`);
    });
    return {
      seen: JSON.parse(probed) as Record<string, string | null>,
      scan: await readFile(join(outputs, "scan.txt"), "utf8"),
      log,
    };
  };

  it("limited: the allowed host gets the real secret, others a 403; the sandbox, the event log and the server log never hold it", async () => {
    const hostIp = new URL(urls.https).hostname;
    const vault = await server.client.beta.vaults.create({ display_name: "egress" });
    await server.client.beta.vaults.credentials.create(vault.id, {
      auth: {
        type: "environment_variable",
        secret_name: "API_TOKEN",
        secret_value: SECRET,
        networking: { type: "limited", allowed_hosts: [hostIp] },
      },
    });
    const { seen, scan, log } = await probeSession({ type: "limited", allowed_hosts: [hostIp] }, [vault.id]);
    const placeholder = seen.placeholder ?? "";
    expect(placeholder).toMatch(/^openma-placeholder-api_token-[0-9a-f]{24}$/);
    expect(seen.check).toBe("200:authorized");
    expect(seen.denied).toMatch(/^403:egress refused: host denied\.example is not in the environment's allowed hosts/);
    expect(seen.deniedTls).toMatch(/^error:/);
    expect(seen.plainUp).toBe("200:plain upstream");
    expect(seen.api).toMatch(/^403:egress refused: host 127\.0\.0\.1 is not in the environment's allowed hosts/);
    // The upstream received the real secret, on both requests, and never the placeholder.
    expect(received).toEqual([`Bearer ${SECRET}`, `Bearer ${SECRET}`]);

    // Inside the sandbox: the placeholder is visible, the secret is nowhere.
    expect(scan).toContain(placeholder);
    expect(scan).not.toContain(SECRET);
    expect(scan).not.toContain("PRIVATE KEY");

    // The echoed secret reached the sandbox (it is the agent's own request) but the tool result is redacted.
    expect(seen.echo).toBe(`200:you sent Bearer ${SECRET}`);
    expect(log).toContain("you sent Bearer [redacted credential]");
    expect(log).not.toContain(SECRET);

    // The server log: the audit lines, names only.
    const output = server.output();
    const audit = output
      .split("\n")
      .filter((line) => line.includes('"msg":"egress"'))
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(audit).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ type: "egress.allowed", host: hostIp, intercepted: true, credentials: ["API_TOKEN"] }),
        expect.objectContaining({
          type: "egress.denied",
          method: "GET",
          host: "denied.example",
          reason: expect.stringMatching(/allowed hosts/),
        }),
        expect.objectContaining({ type: "egress.denied", method: "CONNECT", host: "denied.example" }),
      ]),
    );
    expect(output).not.toContain(SECRET);
  }, 180_000);

  it("unrestricted: the host's other addresses yes, its loopback services (the API) and the metadata address never", async () => {
    const before = received.length;
    const { seen } = await probeSession({ type: "unrestricted" }, []);
    expect(seen.placeholder).toBeNull(); // no credential, no placeholder
    expect(seen.plainUp).toBe("200:plain upstream");
    // HTTPS to a host no credential covers is a plain tunnel: the sandbox does not trust the upstream's test CA.
    expect(seen.check).toMatch(/^error:/);
    expect(received.length).toBe(before);
    expect(seen.api).toMatch(/^403:egress refused: address 127\.0\.0\.1 is loopback/);
    expect(seen.metadata).toMatch(/^403:egress refused: address 169\.254\.169\.254 is loopback, link-local, metadata/);
    expect(seen.denied).toMatch(/^403:egress refused: cannot resolve denied\.example/);
  }, 180_000);
});
