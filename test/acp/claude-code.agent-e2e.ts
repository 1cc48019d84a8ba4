/** Claude Code (`@agentclientprotocol/claude-agent-acp`, with the claude binary from npm) over ACP: see agent-scenario.ts. */
import { KNOWN_AGENT_RELEASES } from "@openma/acp";
import { describe, it } from "vitest";
import { GATEWAY_PORT, PLACEHOLDER, runAgentScenario } from "./agent-scenario.ts";

const release = KNOWN_AGENT_RELEASES.find((r) => r.id === "claude-agent-acp");

describe("Claude Code over ACP in a bubblewrap sandbox", () => {
  it("two turns, sandbox killed mid-turn 3, native resume in a fresh sandbox, then semantic recovery", async () => {
    if (!release) throw new Error("claude-agent-acp release missing");
    await runAgentScenario({
      release,
      profile: "claude-code",
      keyStyle: "x-api-key",
      env: {
        ANTHROPIC_BASE_URL: `http://127.0.0.1:${GATEWAY_PORT}`,
        ANTHROPIC_API_KEY: PLACEHOLDER,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
      },
      expectedContinue: "resume",
      reportsUsage: true,
    });
  }, 600_000);
});
