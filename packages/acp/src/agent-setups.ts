/**
 * How each real agent reaches a model and where its settings go, given the
 * model endpoint it sees: `openma serve`'s ACP sessions and the e2e scenarios
 * (inside a sandbox, through the host-side model gateway, with a placeholder
 * key) and bench/acp-agents.ts (on the host, straight at the scripted model)
 * run the same setup. Configuration is rebuilt on every placement, never
 * restored from a checkpoint.
 */
import type { ModelKeyStyle } from "@openma/model-gateway";
import { type AcpAgentRelease, KNOWN_AGENT_RELEASES } from "./agent-cache.ts";
import type { AcpStateBinding } from "./binding.ts";
import type { AcpStatePort } from "./native-state.ts";
import type { AcpAgentLaunch } from "./session-runner.ts";

/**
 * The model as the agent sees it: an origin (no path), the key it presents,
 * and the model id it asks for: the session's agent's `model` (as pinned by
 * the session's agent version). Without one (the Managed Agents API always
 * has one; tests and the bench may leave it out) the agent's default below.
 */
export interface ModelEndpoint {
  origin: string;
  key: string;
  model?: string | undefined;
}

/** An endpoint with the model id settled. */
type Endpoint = ModelEndpoint & { model: string };

export interface AgentSetup {
  release: AcpAgentRelease;
  /** The model id the agent asks for (each agent reads it its own way: docs/acp.md "What each real agent needs"). */
  model: string;
  /** The profile directory under the durable namespace (`codex`, `opencode`, ...). */
  profile: string;
  keyStyle: ModelKeyStyle;
  env: Record<string, string>;
  /** Writes the agent's configuration into its live home on every placement (never checkpointed). */
  configure?: (binding: AcpStateBinding, state: AcpStatePort) => Promise<void>;
  /** Side rules for the agent's auxiliary requests. */
  sideRules?: unknown[];
  expectedContinue: "resume" | "load";
  /** The agent returns PromptResponse.usage. */
  reportsUsage?: boolean;
}

const release = (id: string): AcpAgentRelease => {
  const found = KNOWN_AGENT_RELEASES.find((r) => r.id === id);
  if (!found) throw new Error(`no known release ${id}`);
  return found;
};

async function mkdirP(state: AcpStatePort, dir: string): Promise<void> {
  const made = await state.exec(["mkdir", "-p", dir]);
  if (made.exitCode !== 0) throw new Error(`mkdir ${dir}: ${made.stderr}`);
}

/** Each agent's model when the endpoint names none, in the dialect it speaks. */
export const DEFAULT_AGENT_MODELS = {
  codex: "gpt-5.3-codex",
  gemini: "gemini-2.5-flash",
  "claude-code": "claude-sonnet-4-5",
  opencode: "claude-sonnet-4-5",
  "qwen-code": "qwen3-coder-plus",
  pi: "claude-sonnet-4-5",
  copilot: "claude-sonnet-4.5",
} as const;

const toml = (s: string) => JSON.stringify(s);

