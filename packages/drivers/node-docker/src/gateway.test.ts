/**
 * The credential-egress gateway (@openma/egress) composed into real Docker
 * containers (`NetworkMode: none`, the gateway's socket bound inside the
 * container's namespace): unrestricted and limited networking, credential
 * substitution over intercepted HTTPS, and no secret inside the container.
 */
import type { ManagedSandboxLease } from "@openma/contract";
import type { EgressAuditEvent } from "@openma/egress";
import {
  expectLimitedAudit,
  expectNoLeak,
  expectUnrestrictedAudit,
  LEAK_SCAN,
  limitedConfig,
  limitedProbe,
  limitedProblems,
  PROBE,
  startTestUpstreams,
  type TestUpstreams,
  testGatewayPort,
  testSecret,
  unrestrictedProbe,
  unrestrictedProblems,
} from "@openma/egress/testing";
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import type { NodeDockerSandbox } from "./driver.ts";
import {
  type DockerTestEnv,
  type HostBindings,
  hostBindings,
  never,
  once,
  removeHostBindings,
  removeRunContainers,
  requireDocker,
  testFence,
  testScope,
} from "./testing.ts";

let env: DockerTestEnv;
let upstreams: TestUpstreams;
const bindings: HostBindings[] = [];

const setup = once(async () => {
  env = await requireDocker();
  upstreams = await startTestUpstreams();
});

beforeEach(setup);

afterAll(async () => {
  if (env) await removeRunContainers(env);
  await upstreams?.close();
  for (const b of bindings) await removeHostBindings(b);
});

async function acquire(driver: NodeDockerSandbox): Promise<ManagedSandboxLease> {
  const b = await hostBindings();
  bindings.push(b);
  const scope = testScope();
  const acquired = await driver.acquire({
    scope,
    fence: testFence(scope),
    workspace: b.workspace,
    outputs: b.outputs,
    idempotencyKey: "gateway",
    signal: never,
  });
  if (acquired.type !== "acquired") throw new Error(`acquire failed: ${acquired.reason}`);
  return acquired.lease;
}

async function run(driver: NodeDockerSandbox, lease: ManagedSandboxLease, command: string[]): Promise<string> {
  const result = await driver.toolSandbox(lease).exec({ command, timeoutMs: 60_000, signal: never });
  if (result.type !== "exited") throw new Error(`command ended as ${result.type}`);
  return Buffer.from(result.stdout).toString("utf8");
}

describe("node-docker behind the egress gateway", () => {
  it("unrestricted: reaches a non-loopback host address, never the host's loopback or metadata, and nothing directly", async () => {
    const audit: EgressAuditEvent[] = [];
    const driver = env.driver({
      image: env.images.base.image,
      credentialEgress: testGatewayPort(upstreams, { networking: { type: "unrestricted" }, credentials: [] }, audit),
    });
    expect(driver.capabilities.credentialEgress).toEqual({
      enforcement: "enforced",
      credentialMode: "live",
      interceptedProtocols: ["http", "https"],
    });
    const lease = await acquire(driver);
    const seen = JSON.parse(await run(driver, lease, ["node", "-e", PROBE, unrestrictedProbe(upstreams)]));
    expect(unrestrictedProblems(seen, upstreams)).toEqual([]);
    expectUnrestrictedAudit(audit, upstreams);
  });

  it("limited: substitutes the credential only for its host over HTTPS, denies the rest with 403, and the secret never enters the container", async () => {
    const audit: EgressAuditEvent[] = [];
    const secret = testSecret();
    const driver = env.driver({ image: env.images.base.image, credentialEgress: testGatewayPort(upstreams, limitedConfig(secret), audit) });
    const lease = await acquire(driver);
    const seen = JSON.parse(await run(driver, lease, ["node", "-e", PROBE, limitedProbe(upstreams)]));
    expect(limitedProblems(seen, secret)).toEqual([]);
    const scan = await run(driver, lease, LEAK_SCAN);
    expectNoLeak(scan, seen.placeholder, secret);
    const inspect = JSON.stringify(await env.docker.getContainer(lease.runtimeId).inspect());
    expect(inspect).not.toContain(secret);
    expect(inspect).toContain('"NetworkMode":"none"');
    expectLimitedAudit(audit, secret);
    await driver.terminate({ scope: testScope(), fence: testFence(testScope()), lease, reason: "completed", signal: never });
  });
});
