/**
 * The shared driver suite on the Cloudflare bridge driver, against the
 * bridge stand-in: the client typed from the bridge's OpenAPI document
 * speaks REST and SSE to it, and every sandbox is a real local container.
 * Fails, never skips, when dockerd or the sandbox images are missing.
 * Then the bridge's own tar checkpoints: a tree persisted from one runtime
 * hydrates into another. After all of it the stand-in holds no sandbox and
 * the engine no container of it.
 */

import { describeDriver } from "@openma/driver-suite";
import { configFromStandIn, remoteDriverUnderTest } from "@openma/driver-suite/remote";
import { type CloudflareBridgeStandIn, startCloudflareBridgeStandIn } from "@openma/standin-cloudflare-bridge";
import { afterAll, describe, expect, it } from "vitest";
import { cloudflareBridgeConfigFromEnv, createCloudflareBridgeDriver } from "./index.ts";

let standIn: CloudflareBridgeStandIn | undefined;

const configOf = (env: Readonly<Record<string, string>>) => configFromStandIn(cloudflareBridgeConfigFromEnv(env));

describeDriver(
  "cloudflare-bridge",
  async () => {
    standIn = await startCloudflareBridgeStandIn();
    const config = configOf(standIn.env);
    return remoteDriverUnderTest({ open: () => createCloudflareBridgeDriver(config), close: async () => {} });
  },
  {
    skips: {
      "bash: persistent shell":
        "The bridge's exec takes no stdin (the conformance row lacks interactive_stdin_without_pty), so there is no long-lived shell to feed; bash runs each command in a fresh shell",
    },
  },
);

describe("the cloudflare-bridge driver's tar checkpoints and the stand-in after the suite", () => {
  afterAll(async () => {
    await standIn?.close();
  });

  it("persists /workspace of one runtime as a tar and hydrates it into a fresh one", async () => {
    expect(standIn).toBeDefined();
    const driver = createCloudflareBridgeDriver(configOf(standIn!.env));
    const signal = AbortSignal.timeout(120_000);
    const acquire = async (sessionId: string, generation: number) => {
      const scope = { environmentId: "env_cfb", sessionId };
      const fence = { scope, ownerId: "owner_cfb", generation, expiresAt: Date.now() + 600_000 };
      const workspace = { bindingId: `ws-${sessionId}`, strategy: "ephemeral" as const, mountPath: "/workspace" as const };
      const got = await driver.acquire({ scope, fence, workspace, outputs: null, idempotencyKey: `${sessionId}-${generation}`, signal });
      if (got.type !== "acquired") throw new Error(got.reason);
      return { lease: got.lease, scope, fence };
    };
    const first = await acquire("sess_cfb_a", 1);
    const tools = driver.toolSandbox(first.lease);
    const wrote = await tools.exec({
      command: ["/bin/sh", "-c", "mkdir -p /workspace/d && printf 'kept\\n' > /workspace/d/a.txt && printf 'skip' > /workspace/skip.log"],
      timeoutMs: 60_000,
      signal,
    });
    expect(wrote).toMatchObject({ type: "exited", exitCode: 0 });
    const tar = await driver.persistWorkspace(first.lease, signal, ["skip.log"]);
    expect(tar.byteLength).toBeGreaterThan(0);

    const second = await acquire("sess_cfb_b", 1);
    await driver.hydrateWorkspace(second.lease, tar, signal);
    const read = await driver.toolSandbox(second.lease).readFile({ path: "/workspace/d/a.txt", maxBytes: 1024, signal });
    expect(read.type === "ok" ? Buffer.from(read.content).toString("utf8") : read.type).toBe("kept\n");
    const skipped = await driver.toolSandbox(second.lease).stat({ path: "/workspace/skip.log", signal });
    expect(skipped.type).toBe("not_found");

    for (const held of [first, second])
      expect(await driver.terminate({ ...held, reason: "completed", signal })).toEqual({ type: "terminated" });
  }, 240_000);

  it("holds no sandbox and the engine no container of it", async () => {
    expect(standIn!.live()).toBe(0);
    expect(await standIn!.boxes.containers()).toEqual([]);
  });
});
