import { defineConfig } from "vitest/config";

/**
 * Real ACP agents beyond the default run's Codex (Gemini CLI, Claude Code,
 * OpenCode, Qwen Code, pi-acp, Copilot CLI), each through the runner
 * (`<agent>.agent-e2e.ts`) and through `openma serve`
 * (`<agent>-server.agent-e2e.ts`): each installs its release once into the
 * agent cache (100-400 MB each) and a scenario takes up to several minutes,
 * so they stay out of `npm test`.
 * `npm run test:integration:acp` runs them with the default ACP tests.
 */
export default defineConfig({
  test: {
    include: [
      "test/acp/**/*.test.ts",
      "test/acp/**/*.agent-e2e.ts",
      "packages/acp/src/**/*.test.ts",
      "packages/model-gateway/src/**/*.test.ts",
    ],
    testTimeout: 600_000,
    hookTimeout: 600_000,
    pool: "forks",
    maxWorkers: 1,
  },
});
