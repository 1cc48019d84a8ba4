/** Qwen Code (`@qwen-code/qwen-code --acp`, on Node 24, Chat Completions) over ACP: see agent-scenario.ts; its setup is in agents.ts. */
import { describe, it } from "vitest";
import { runAgentScenario, SANDBOX_MODEL } from "./agent-scenario.ts";
import { agentSetup } from "./agents.ts";

describe("Qwen Code over ACP in a bubblewrap sandbox", () => {
  it("two turns, sandbox killed mid-turn 3, native resume in a fresh sandbox, then semantic recovery", async () => {
    await runAgentScenario(agentSetup("qwen-code", SANDBOX_MODEL));
  }, 600_000);
});
