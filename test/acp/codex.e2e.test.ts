/** Codex (`@zed-industries/codex-acp`, a native binary) over ACP: see agent-scenario.ts. */
import { KNOWN_AGENT_RELEASES } from "@openma/acp";
import { describe, it } from "vitest";
import { GATEWAY_PORT, PLACEHOLDER, runAgentScenario } from "./agent-scenario.ts";

const release = KNOWN_AGENT_RELEASES.find((r) => r.id === "codex-acp");

describe("Codex over ACP in a bubblewrap sandbox", () => {
  it("two turns, sandbox killed mid-turn 3, native resume in a fresh sandbox, then semantic recovery", async () => {
    if (!release) throw new Error("codex-acp release missing");
    await runAgentScenario({
      release,
      profile: "codex",
      keyStyle: "bearer",
      env: { OPENMA_MODEL_API_KEY: PLACEHOLDER },
      expectedContinue: "resume",
      // Codex reads its model provider from CODEX_HOME/config.toml: rebuilt on every placement, never checkpointed.
      configure: (binding, state) =>
        state.writeFile(
          `${binding.nativePath}/config.toml`,
          [
            'model = "gpt-5.3-codex"',
            'model_provider = "openma"',
            'approval_policy = "never"',
            'sandbox_mode = "danger-full-access"',
            "[model_providers.openma]",
            'name = "OpenMA model gateway"',
            `base_url = "http://127.0.0.1:${GATEWAY_PORT}/v1"`,
            'env_key = "OPENMA_MODEL_API_KEY"',
            'wire_api = "responses"',
            "",
          ].join("\n"),
        ),
    });
  }, 600_000);
});
