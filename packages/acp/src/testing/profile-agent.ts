/**
 * A small real ACP agent (official SDK, agent side) for the 18-profile
 * matrix. Told which profile it plays (PROFILE_AGENT_ID), it writes session
 * state where that agent family would, located only through the environment
 * variables the binding gave it, plus "noise" a real agent keeps beside it
 * (credentials, config) that must never reach the durable copy.
 *
 * SQLite stores run in WAL mode with auto-checkpoint off and the connection
 * held open across turns, so committed rows live only in the -wal file: a
 * capture that copied the base file alone would lose them.
 *
 * On session/resume or session/load it reads its files back and fails like a
 * real agent ("session not found") when they are gone; the next prompt's
 * answer reports what it found ("history=N rows=M").
 *
 * Run: node profile-agent.ts (Node 24 strips the types).
 */
import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk/unstable";

type Store = { env: string; rel: string; kind: "log" | "sqlite" | "map" | "noise" };

const log = (env: string, rel: string): Store => ({ env, rel, kind: "log" });
const db = (env: string, rel: string): Store => ({ env, rel, kind: "sqlite" });
const noise = (env: string, rel: string): Store => ({ env, rel, kind: "noise" });

/** Where each agent family keeps a session; `{sid}` is the ACP session id, `{slug}` the cwd's. */
const STORES: Record<string, Store[]> = {
  "claude-code": [log("CLAUDE_CONFIG_DIR", "projects/{slug}/{sid}.jsonl"), noise("CLAUDE_CONFIG_DIR", ".credentials.json")],
  codex: [log("CODEX_HOME", "sessions/2026/12/01/rollout-{sid}.jsonl"), noise("CODEX_HOME", "auth.json")],
  gemini: [log("GEMINI_CLI_HOME", ".gemini/tmp/{slug}/chats/session-{sid}.jsonl"), noise("GEMINI_CLI_HOME", ".gemini/settings.json")],
  opencode: [
    log("XDG_STATE_HOME", "opencode/kv.jsonl"),
    db("XDG_DATA_HOME", "opencode/opencode.db"),
    noise("XDG_DATA_HOME", "opencode/auth.json"),
  ],
  pi: [
    log("PI_CODING_AGENT_DIR", "sessions/{slug}/{sid}.jsonl"),
    { env: "HOME", rel: ".pi/pi-acp/session-map.json", kind: "map" },
    noise("PI_CODING_AGENT_DIR", "auth.json"),
  ],
  mcode: [
    log("MINIMAX_DATA_DIR", "v2/sessions/{sid}.jsonl"),
    db("MINIMAX_DATA_DIR", "v2/sqlite/runtime-state.sqlite"),
    db("MINIMAX_DATA_DIR", "v2/sqlite/session-index.sqlite"),
    noise("MINIMAX_DATA_DIR", "config.json"),
  ],
  copilot: [
    log("HOME", ".copilot/session-state/{sid}/events.jsonl"),
    db("HOME", ".copilot/session-store.db"),
    noise("HOME", ".copilot/config.json"),
  ],
  "cortex-code": [log("HOME", ".snowflake/cortex/conversations/{sid}.jsonl"), noise("HOME", ".snowflake/connections.toml")],
  goose: [log("XDG_DATA_HOME", "goose/sessions/{sid}.jsonl"), log("XDG_STATE_HOME", "goose/logs.jsonl"), noise("XDG_DATA_HOME", "keyring")],
  junie: [log("HOME", ".junie/sessions/{sid}.jsonl"), noise("HOME", ".junie/credentials")],
  kimi: [log("KIMI_SHARE_DIR", "sessions/{sid}/context.jsonl"), noise("KIMI_SHARE_DIR", "credentials.json")],
  "qwen-code": [log("HOME", ".qwen/projects/{slug}/chats/{sid}.jsonl"), noise("HOME", ".qwen/oauth_creds.json")],
  "mistral-vibe": [log("VIBE_HOME", "logs/session/{sid}.jsonl"), noise("VIBE_HOME", ".env")],
  dsh: [log("DSH_SESSION_ROOT", "{sid}.jsonl"), noise("DSH_HOME", "config.toml")],
  hermes: [db("HERMES_HOME", "state.db"), noise("HERMES_HOME", ".env")],
  aider: [],
  "kimi-code": [],
  mimo: [],
  opaque: [],
};

/** What each family advertises: native families continue, ACP-only ones cannot. */
const CONTINUE: Record<string, "resume" | "load" | "none"> = {
  "claude-code": "resume",
  codex: "resume",
  "qwen-code": "resume",
  dsh: "resume",
  "mistral-vibe": "none",
  aider: "none",
  "kimi-code": "none",
  mimo: "none",
  opaque: "none",
};

const profile = process.env.PROFILE_AGENT_ID ?? "opaque";
const stores = STORES[profile];
if (!stores) throw new Error(`unknown profile ${profile}`);
const mode = CONTINUE[profile] ?? "load";

function where(store: Store, sid: string, cwd: string): string {
  const root = process.env[store.env];
  if (!root) throw new Error(`${store.env} is not bound`);
  const slug = cwd.replaceAll("/", "-");
  return `${root}/${store.rel.replaceAll("{sid}", sid).replaceAll("{slug}", slug)}`;
}

