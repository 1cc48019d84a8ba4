/**
 * A file above the SDK's 5 MB threshold goes through sandbox-api's
 * multipart upload (initiate, parts, complete) and comes back byte for
 * byte, against the Blaxel stand-in over a real local container.
 */
import { randomBytes } from "node:crypto";
import { type BlaxelStandIn, startBlaxelStandIn } from "@openma/standin-blaxel";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { blaxelConfigFromEnv, createBlaxelDriver } from "./index.ts";

const never = () => new AbortController().signal;

describe("a large file on the blaxel driver", () => {
  let standIn: BlaxelStandIn;
  beforeAll(async () => {
    standIn = await startBlaxelStandIn();
  });
  afterAll(async () => {
    await standIn?.close();
  });

  it("round-trips 6 MiB through the multipart upload", async () => {
    const config = blaxelConfigFromEnv(standIn.env);
    if ("missing" in config) throw new Error(`the stand-in's env lacks ${config.missing.join(", ")}`);
    const driver = createBlaxelDriver(config);
    const scope = { environmentId: "env_large", sessionId: "sesn_large" };
    const fence = { scope, ownerId: "owner-large", generation: 1, expiresAt: Date.now() + 600_000 };
    const acquired = await driver.acquire({
      scope,
      fence,
      workspace: { bindingId: "ws", strategy: "ephemeral", mountPath: "/workspace" },
      outputs: null,
      idempotencyKey: "large",
      signal: never(),
    });
    if (acquired.type !== "acquired") throw new Error(acquired.reason);
    const tools = driver.toolSandbox(acquired.lease);
    const content = randomBytes(6 * 1024 * 1024);
    expect(await tools.writeFile({ path: "/workspace/big.bin", content, signal: never() })).toEqual({ type: "ok", bytes: content.length });
    const read = await tools.readFile({ path: "/workspace/big.bin", maxBytes: 8 * 1024 * 1024, signal: never() });
    expect(read.type === "ok" && Buffer.from(read.content).equals(content)).toBe(true);
    const paths = standIn.requests.map((r) => `${r.method} ${r.path.replace(/^\/run\/[^/]+\/sandboxes\/[^/]+/, "")}`);
    expect(paths.some((p) => p.startsWith("POST /filesystem-multipart/initiate/"))).toBe(true);
    expect(paths.filter((p) => /^PUT \/filesystem-multipart\/[^/]+\/part$/.test(p))).toHaveLength(2);
    expect(paths.some((p) => /^POST \/filesystem-multipart\/[^/]+\/complete$/.test(p))).toBe(true);
    expect(await driver.terminate({ scope, fence, lease: acquired.lease, reason: "completed", signal: never() })).toEqual({
      type: "terminated",
    });
    expect(standIn.live()).toBe(0);
  });
});
