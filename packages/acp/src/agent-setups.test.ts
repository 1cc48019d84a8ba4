/**
 * The model id reaches each agent where that agent reads it: its
 * environment, or the configuration `configure` writes into the live home
 * on every placement. The e2e scenarios check what the real agents then ask
 * their model for (test/acp/server-scenario.ts).
 */
import { describe, expect, it } from "vitest";
import { AGENT_NAMES, type AgentName, type AgentSetup, agentSetup, DEFAULT_AGENT_MODELS, setupForRelease } from "./agent-setups.ts";
import type { AcpStateBinding } from "./binding.ts";

const MODEL = "openma-test-model-7";
const ENDPOINT = { origin: "http://127.0.0.1:18080", key: "openma-placeholder" };

/** The files an agent's `configure` writes, by path under its native home. */
async function configured(setup: AgentSetup): Promise<Record<string, string>> {
  const files: Record<string, string> = {};
  const binding = { nativePath: "/native" } as AcpStateBinding;
  await setup.configure?.(binding, {
    writeFile: async (path, content) => {
      files[path.replace("/native/", "")] = content;
    },
    exec: async () => ({ exitCode: 0, stdout: "", stderr: "" }),
  });
  return files;
}

/** Where each agent finds its model id. */
const WHERE: Record<AgentName, (env: Record<string, string>, files: Record<string, string>) => unknown> = {
  codex: (_, f) => /^model = "(.*)"$/m.exec(f["config.toml"] ?? "")?.[1],
  gemini: (env) => env.GEMINI_MODEL,
  "claude-code": (env) => env.ANTHROPIC_MODEL,
  opencode: (env) => {
    const config = JSON.parse(env.OPENCODE_CONFIG_CONTENT ?? "{}");
    return config.model === `anthropic/${Object.keys(config.provider.anthropic.models)[0]}`
      ? config.model.slice("anthropic/".length)
      : null;
  },
  "qwen-code": (env) => env.OPENAI_MODEL,
  pi: (_, f) => {
    const settings = JSON.parse(f["home/.pi/agent/settings.json"] ?? "{}");
    const models = JSON.parse(f["home/.pi/agent/models.json"] ?? "{}").providers?.openma?.models;
    return models?.[0]?.id === settings.defaultModel ? settings.defaultModel : null;
  },
  copilot: (env) => env.COPILOT_MODEL,
};

describe("agent setups hand the model id to the agent", () => {
  it.each(AGENT_NAMES)("%s: the endpoint's model, where the agent reads it", async (name) => {
    const setup = agentSetup(name, { ...ENDPOINT, model: MODEL });
    expect(setup.model).toBe(MODEL);
    expect(WHERE[name](setup.env, await configured(setup))).toBe(MODEL);
  });

  it.each(AGENT_NAMES)("%s: its default when the endpoint names no model", async (name) => {
    const setup = agentSetup(name, ENDPOINT);
    expect(setup.model).toBe(DEFAULT_AGENT_MODELS[name]);
    expect(WHERE[name](setup.env, await configured(setup))).toBe(DEFAULT_AGENT_MODELS[name]);
  });

  it("by release id, with the model", () => {
    expect(setupForRelease("codex-acp", { ...ENDPOINT, model: MODEL })?.model).toBe(MODEL);
    expect(setupForRelease("no-such-agent", { ...ENDPOINT, model: MODEL })).toBeNull();
  });
});
