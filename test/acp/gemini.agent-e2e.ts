/** Gemini CLI (`@google/gemini-cli --acp`, bundled JS on the sandbox's node) over ACP: see agent-scenario.ts; its setup is in agents.ts. */
import { describe, it } from "vitest";
import { runAgentScenario, SANDBOX_MODEL } from "./agent-scenario.ts";
import { agentSetup } from "./agents.ts";

describe("Gemini CLI over ACP in a bubblewrap sandbox", () => {
  it("two turns, sandbox killed mid-turn 3, session/load in a fresh sandbox, then semantic recovery", async () => {
    await runAgentScenario(agentSetup("gemini", SANDBOX_MODEL));
  }, 600_000);
});
