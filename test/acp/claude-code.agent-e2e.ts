/** Claude Code (`@agentclientprotocol/claude-agent-acp`, with the claude binary from npm) over ACP: see agent-scenario.ts; its setup is in agents.ts. */
import { describe, it } from "vitest";
import { runAgentScenario, SANDBOX_MODEL } from "./agent-scenario.ts";
import { agentSetup } from "./agents.ts";

describe("Claude Code over ACP in a bubblewrap sandbox", () => {
  it("two turns, sandbox killed mid-turn 3, native resume in a fresh sandbox, then semantic recovery", async () => {
    await runAgentScenario(agentSetup("claude-code", SANDBOX_MODEL));
  }, 600_000);
});