const SETUPS = {
  codex: (m: Endpoint): AgentSetup => ({
    release: release("codex-acp"),
    model: m.model,
    profile: "codex",
    keyStyle: "bearer",
    env: { OPENMA_MODEL_API_KEY: m.key },
    expectedContinue: "resume",
    // Codex reads its model provider from CODEX_HOME/config.toml.
    configure: (binding, state) =>
      state.writeFile(
        `${binding.nativePath}/config.toml`,
        [
          `model = ${toml(m.model)}`,
          'model_provider = "openma"',
          'approval_policy = "never"',
          'sandbox_mode = "danger-full-access"',
          "[model_providers.openma]",
          'name = "OpenMA model gateway"',
          `base_url = "${m.origin}/v1"`,
          'env_key = "OPENMA_MODEL_API_KEY"',
          'wire_api = "responses"',
          "",
        ].join("\n"),
      ),
  }),
  gemini: (m: Endpoint): AgentSetup => ({
    release: release("gemini"),
    model: m.model,
    profile: "gemini",
    keyStyle: "x-goog-api-key",
    env: { GOOGLE_GEMINI_BASE_URL: m.origin, GEMINI_API_KEY: m.key, GEMINI_MODEL: m.model },
    // Gemini CLI advertises session/load only.
    expectedContinue: "load",
    // Its routing classifier asks for a JSON complexity score and rejects one below 1.
    sideRules: [{ label: "router", match: { json_output: true }, json: { complexity_reasoning: "simple", complexity_score: 10 } }],
    // Its start-up session cleanup deletes every chat file sharing an id prefix
    // with a header-only one, and each session/load leaves a header-only chat
    // for the loaded id: on the placement after that, the session itself would
    // go. Retention of a managed session's chats is ours (the durable copy).
    configure: async (binding, state) => {
      await mkdirP(state, `${binding.nativePath}/.gemini`);
      await state.writeFile(
        `${binding.nativePath}/.gemini/settings.json`,
        JSON.stringify({ general: { sessionRetention: { enabled: false } } }),
      );
    },
  }),
  "claude-code": (m: Endpoint): AgentSetup => ({
    release: release("claude-agent-acp"),
    model: m.model,
    profile: "claude-code",
    keyStyle: "x-api-key",
    env: {
      ANTHROPIC_BASE_URL: m.origin,
      ANTHROPIC_API_KEY: m.key,
      ANTHROPIC_MODEL: m.model,
      // Listed as a model of its own, so the adapter keeps the id as given rather than matching it to the
      // nearest entry of its model list (its session-model.js). The CLI itself still maps ids it knows as
      // retired onto current ones (`claude-opus-4-1` asked for `claude-opus-5-5`); others pass verbatim.
      ANTHROPIC_CUSTOM_MODEL_OPTION: m.model,
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    },
    expectedContinue: "resume",
    reportsUsage: true,
  }),
  opencode: (m: Endpoint): AgentSetup => ({
    release: release("opencode"),
    model: m.model,
    profile: "opencode",
    keyStyle: "x-api-key",
    env: {
      // No models.dev catalogue fetch, no self-update, no language-server downloads: the sandbox has no network.
      OPENCODE_DISABLE_MODELS_FETCH: "1",
      OPENCODE_DISABLE_AUTOUPDATE: "1",
      OPENCODE_DISABLE_LSP_DOWNLOAD: "1",
      // Its configuration travels as environment (its config directory is not an artifact).
      OPENCODE_CONFIG_CONTENT: JSON.stringify({
        model: `anthropic/${m.model}`,
        small_model: `anthropic/${m.model}`,
        autoupdate: false,
        share: "disabled",
        permission: { edit: "allow", bash: "allow" },
        // Listed, so an id its bundled catalogue lacks is still a model of the provider.
        provider: { anthropic: { options: { baseURL: `${m.origin}/v1`, apiKey: m.key }, models: { [m.model]: {} } } },
      }),
    },
    expectedContinue: "resume",
    reportsUsage: true,
  }),
  "qwen-code": (m: Endpoint): AgentSetup => ({
    release: release("qwen-code"),
    model: m.model,
    profile: "qwen-code",
    keyStyle: "bearer",
    // Chat Completions.
    env: { OPENAI_BASE_URL: `${m.origin}/v1`, OPENAI_API_KEY: m.key, OPENAI_MODEL: m.model },
    expectedContinue: "resume",
    // After each turn a background "managed memory" agent asks the model what to remember: nothing.
    sideRules: [
      { label: "memory", match: { last_user_text_contains: "Managed memory has TWO directories" }, response: "Nothing to save." },
    ],
  }),
  pi: (m: Endpoint): AgentSetup => ({
    release: release("pi-acp"),
    model: m.model,
    profile: "pi",
    keyStyle: "x-api-key",
    env: { PI_OFFLINE: "1", PI_SKIP_VERSION_CHECK: "1", OPENMA_MODEL_API_KEY: m.key },
    // pi-acp advertises session/load only.
    expectedContinue: "load",
    // pi reads its providers from the agent directory.
    configure: async (binding, state) => {
      const agentDir = `${binding.nativePath}/home/.pi/agent`;
      await mkdirP(state, agentDir);
      const provider = {
        baseUrl: m.origin,
        api: "anthropic-messages",
        apiKey: "$OPENMA_MODEL_API_KEY",
        models: [{ id: m.model }],
      };
      await state.writeFile(`${agentDir}/models.json`, JSON.stringify({ providers: { openma: provider } }));
      await state.writeFile(`${agentDir}/settings.json`, JSON.stringify({ defaultProvider: "openma", defaultModel: m.model }));
    },
  }),
  copilot: (m: Endpoint): AgentSetup => ({
    release: release("copilot"),
    model: m.model,
    profile: "copilot",
    keyStyle: "x-api-key",
    env: {
      // Offline BYOK: no GitHub login, telemetry or self-update.
      COPILOT_OFFLINE: "true",
      COPILOT_AUTO_UPDATE: "false",
      COPILOT_ALLOW_ALL: "true",
      COPILOT_PROVIDER_TYPE: "anthropic",
      COPILOT_PROVIDER_BASE_URL: m.origin,
      COPILOT_PROVIDER_API_KEY: m.key,
      COPILOT_MODEL: m.model,
    },
    // Copilot CLI advertises session/load (and close), not session/resume.
    expectedContinue: "load",
    reportsUsage: true,
  }),
} satisfies Record<keyof typeof DEFAULT_AGENT_MODELS, (m: Endpoint) => AgentSetup>;

