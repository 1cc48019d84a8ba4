/**
 * The cloudflare driver's enforced credential egress, end to end: our
 * Worker (packages/cloudflare-worker, bundled as `wrangler` would and run in
 * workerd by miniflare, one instance for the file) with the official bridge
 * routes, and a container that is a real local Docker box whose only way
 * out is that Worker. The container half is the stand-in of ADR 0019 (no
 * real container runs offline); everything the evidence is about runs in
 * workerd: the egress route, the Durable Object's storage, the SDK's
 * outbound registration and ContainerProxy, and our `outbound` handler.
 *
 * From inside the container (the same probe the local gateway suites run):
 * HTTPS to the credential's host carries the real secret at the far end in
 * the header and the body; another allowed host receives the placeholder;
 * any other host, over HTTP or HTTPS, is refused with 403 and a reason; no
 * direct route exists; and the secret is nowhere the sandbox can read.
 */

import { startWorkerInWorkerd, type WorkerInWorkerd } from "@openma/cloudflare-worker/standin/workerd";
import { LEAK_SCAN, limitedProbe, PROBE, startTestUpstreams, type TestUpstreams, testSecret, upstreamFetch } from "@openma/egress/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

let upstreams: TestUpstreams;
let worker: WorkerInWorkerd;
let workerUrl: string;
const secret = testSecret();

function api(path: string, init: RequestInit = {}): Promise<Response> {
  return fetch(`${workerUrl}${path}`, { ...init, headers: { authorization: `Bearer ${worker.apiKey}`, ...init.headers } });
}

/** Runs argv through the bridge's exec route; returns stdout and the exit code from its SSE stream. */
async function exec(id: string, session: string, argv: string[]): Promise<{ stdout: string; exit: number | null; errors: string[] }> {
  const res = await api(`/v1/sandbox/${id}/exec`, {
    method: "POST",
    headers: { "content-type": "application/json", "session-id": session },
    body: JSON.stringify({ argv }),
  });
  expect(res.status).toBe(200);
  let stdout = "";
  let exit: number | null = null;
  const errors: string[] = [];
  for (const block of (await res.text()).split("\n\n")) {
    const event = /^event: (.*)$/m.exec(block)?.[1];
    const data = [...block.matchAll(/^data: (.*)$/gm)].map((m) => m[1]).join("\n");
    if (event === "stdout") stdout += Buffer.from(data, "base64").toString("utf8");
    else if (event === "exit") exit = (JSON.parse(data) as { exit_code: number }).exit_code;
    else if (event === "error") errors.push(data);
  }
  return { stdout, exit, errors };
}

beforeAll(async () => {
  upstreams = await startTestUpstreams();
  worker = await startWorkerInWorkerd({ internet: (request) => upstreamFetch(upstreams, request) });
  workerUrl = worker.url;
}, 180_000);

afterAll(async () => {
  await worker?.close();
  await upstreams?.close();
});

describe("cloudflare Worker: credential egress enforced in the outbound handler", () => {
  it("refuses the egress route without the API key", async () => {
    const res = await fetch(`${workerUrl}/openma/v1/sandbox/abc/egress`, { method: "PUT", body: "{}" });
    expect(res.status).toBe(401);
  });

  it("substitutes the credential only for its host, refuses every other host, and the sandbox never sees the secret", async () => {
    const { id } = (await (await api("/v1/sandbox", { method: "POST" })).json()) as { id: string };
    // Before the control plane configures it, the container (already started by the bridge's pool) reaches nothing.
    const bare = await api(`/v1/sandbox/${id}/session`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    const early = await exec(id, ((await bare.json()) as { id: string }).id, ["node", "-e", PROBE, limitedProbe(upstreams)]);
    const before = JSON.parse(early.stdout) as Record<string, string | null>;
    for (const key of ["credentialHost", "otherAllowedHost", "deniedHttps", "denied"])
      expect(before[key]).toMatch(/^403:egress refused: this sandbox has no egress configuration/);

    const configured = await api(`/openma/v1/sandbox/${id}/egress`, {
      method: "PUT",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        networking: { type: "limited", allowed_hosts: ["api.test", "plain.test"] },
        credentials: [{ secret_name: "API_TOKEN", secret, allowed_hosts: ["api.test"], injection_location: { header: true, body: true } }],
      }),
    });
    expect(configured.status).toBe(200);
    const { env } = (await configured.json()) as { env: Record<string, string> };
    const placeholder = env.API_TOKEN ?? "";
    expect(placeholder).toMatch(/^openma-placeholder-api_token-[0-9a-f]{24}$/);
    expect(JSON.stringify(env)).not.toContain(secret);

    const session = await api(`/v1/sandbox/${id}/session`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ env }),
    });
    expect(session.status).toBe(200);
    const sessionId = ((await session.json()) as { id: string }).id;

    const probe = await exec(id, sessionId, ["node", "-e", PROBE, limitedProbe(upstreams)]);
    expect(probe.errors).toEqual([]);
    expect(probe.exit).toBe(0);
    const seen = JSON.parse(probe.stdout) as Record<string, string | null>;
    expect(seen.placeholder).toBe(placeholder);
    expect(seen.caFile).toBe("/run/openma/egress/ca.pem");
    // HTTPS to the credential's host: the real secret arrives, in the header and in the body.
    expect(seen.credentialHost).toBe(`200:${JSON.stringify({ method: "POST", auth: `Bearer ${secret}`, body: `token=${secret}` })}`);
    // Another allowed host: reached, but the placeholder travels as is.
    expect(seen.otherAllowedHost).toBe(
      `200:${JSON.stringify({ method: "POST", auth: `Bearer ${placeholder}`, body: `token=${placeholder}` })}`,
    );
    // Any other host, HTTPS or HTTP: refused by the Worker with a reason.
    expect(seen.deniedHttps).toMatch(/^403:egress refused: host other\.test is not in the environment's allowed hosts/);
    expect(seen.denied).toMatch(/^403:egress refused: host other\.test is not in the environment's allowed hosts/);
    // No route around the Worker.
    expect(["ENETUNREACH", "EHOSTUNREACH", "EADDRNOTAVAIL"]).toContain(seen.direct);
    expect(seen.dns).not.toBe("resolved");

    const scan = await exec(id, sessionId, LEAK_SCAN);
    expect(scan.stdout).toContain(placeholder); // the scan does read the environment
    expect(scan.stdout).not.toContain(secret);
    expect(scan.stdout).not.toContain("PRIVATE KEY");
    // What the Durable Object handed the container: placeholders, never the secret; and it went through the SDK's container API.
    expect(JSON.stringify(worker.containers.environments())).toContain(placeholder);
    expect(JSON.stringify(worker.containers.environments())).not.toContain(secret);
    expect(worker.containers.requests.some((r) => r.path.endsWith("/port/3000/api/execute/stream"))).toBe(true);

    // The bridge's file routes reach the same container (through the SDK's /api/write and /api/read/stream).
    const put = await api(`/v1/sandbox/${id}/file/workspace/note.bin`, { method: "PUT", body: new Uint8Array([0, 1, 2, 255]) });
    expect(put.status).toBe(200);
    const got = await api(`/v1/sandbox/${id}/file/workspace/note.bin`);
    expect([...new Uint8Array(await got.arrayBuffer())]).toEqual([0, 1, 2, 255]);

    const gone = await api(`/v1/sandbox/${id}`, { method: "DELETE" });
    expect(gone.status).toBeLessThan(300);
    expect(await worker.containers.boxes.containers()).toEqual([]);
  }, 180_000);
});
