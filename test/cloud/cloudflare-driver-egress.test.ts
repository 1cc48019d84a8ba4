/**
 * The `cloudflare` driver end to end through our real Worker (run in workerd
 * by miniflare, containers from the stand-in of ADR 0019, each a real local
 * box whose only way out is the Worker): the driver acquires a runtime over
 * the bridge routes, sends the session's egress (limited to api.test and
 * plain.test, the credential API_TOKEN for api.test) to the egress route
 * before any command of the session, and every command it runs sees only
 * the placeholder. A command in the sandbox that uses the placeholder
 * reaches api.test over HTTPS with the real secret in the header and the
 * body; plain.test receives the placeholder; other.test is refused with
 * 403 and a reason; the secret is nowhere the sandbox can read.
 */

import { startWorkerInWorkerd, type WorkerInWorkerd } from "@openma/cloudflare-worker/standin/workerd";
import type { ManagedSandboxLease } from "@openma/contract";
import { createCloudflareDriver } from "@openma/driver-cloudflare";
import type { RemoteSandboxDriver } from "@openma/driver-kit/remote";
import {
  LEAK_SCAN,
  limitedConfig,
  limitedProbe,
  PROBE,
  startTestUpstreams,
  TEST_SECRET_NAME,
  type TestUpstreams,
  testSecret,
  upstreamFetch,
} from "@openma/egress/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

let upstreams: TestUpstreams;
let worker: WorkerInWorkerd;
const secret = testSecret();
const scopes: string[] = [];

beforeAll(async () => {
  upstreams = await startTestUpstreams();
  worker = await startWorkerInWorkerd({ internet: (request) => upstreamFetch(upstreams, request) });
}, 180_000);

afterAll(async () => {
  await worker?.close();
  await upstreams?.close();
});

describe("the cloudflare driver through our Worker: credential egress installed before the session's first command", () => {
  let driver: RemoteSandboxDriver;
  let lease: ManagedSandboxLease;
  const signal = () => AbortSignal.timeout(120_000);
  const scope = { environmentId: "env_cf_e2e", sessionId: "sess_cf_e2e" };
  const fence = { scope, ownerId: "owner_cf_e2e", generation: 1, expiresAt: Date.now() + 600_000 };

  const run = async (command: string[]) => {
    const ran = await driver.toolSandbox(lease).exec({ command, timeoutMs: 90_000, signal: signal() });
    if (ran.type !== "exited") throw new Error(`the command did not exit: ${JSON.stringify(ran)}`);
    return { exitCode: ran.exitCode, stdout: Buffer.from(ran.stdout).toString("utf8"), stderr: Buffer.from(ran.stderr).toString("utf8") };
  };

  it("acquires a runtime whose commands see the placeholder the Worker minted", async () => {
    driver = createCloudflareDriver(
      { url: worker.url, apiKey: worker.apiKey },
      {
        egress: {
          egressConfig: async (input) => {
            scopes.push(input.scope.sessionId);
            return limitedConfig(secret);
          },
        },
      },
    );
    const got = await driver.acquire({
      scope,
      fence,
      workspace: { bindingId: "ws-cf-e2e", strategy: "ephemeral", mountPath: "/workspace" },
      outputs: null,
      idempotencyKey: "cf-e2e-1",
      signal: signal(),
    });
    if (got.type !== "acquired") throw new Error(got.reason);
    lease = got.lease;
    expect(scopes).toEqual([scope.sessionId]);
    const env = await run(["printenv", TEST_SECRET_NAME]);
    expect(env.exitCode).toBe(0);
    expect(env.stdout.trim()).toMatch(/^openma-placeholder-api_token-[0-9a-f]{24}$/);
  }, 240_000);

  it("substitutes the secret only on the credential's host, refuses other hosts, and the sandbox never sees it", async () => {
    const placeholder = (await run(["printenv", TEST_SECRET_NAME])).stdout.trim();
    const probe = await run(["node", "-e", PROBE, limitedProbe(upstreams)]);
    expect(probe.stderr).toBe("");
    expect(probe.exitCode).toBe(0);
    const seen = JSON.parse(probe.stdout) as Record<string, string | null>;
    expect(seen.placeholder).toBe(placeholder);
    // HTTPS to the credential's host: the real secret arrives, in the header and in the body.
    expect(seen.credentialHost).toBe(`200:${JSON.stringify({ method: "POST", auth: `Bearer ${secret}`, body: `token=${secret}` })}`);
    // Another allowed host: reached, with the placeholder as it was.
    expect(seen.otherAllowedHost).toBe(
      `200:${JSON.stringify({ method: "POST", auth: `Bearer ${placeholder}`, body: `token=${placeholder}` })}`,
    );
    // Any other host: refused by the Worker with a reason.
    expect(seen.deniedHttps).toMatch(/^403:egress refused: host other\.test is not in the environment's allowed hosts/);
    expect(seen.denied).toMatch(/^403:egress refused: host other\.test is not in the environment's allowed hosts/);
    expect(["ENETUNREACH", "EHOSTUNREACH", "EADDRNOTAVAIL"]).toContain(seen.direct);

    const scan = await run(LEAK_SCAN);
    expect(scan.stdout).toContain(placeholder);
    expect(scan.stdout).not.toContain(secret);
    expect(JSON.stringify(worker.containers.environments())).not.toContain(secret);
  }, 240_000);

  it("terminates the runtime at the Worker, leaving no container", async () => {
    expect(await driver.terminate({ scope, fence, lease, reason: "completed", signal: signal() })).toEqual({ type: "terminated" });
    expect(await worker.containers.boxes.containers()).toEqual([]);
  }, 120_000);
});
