/**
 * The litebox lane: the shared driver suite on BoxLite's embedded micro-VM
 * runtime, booting boxes from the OCI layout built from our sandbox image.
 *
 * The only lane with a declared environment skip (issue 14): a micro-VM
 * boots only on a host whose KVM can run libkrun's guest kernel, and this
 * project's CI machines are nested PVM guests where it cannot. So the file
 * first really boots one VM (bounded; see boot.ts) and prints the runtime's
 * own error when that fails. Where no VM boots, admission is checked to
 * fail closed with that error (no box is left), and the suite is skipped;
 * where a VM boots, the suite runs and nothing may skip.
 */
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describeDriver } from "@openma/driver-suite";
import { remoteDriverUnderTest } from "@openma/driver-suite/remote";
import { describe, expect, it } from "vitest";
import { createLiteboxDriver, liteboxConfigFromEnv, liteboxRuntime, liteboxRuntimeOpens, probeLiteboxBoot } from "./index.ts";

// A state directory of its own (its layout cache survives runs), never the user's ~/.boxlite.
const config = { ...liteboxConfigFromEnv(process.env), homeDir: join(tmpdir(), "openma-litebox-test") };
const probe = await probeLiteboxBoot(config);
if (!probe.booted) console.warn(`litebox: no micro-VM boots on this host (probe took ${probe.ms} ms): ${probe.error}`);

describe("litebox admission", () => {
  it.skipIf(probe.booted)("fails closed with the runtime's own boot error where no VM boots, leaving no box", async () => {
    if (probe.booted) return;
    expect(probe.error).toMatch(/VM|KVM|engine/);
    const driver = createLiteboxDriver(config);
    const scope = { environmentId: "env_litebox", sessionId: "sesn_litebox_admission" };
    const acquired = await driver.acquire({
      scope,
      fence: { scope, ownerId: "owner-litebox", generation: 1, expiresAt: Date.now() + 600_000 },
      workspace: { bindingId: "ws", strategy: "ephemeral", mountPath: "/workspace" },
      outputs: null,
      idempotencyKey: "admission",
      signal: AbortSignal.timeout(60_000),
    });
    expect(acquired).toEqual({ type: "unavailable", reason: `litebox: no micro-VM boots on this host: ${probe.error}`, retryable: false });
    expect(await driver.listOwned({ signal: AbortSignal.timeout(60_000) })).toEqual({ type: "listed", runtimes: [] });
    // The probe's own box is gone too: the runtime holds nothing (or, without KVM, does not even open).
    if (liteboxRuntimeOpens(config.homeDir)) expect(await liteboxRuntime(config.homeDir).listInfo()).toEqual([]);
    else expect(() => liteboxRuntime(config.homeDir)).toThrow(/KVM/);
    await driver.close();
  });
});

describe.skipIf(!probe.booted)("where a micro-VM boots", () => {
  describeDriver("litebox", async () => remoteDriverUnderTest({ open: () => createLiteboxDriver(config), close: async () => {} }));
});
