/** Gemini CLI (`@google/gemini-cli --acp`, bundled JS on the sandbox's node) over ACP: see agent-scenario.ts. */
import { KNOWN_AGENT_RELEASES } from "@openma/acp";
import { describe, it } from "vitest";
import { GATEWAY_PORT, PLACEHOLDER, runAgentScenario } from "./agent-scenario.ts";

const release = KNOWN_AGENT_RELEASES.find((r) => r.id === "gemini");

describe("Gemini CLI over ACP in a bubblewrap sandbox", () => {
  it("two turns, sandbox killed mid-turn 3, session/load in a fresh sandbox, then semantic recovery", async () => {
    if (!release) throw new Error("gemini release missing");
    await runAgentScenario({
      release,
      profile: "gemini",
      keyStyle: "x-goog-api-key",
      env: { GOOGLE_GEMINI_BASE_URL: `http://127.0.0.1:${GATEWAY_PORT}`, GEMINI_API_KEY: PLACEHOLDER, GEMINI_MODEL: "gemini-2.5-flash" },
      // Gemini CLI advertises session/load only.
      expectedContinue: "load",
      // Its routing classifier asks for a JSON complexity score and rejects one below 1.
      sideRules: [{ label: "router", match: { json_output: true }, json: { complexity_reasoning: "simple", complexity_score: 10 } }],
    });
  }, 600_000);
});
