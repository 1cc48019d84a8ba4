/**
 * The credential-egress gateway (@openma/egress) composed into real
 * bubblewrap sandboxes: unrestricted and limited networking, credential
 * substitution over intercepted HTTPS, and no secret inside the sandbox.
 */
import { rm } from "node:fs/promises";
import { join } from "node:path";
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
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BubblewrapSandbox } from "./driver.ts";
import { acquire, assertBwrapInstalled, never, scratch } from "./test-support.ts";

const NODE = "/opt/openma-test/node";

async function run(driver: BubblewrapSandbox, lease: ManagedSandboxLease, command: string[]): Promise<string> {
  const result = await driver.toolSandbox(lease).exec({ command, timeoutMs: 60_000, signal: never() });
  if (result.type !== "exited") throw new Error(`command ended as ${result.type}`);
  return Buffer.from(result.stdout).toString("utf8");
}

describe("bubblewrap behind the egress gateway", () => {
  let root: string;
  let upstreams: TestUpstreams;
  const drivers: BubblewrapSandbox[] = [];

  beforeAll(async () => {
    assertBwrapInstalled();
    root = await scratch("bwrap-gateway");
    upstreams = await startTestUpstreams();
  });

  afterAll(async () => {
    for (const d of drivers) await d.shutdown();
    await upstreams?.close();
    if (root) await rm(root, { recursive: true, force: true });
  });

  function driverWith(name: string, port: ReturnType<typeof testGatewayPort>): BubblewrapSandbox {
    const driver = new BubblewrapSandbox({
      stateRoot: join(root, name),
      credentialEgress: port,
      binds: [{ source: process.execPath, target: NODE }],
    });
    drivers.push(driver);
    return driver;
  }

  it("unrestricted: reaches a non-loopback host address, never the host's loopback or metadata, and nothing directly", async () => {
    const audit: EgressAuditEvent[] = [];
    const driver = driverWith("unrestricted", testGatewayPort(upstreams, { networking: { type: "unrestricted" }, credentials: [] }, audit));
    expect(driver.capabilities.credentialEgress).toEqual({
      enforcement: "enforced",
      credentialMode: "live",
      interceptedProtocols: ["http", "https"],
    });
    const { lease } = await acquire(driver, root);
    const seen = JSON.parse(await run(driver, lease, [NODE, "-e", PROBE, unrestrictedProbe(upstreams)]));
    expect(unrestrictedProblems(seen, upstreams)).toEqual([]);
    expectUnrestrictedAudit(audit, upstreams);
  });

  it("limited: substitutes the credential only for its host over HTTPS, denies the rest with 403, and the secret never enters the sandbox", async () => {
    const audit: EgressAuditEvent[] = [];
    const secret = testSecret();
    const driver = driverWith("limited", testGatewayPort(upstreams, limitedConfig(secret), audit));
    const { lease } = await acquire(driver, root);
    const seen = JSON.parse(await run(driver, lease, [NODE, "-e", PROBE, limitedProbe(upstreams)]));
    expect(limitedProblems(seen, secret)).toEqual([]);
    // curl trusts the sandbox CA through the system trust store the driver overlays.
    const curl = await run(driver, lease, [
      "/bin/sh",
      "-c",
      `curl -sS --max-time 20 -H "Authorization: Bearer $API_TOKEN" https://api.test:${upstreams.httpsPort}/echo`,
    ]);
    expect(JSON.parse(curl)).toEqual({ method: "GET", auth: `Bearer ${secret}`, body: "" });
    const scan = await run(driver, lease, LEAK_SCAN);
    expectNoLeak(scan, seen.placeholder, secret);
    expectLimitedAudit(audit, secret);
  });
});