export type AgentName = keyof typeof SETUPS;
export const AGENT_NAMES = Object.keys(SETUPS) as AgentName[];

export function agentSetup(name: AgentName, model: ModelEndpoint): AgentSetup {
  return SETUPS[name]({ ...model, model: model.model || DEFAULT_AGENT_MODELS[name] });
}

/** The setup of the agent whose release id is `releaseId` (`codex-acp`, ...), or null when none is written down here. */
export function setupForRelease(releaseId: string, model: ModelEndpoint): AgentSetup | null {
  for (const name of AGENT_NAMES) {
    const setup = agentSetup(name, model);
    if (setup.release.id === releaseId) return setup;
  }
  return null;
}

/**
 * The command line of a release installed at `agentDir`, with `nodeDir` as
 * the Node it runs on when it needs a newer one than `node` on PATH. PATH
 * puts that Node and the release's own programs (pi-acp spawns `pi`) first.
 */
export function agentLaunch(
  r: AcpAgentRelease,
  where: { agentDir: string; nodeDir: string },
): { command: string; args: string[]; path: string } {
  const bin = `${where.agentDir}/${r.bin}`;
  const node = r.nodeMajor ? `${where.nodeDir}/node` : "node";
  const path = `${r.nodeMajor ? `${where.nodeDir}:` : ""}${where.agentDir}/node_modules/.bin:/usr/local/bin:/usr/bin:/bin`;
  return r.node ? { command: node, args: [bin, ...r.args], path } : { command: bin, args: [...r.args], path };
}

/**
 * The agent process of release `r` (the pinned one, which may be another
 * version than `setup.release`) inside a sandbox, for AcpSessionRunner: its
 * command line (agentLaunch), a throwaway HOME and TMPDIR (the native state
 * is bound by the profile), and the setup's environment.
 */
export function sandboxAgentProcess(r: AcpAgentRelease, setup: AgentSetup, where: { agentDir: string; nodeDir: string }): AcpAgentLaunch {
  const launch = agentLaunch(r, where);
  return {
    id: r.id,
    command: launch.command,
    args: launch.args,
    env: { TMPDIR: "/tmp", HOME: "/tmp", PATH: launch.path, ...setup.env },
  };
}
