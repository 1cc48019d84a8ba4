/**
 * The shared driver suite on the cloudflare driver, against the bridge
 * stand-in with our Worker's egress route (`startCloudflareWorkerStandIn`:
 * the route's body and placeholders are the Worker's own code; every
 * sandbox is a real local container). Each acquire's egress is installed
 * before its first command, so the whole suite runs through the wrapper
 * that exports the placeholders. Enforcement itself is the real Worker's,
 * in workerd: test/cloud/cloudflare-driver-egress.test.ts.
 *
 * Then what the driver adds to the bridge's: the session's credential is
 * sent to the Worker, the sandbox sees only the placeholder the Worker
 * minted, and an acquire that adopts the runtime re-installs it.
 */

import { configFromStandIn, describeRemoteDriver } from "@openma/driver-suite/remote";
import { type CloudflareWorkerStandIn, startCloudflareWorkerStandIn } from "@openma/standin-cloudflare-bridge";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLOUDFLARE_PROVIDER, type CloudflareEgressOptions, cloudflareConfigFromEnv, createCloudflareDriver, ENV_FILE } from "./index.ts";

const SECRET = `ghp_${"s3cr3t".repeat(6)}`;
const egress: CloudflareEgressOptions = {
  egressConfig: async ({ scope }) => ({
    networking: { type: "limited", allowed_hosts: ["api.github.com"] },
    credentials: [
      { secretName: "GITHUB_TOKEN", secret: `${SECRET}-${scope.sessionId}`, hosts: ["api.github.com"], header: true, body: false },
    ],
  }),
};

describeRemoteDriver("cloudflare", {
  start: () => startCloudflareWorkerStandIn(),
  open: (standIn) => createCloudflareDriver(configFromStandIn(cloudflareConfigFromEnv(standIn.env)), { egress }),
  suite: {
    skips: {
      "bash: persistent shell":
        "The bridge's exec takes no stdin (the conformance row lacks interactive_stdin_without_pty), so there is no long-lived shell to feed; bash runs each command in a fresh shell",
    },
  },
});

describe("the cloudflare driver installs the session's egress before its first command", () => {
  let standIn: CloudflareWorkerStandIn;
  beforeAll(async () => {
    standIn = await startCloudflareWorkerStandIn();
  }, 120_000);
  afterAll(async () => {
    await standIn?.close();
  });

  it("sends the credential to the Worker, gives the sandbox only the placeholder, and mints a new one when an acquire adopts it", async () => {
    const driver = createCloudflareDriver(configFromStandIn(cloudflareConfigFromEnv(standIn.env)), { egress });
    const signal = AbortSignal.timeout(180_000);
    const scope = { environmentId: "env_cf", sessionId: "sess_cf_egress" };
    const fence = { scope, ownerId: "owner_cf", generation: 1, expiresAt: Date.now() + 600_000 };
    const workspace = { bindingId: "ws-cf", strategy: "ephemeral" as const, mountPath: "/workspace" as const };
    const acquire = async () => {
      const got = await driver.acquire({ scope, fence, workspace, outputs: null, idempotencyKey: "cf-egress-1", signal });
      if (got.type !== "acquired") throw new Error(got.reason);
      expect(got.lease.provider).toBe(CLOUDFLARE_PROVIDER);
      return got.lease;
    };
    const printenv = async (lease: Awaited<ReturnType<typeof acquire>>) => {
      const ran = await driver.toolSandbox(lease).exec({ command: ["printenv", "GITHUB_TOKEN"], timeoutMs: 60_000, signal });
      expect(ran).toMatchObject({ type: "exited", exitCode: 0 });
      return ran.type === "exited" ? Buffer.from(ran.stdout).toString("utf8").trim() : "";
    };

    // The lease is known before the acquire (the id is derived): what a host records first (ADR 0028).
    const planned = driver.plannedLease({ scope, fence, idempotencyKey: "cf-egress-1" });
    const lease = await acquire();
    expect(planned).toEqual(lease);
    const stored = standIn.egressOf(lease.runtimeId);
    expect(stored?.hosts).toEqual(["api.github.com"]);
    expect(stored?.credentials).toMatchObject([
      { secretName: "GITHUB_TOKEN", secret: `${SECRET}-sess_cf_egress`, hosts: ["api.github.com"] },
    ]);
    const first = stored?.credentials[0]?.placeholder as string;
    expect(first).toMatch(/^openma-placeholder-github_token-[0-9a-f]{24}$/);
    expect(await printenv(lease)).toBe(first);
    // The secret is nowhere in the sandbox: not in any process's environment or argv, not in the placeholder file.
    const scan = await driver.toolSandbox(lease).exec({
      command: ["/bin/sh", "-c", `cat /proc/*/environ /proc/*/cmdline ${ENV_FILE} 2>/dev/null | tr '\\0' '\\n'`],
      timeoutMs: 60_000,
      signal,
    });
    const seen = scan.type === "exited" ? Buffer.from(scan.stdout).toString("utf8") : "";
    expect(seen).toContain(first);
    expect(seen).not.toContain(SECRET);

    // A retried acquire of the same key adopts the runtime: the Worker mints new placeholders and the sandbox gets them.
    const again = await acquire();
    expect(again.runtimeId).toBe(lease.runtimeId);
    const second = standIn.egressOf(lease.runtimeId)?.credentials[0]?.placeholder as string;
    expect(second).not.toBe(first);
    expect(await printenv(again)).toBe(second);

    expect(await driver.terminate({ scope, fence, lease: again, reason: "completed", signal })).toEqual({ type: "terminated" });
    expect(standIn.egressOf(lease.runtimeId)).toBeNull();
    expect(standIn.live()).toBe(0);
  }, 240_000);

  it("fails the acquire, leaving nothing, when the Worker refuses the egress", async () => {
    const driver = createCloudflareDriver(configFromStandIn(cloudflareConfigFromEnv(standIn.env)), {
      egress: {
        egressConfig: async () => ({
          networking: { type: "unrestricted" },
          // A credential may not shadow the sandbox's plumbing: the Worker answers 400.
          credentials: [{ secretName: "PATH", secret: "x", hosts: null, header: true, body: false }],
        }),
      },
    });
    const scope = { environmentId: "env_cf", sessionId: "sess_cf_refused" };
    const fence = { scope, ownerId: "owner_cf", generation: 1, expiresAt: Date.now() + 600_000 };
    const got = await driver.acquire({
      scope,
      fence,
      workspace: { bindingId: "ws-cf-r", strategy: "ephemeral", mountPath: "/workspace" },
      outputs: null,
      idempotencyKey: "cf-refused-1",
      signal: AbortSignal.timeout(120_000),
    });
    expect(got).toMatchObject({ type: "unavailable", retryable: false });
    expect(got.type === "unavailable" ? got.reason : "").toContain("egress: 400");
    expect(standIn.live()).toBe(0);
  }, 180_000);
});
