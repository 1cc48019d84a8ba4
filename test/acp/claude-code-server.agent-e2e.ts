/** Claude Code as a session's harness through `openma serve` and the official SDK: see server-scenario.ts. */
import { describe, expect, it } from "vitest";
import { runServerScenario } from "./server-scenario.ts";

describe("Claude Code as a session harness through openma serve", () => {
  it("two turns, kill -9 of the server mid-turn 3, session/resume after the restart and after a graceful one, then semantic recovery", async () => {
    expect(await runServerScenario("claude-code")).toEqual({ continuedWith: "resume" });
  }, 900_000);
});
