/**
 * The 18 ACP native-state profiles of the contract's table, as data.
 *
 * A profile says, for one agent family, which environment variables point the
 * agent's native home at our isolated root and which files under that root
 * are the agent's *session* (the allowlist copied into the durable
 * namespace). Nothing else is portable: config, credentials, caches and logs
 * stay in the ephemeral root and are rebuilt on every placement.
 *
 * Paths are relative to the native root; `""` is the root itself.
 */

export type AcpArtifactKind = "directory" | "file" | "sqlite";

export interface AcpArtifactDecl {
  /** Relative to the native root; never absolute, never `..`. */
  path: string;
  /** `directory` is recursive; `sqlite` is the database plus its `-wal` and `-shm` as one unit. */
  kind: AcpArtifactKind;
  /** When false, a missing copy does not block resume (capture-only state). */
  requiredForResume: boolean;
  /** Files under a restored directory artifact to rename before the agent starts (see AcpRestoreRename). */
  restoreRename?: AcpRestoreRename;
}

/**
 * A rename applied to the base name of every file under a restored directory
 * artifact (`sed -E "s/from/to/"`; a name it leaves unchanged stays). For an
 * agent that names a session's file after the wall-clock minute it opened it
 * and opens it again on load: a restored file must not be found under the
 * name the agent would give it now. `from` must not match its own output, so
 * restoring twice renames once; neither may contain `/` (the sed delimiter).
 */
export interface AcpRestoreRename {
  from: string;
  to: string;
}

/**
 * What a restored native state lets us claim:
 * - `native-and-acp`: the declared artifacts plus `session/resume` (or
 *   `session/load`) continue the session losslessly.
 * - `acp-only`: no native transcript is a stable contract; a fresh placement
 *   may still try ACP resume by id, and falls back to canonical recovery.
 */
export type AcpResumeClaim = "native-and-acp" | "acp-only";

export interface AcpProfile {
  id: string;
  /** Display name, as in the contract's table. */
  name: string;
  /** `harbor`: locations from Harbor's installed-agent adapters; `oma`: OpenMA extension. */
  provenance: "harbor" | "oma";
  /** Registry ids and command basenames this profile claims. */
  matches: readonly string[];
  /** Environment variable → path relative to the native root. */
  env: Readonly<Record<string, string>>;
  artifacts: readonly AcpArtifactDecl[];
  resume: AcpResumeClaim;
}

const dir = (path: string, requiredForResume = true): AcpArtifactDecl => ({ path, kind: "directory", requiredForResume });
const file = (path: string): AcpArtifactDecl => ({ path, kind: "file", requiredForResume: true });
const sqlite = (path: string, requiredForResume = true): AcpArtifactDecl => ({ path, kind: "sqlite", requiredForResume });

const XDG = { XDG_DATA_HOME: "xdg-data", XDG_STATE_HOME: "xdg-state" } as const;

