/** GitHub Copilot CLI (`@github/copilot`, its native binary, offline BYOK) over ACP: see agent-scenario.ts; its setup is in agents.ts. */
import { describe, it } from "vitest";
import { runAgentScenario, SANDBOX_MODEL } from "./agent-scenario.ts";
import { agentSetup } from "./agents.ts";

describe("GitHub Copilot CLI over ACP in a bubblewrap sandbox", () => {
  it("two turns, sandbox killed mid-turn 3, session/load in a fresh sandbox, then semantic recovery", async () => {
    await runAgentScenario(agentSetup("copilot", SANDBOX_MODEL));
  }, 600_000);
});
