/** Refusals the driver makes before any wire call. */
import { describe, expect, it } from "vitest";
import { createBoxRunDriver } from "./index.ts";

describe("the boxrun driver", () => {
  it("answers an owner id too long for a box name as unavailable and not retryable, without calling the server", async () => {
    // Nothing listens on port 9: any wire call would be a network error, which is retryable.
    const driver = createBoxRunDriver({ url: "http://127.0.0.1:9", apiKey: "unused" });
    const scope = { environmentId: "env_long", sessionId: "sesn_long" };
    const acquired = await driver.acquire({
      scope,
      fence: { scope, ownerId: "o".repeat(100), generation: 1, expiresAt: Date.now() + 600_000 },
      workspace: { bindingId: "ws", strategy: "ephemeral", mountPath: "/workspace" },
      outputs: null,
      idempotencyKey: "long",
      signal: AbortSignal.timeout(30_000),
    });
    expect(acquired).toMatchObject({ type: "unavailable", retryable: false });
    expect(acquired.type === "unavailable" && acquired.reason).toMatch(/owner id is too long/);
    await driver.close();
  });
});