export const ACP_PROFILES: readonly AcpProfile[] = [
  {
    id: "claude-code",
    name: "Claude Code",
    provenance: "harbor",
    matches: ["claude-acp", "claude-agent-acp", "claude-code-acp", "claude-code"],
    env: { CLAUDE_CONFIG_DIR: "" },
    artifacts: [dir("projects")],
    resume: "native-and-acp",
  },
  {
    id: "codex",
    name: "Codex",
    provenance: "harbor",
    matches: ["codex-acp", "codex-cli", "codex-acp-bridge", "codex"],
    env: { CODEX_HOME: "" },
    artifacts: [dir("sessions")],
    resume: "native-and-acp",
  },
  {
    id: "gemini",
    name: "Gemini CLI",
    provenance: "harbor",
    matches: ["gemini", "gemini-cli"],
    env: { GEMINI_CLI_HOME: "" },
    // Gemini CLI 0.61 names a chat `chats/session-<UTC minute>-<id[0..8]>.jsonl`
    // and, on session/load, first records the loaded id as a fresh chat: in the
    // minute the session began that appends a new header (and a message-list
    // reset) to the very file it then loads, so the history is gone and the
    // load fails ("No previous sessions found"). A restored chat is renamed out
    // of that pattern; Gemini finds a chat by the id inside, not by its name.
    artifacts: [
      {
        ...dir(".gemini/tmp"),
        restoreRename: {
          from: "^session-([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}-[0-9]{2}-[^.]+[.]jsonl?)$",
          to: "session-restored-\\1",
        },
      },
    ],
    resume: "native-and-acp",
  },
  {
    id: "opencode",
    name: "OpenCode",
    provenance: "harbor",
    matches: ["opencode", "opencode-ai"],
    env: XDG,
    // Not the whole xdg-data/opencode: OpenCode keeps auth.json there. Since
    // 1.2 sessions live in opencode.db; storage/ is the older JSON layout.
    artifacts: [sqlite("xdg-data/opencode/opencode.db"), dir("xdg-data/opencode/storage", false), dir("xdg-state/opencode")],
    resume: "native-and-acp",
  },
  {
    id: "pi",
    name: "Pi / pi-acp",
    provenance: "harbor",
    matches: ["pi-acp", "pi"],
    env: { HOME: "home", PI_CODING_AGENT_DIR: "home/.pi/agent" },
    artifacts: [dir("home/.pi/agent/sessions"), file("home/.pi/pi-acp/session-map.json")],
    resume: "native-and-acp",
  },
  {
    id: "mcode",
    name: "MiniMax Code",
    provenance: "harbor",
    matches: ["mcode", "minimax-code"],
    env: { MINIMAX_DATA_DIR: "" },
    artifacts: [dir("v2/sessions"), sqlite("v2/sqlite/runtime-state.sqlite"), sqlite("v2/sqlite/session-index.sqlite")],
    resume: "native-and-acp",
  },
  {
    id: "copilot",
    name: "GitHub Copilot CLI",
    provenance: "harbor",
    matches: ["github-copilot-cli", "copilot"],
    env: { HOME: "home" },
    // Copilot CLI 1.0.102 keeps a session in session-state/<id>/ (events.jsonl,
    // workspace.yaml) and resumes from it alone; it did not create
    // session-store.db here, so that database is captured when present only.
    artifacts: [dir("home/.copilot/session-state"), sqlite("home/.copilot/session-store.db", false)],
    resume: "native-and-acp",
  },
  {
    id: "cortex-code",
    name: "Cortex Code",
    provenance: "harbor",
    matches: ["cortex-code", "cortex"],
    env: { HOME: "home" },
    artifacts: [dir("home/.snowflake/cortex/conversations")],
    resume: "native-and-acp",
  },
  {
    id: "goose",
    name: "Goose",
    provenance: "harbor",
    matches: ["goose"],
    env: XDG,
    artifacts: [dir("xdg-data/goose"), dir("xdg-state/goose")],
    resume: "native-and-acp",
  },
  {
    id: "junie",
    name: "Junie",
    provenance: "harbor",
    matches: ["junie"],
    env: { HOME: "home" },
    artifacts: [dir("home/.junie/sessions")],
    resume: "native-and-acp",
  },
  {
    id: "kimi",
    name: "Kimi CLI",
    provenance: "harbor",
    matches: ["kimi", "kimi-cli"],
    env: { KIMI_SHARE_DIR: "share" },
    artifacts: [dir("share/sessions")],
    resume: "native-and-acp",
  },
  {
    id: "qwen-code",
    name: "Qwen Code",
    provenance: "harbor",
    matches: ["qwen-code", "qwen"],
    env: { HOME: "home" },
    artifacts: [dir("home/.qwen/projects")],
    resume: "native-and-acp",
  },
  {
    id: "mistral-vibe",
    name: "Mistral Vibe",
    provenance: "harbor",
    matches: ["mistral-vibe", "vibe-acp", "vibe"],
    env: { VIBE_HOME: "" },
    // Captured for inspection, but native resume is not advertised.
    artifacts: [dir("logs/session", false)],
    resume: "acp-only",
  },
  {
    id: "dsh",
    name: "DeepSeek Harness ACP",
    provenance: "oma",
    matches: ["dsh-acp", "deepseek-harness-acp", "dsh"],
    env: { DSH_HOME: "", DSH_SESSION_ROOT: "sessions" },
    artifacts: [dir("sessions")],
    resume: "native-and-acp",
  },
  {
    id: "hermes",
    name: "Hermes",
    provenance: "oma",
    matches: ["hermes"],
    env: { HERMES_HOME: "" },
    artifacts: [sqlite("state.db")],
    resume: "native-and-acp",
  },
  // Native transcripts of these three are not a stable persistence contract:
  // the ACP checkpoint and the canonical event log carry recovery.
  { id: "aider", name: "Aider", provenance: "harbor", matches: ["aider", "aider-acp"], env: {}, artifacts: [], resume: "acp-only" },
  {
    id: "kimi-code",
    name: "Kimi Code",
    provenance: "harbor",
    matches: ["kimi-code", "kimi-code-acp"],
    env: {},
    artifacts: [],
    resume: "acp-only",
  },
  { id: "mimo", name: "MiMo", provenance: "harbor", matches: ["mimo", "mimo-acp"], env: {}, artifacts: [], resume: "acp-only" },
];

/** Agents no profile claims: ACP state root only, canonical recovery. */
export const OPAQUE_PROFILE: AcpProfile = {
  id: "opaque",
  name: "Unknown ACP agent",
  provenance: "oma",
  matches: [],
  env: {},
  artifacts: [],
  resume: "acp-only",
};

export interface AcpAgentIdentity {
  /** Registry id (e.g. `codex-acp`), preferred over the command. */
  id?: string;
  /** argv[0]; its basename is matched when the id is absent or unknown. */
  command?: string;
}

function basename(command: string): string {
  return command.slice(command.lastIndexOf("/") + 1);
}

/** The profile for an agent: by registry id first, then by command basename, else opaque. */
export function profileFor(agent: AcpAgentIdentity): AcpProfile {
  const byId = agent.id ? ACP_PROFILES.find((p) => p.id === agent.id || p.matches.includes(agent.id as string)) : undefined;
  if (byId) return byId;
  const base = agent.command ? basename(agent.command) : "";
  return (base && ACP_PROFILES.find((p) => p.matches.includes(base))) || OPAQUE_PROFILE;
}

export function profileById(id: string): AcpProfile | undefined {
  return id === OPAQUE_PROFILE.id ? OPAQUE_PROFILE : ACP_PROFILES.find((p) => p.id === id);
}