const dbs = new Map<string, DatabaseSync>();
function openDb(path: string): DatabaseSync {
  let d = dbs.get(path);
  if (!d) {
    mkdirSync(dirname(path), { recursive: true });
    d = new DatabaseSync(path);
    d.exec("PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; CREATE TABLE IF NOT EXISTS turns (n INTEGER, text TEXT)");
    dbs.set(path, d);
  }
  return d;
}

type Live = { cwd: string; turns: number; restored: { history: number; rows: number } | null };
const sessions = new Map<string, Live>();

function record(sid: string, live: Live, text: string): void {
  live.turns += 1;
  let firstLog: string | null = null;
  for (const s of stores as Store[]) {
    const path = where(s, sid, live.cwd);
    mkdirSync(dirname(path), { recursive: true });
    if (s.kind === "log") {
      appendFileSync(path, `${JSON.stringify({ turn: live.turns, text })}\n`);
      firstLog ??= path;
    } else if (s.kind === "sqlite") {
      openDb(path).prepare("INSERT INTO turns VALUES (?, ?)").run(live.turns, text);
    } else if (s.kind === "map") {
      // Like pi-acp: an absolute path to the transcript.
      writeFileSync(path, JSON.stringify({ version: 1, sessions: { [sid]: { sessionId: sid, cwd: live.cwd, sessionFile: firstLog } } }));
    } else {
      writeFileSync(path, "secret-that-must-not-be-checkpointed");
    }
  }
  const root = process.env.OPENMA_ACP_STATE_ROOT;
  if (root) writeFileSync(`${root}/native/started`, profile);
}

function readBack(sid: string, cwd: string): { history: number; rows: number } {
  let history = -1;
  let rows = 0;
  for (const s of stores as Store[]) {
    if (s.kind === "noise") continue;
    const path = where(s, sid, cwd);
    if (s.kind === "map") {
      const map = JSON.parse(readFileSync(path, "utf8")) as { sessions: Record<string, { sessionFile: string }> };
      const file = map.sessions[sid]?.sessionFile;
      if (!file || !existsSync(file)) throw new Error(`session map points at a missing file`);
      continue;
    }
    if (!existsSync(path)) throw new Error(`session ${sid} not found (${s.rel})`);
    if (s.kind === "log" && history < 0) history = readFileSync(path, "utf8").split("\n").filter(Boolean).length;
    if (s.kind === "sqlite") {
      const d = new DatabaseSync(path, { readOnly: true });
      rows += Number((d.prepare("SELECT count(*) AS c FROM turns").get() as { c: number }).c);
      d.close();
    }
  }
  // A store with no transcript (Hermes) counts its history in rows.
  return { history: history < 0 ? rows : history, rows };
}

let counter = 0;
const app = acp
  .agent()
  .onRequest(acp.methods.agent.initialize, () => ({
    protocolVersion: acp.PROTOCOL_VERSION,
    agentCapabilities: {
      loadSession: mode !== "none",
      sessionCapabilities: { ...(mode === "resume" ? { resume: {}, close: {} } : {}) },
    },
    authMethods: [],
  }))
  .onRequest(acp.methods.agent.session.new, (ctx) => {
    const sessionId = `profile-${profile}-${process.pid}-${++counter}`;
    openSession(sessionId, ctx.params.cwd);
    return { sessionId };
  })
  .onRequest(acp.methods.agent.session.resume, (ctx) => {
    const restored = readBack(ctx.params.sessionId, ctx.params.cwd);
    sessions.set(ctx.params.sessionId, { cwd: ctx.params.cwd, turns: restored.history, restored });
    return {};
  })
  .onRequest(acp.methods.agent.session.load, (ctx) => {
    const restored = readBack(ctx.params.sessionId, ctx.params.cwd);
    sessions.set(ctx.params.sessionId, { cwd: ctx.params.cwd, turns: restored.history, restored });
    return {};
  })
  .onRequest(acp.methods.agent.session.prompt, async (ctx) => {
    const live = sessions.get(ctx.params.sessionId);
    if (!live) throw acp.RequestError.resourceNotFound(ctx.params.sessionId);
    const text = ctx.params.prompt.map((b) => (b.type === "text" ? b.text : "")).join("");
    // "hang" never answers: the test kills the sandbox mid-turn.
    if (text === "hang") await new Promise(() => {});
    const restored = live.restored;
    record(ctx.params.sessionId, live, text);
    const reply = restored
      ? `profile:${profile} history=${restored.history} rows=${restored.rows}`
      : `profile:${profile} turn=${live.turns}`;
    await ctx.client.notify(acp.methods.client.session.update, {
      sessionId: ctx.params.sessionId,
      update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: reply } },
    });
    return { stopReason: "end_turn", usage: { inputTokens: 10 * live.turns, outputTokens: 3, totalTokens: 10 * live.turns + 3 } };
  })
  .onRequest(acp.methods.agent.session.close, () => ({}))
  .onNotification(acp.methods.agent.session.cancel, () => {});

function openSession(id: string, cwd: string): void {
  sessions.set(id, { cwd, turns: 0, restored: null });
}

app.connect(
  acp.ndJsonStream(
    Writable.toWeb(process.stdout) as WritableStream<Uint8Array>,
    Readable.toWeb(process.stdin) as ReadableStream<Uint8Array>,
  ),
);
