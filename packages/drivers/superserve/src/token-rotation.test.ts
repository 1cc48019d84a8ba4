/**
 * What is Superserve's own in this driver, against the stand-in (real local
 * containers): the data-plane redirect touches nothing unless it is asked
 * for, and only the SDK's derived data-plane names when it is; and after
 * another process resumed the sandbox (retiring this process's access
 * token), this process's next command is refused on the wire, then
 * re-activated by the SDK and served, without the driver noticing.
 */
import { type SuperserveStandIn, startSuperserveStandIn } from "@openma/standin-superserve";
import { getGlobalDispatcher } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSuperserveDriver, isDataPlaneName, superserveConfigFromEnv } from "./index.ts";

const never = () => new AbortController().signal;

describe("the data-plane redirect", () => {
  it("is not installed without OPENMA_SUPERSERVE_DATA_PLANE_URL", () => {
    const before = getGlobalDispatcher();
    createSuperserveDriver({ apiKey: "ss_test_key" });
    expect(getGlobalDispatcher()).toBe(before);
  });

  it("covers the derived host and its per-sandbox names, nothing else", () => {
    expect(isDataPlaneName("sandbox.superserve.ai", "sandbox.superserve.ai")).toBe(true);
    expect(isDataPlaneName("boxd-0f3c.Sandbox.Superserve.ai", "sandbox.superserve.ai")).toBe(true);
    expect(isDataPlaneName("api.superserve.ai", "sandbox.superserve.ai")).toBe(false);
    expect(isDataPlaneName("evil-sandbox.superserve.ai", "sandbox.superserve.ai")).toBe(false);
    expect(isDataPlaneName("sandbox.superserve.ai.example.com", "sandbox.superserve.ai")).toBe(false);
  });
});

describe("token rotation against the stand-in", () => {
  let standIn: SuperserveStandIn;
  beforeAll(async () => {
    standIn = await startSuperserveStandIn();
  });
  afterAll(async () => {
    await standIn?.close();
  });

  it("reconnects with the fresh token after another process resumed the sandbox", async () => {
    const config = superserveConfigFromEnv(standIn.env);
    if ("missing" in config) throw new Error(config.missing.join(", "));
    const first = createSuperserveDriver(config);
    const scope = { environmentId: "env_rotate", sessionId: "sesn_rotate" };
    const fence = { scope, ownerId: "owner-rotate", generation: 1, expiresAt: Date.now() + 600_000 };
    const acquire = (driver: typeof first) =>
      driver.acquire({
        scope,
        fence,
        workspace: { bindingId: "ws", strategy: "ephemeral", mountPath: "/workspace" },
        outputs: null,
        idempotencyKey: "rotate",
        signal: never(),
      });
    const acquired = await acquire(first);
    if (acquired.type !== "acquired") throw new Error(acquired.reason);
    const tools = first.toolSandbox(acquired.lease);
    const record = standIn.table.get(acquired.lease.runtimeId);
    if (!record) throw new Error("the stand-in lost the sandbox");
    const retired = record.token;

    expect(await first.suspend({ scope, fence, lease: acquired.lease, signal: never() })).toMatchObject({ type: "suspended" });
    // Another process (a second driver instance) adopts and resumes it: a new token, the old one retired.
    const again = await acquire(createSuperserveDriver(config));
    expect(again.type === "acquired" && again.lease.runtimeId).toBe(acquired.lease.runtimeId);
    expect(record.token).not.toBe(retired);
    expect(standIn.state(acquired.lease.runtimeId)).toBe("running");

    const from = standIn.requests.length;
    const ran = await tools.exec({ command: ["echo", "after-rotation"], timeoutMs: 60_000, signal: never() });
    expect(ran.type === "exited" && Buffer.from(ran.stdout).toString()).toBe("after-rotation\n");
    const wire = standIn.requests.slice(from).map((r) => `${r.method} ${r.path} ${r.authorized ? "ok" : "refused"}`);
    // The stale token is refused (each command already under way hears it), the SDK activates once for all of
    // them, and every later call carries the fresh token.
    const activate = `POST /sandboxes/${acquired.lease.runtimeId}/activate ok`;
    expect(wire.filter((line) => line === activate)).toHaveLength(1);
    const at = wire.indexOf(activate);
    expect(wire.slice(0, at).length).toBeGreaterThan(0);
    expect(wire.slice(0, at).every((line) => line === "GET /exec/connect refused")).toBe(true);
    expect(wire.slice(at + 1)).toContain("GET /exec/connect ok");
    expect(wire.slice(at + 1).every((line) => line.endsWith(" ok"))).toBe(true);

    expect(await first.terminate({ scope, fence, lease: acquired.lease, reason: "completed", signal: never() })).toEqual({
      type: "terminated",
    });
    expect(standIn.live()).toBe(0);
    expect(await standIn.boxes.containers()).toEqual([]);
  });
});
