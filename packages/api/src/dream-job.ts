/**
 * The dream job (ADR 0021). A dream is queued in the session execution queue
 * under its own id, so it is claimed, leased and fenced exactly as a session
 * turn is; `withDreams` routes `drm_` ids to this runner and everything else
 * to the session runner. One attempt:
 *  1. start: pending → running and, for `create_new`, a new memory store that
 *     starts as a copy of the input store, recorded in `outputs` — one
 *     transaction, so a re-run after a crash finds it done;
 *  2. read the input memories and the named sessions' transcripts and ask
 *     the model for the reorganized set of memories (a JSON document);
 *  3. finish: in one transaction that re-checks the dream is still running
 *     (a cancel that committed first wins and nothing is written), replace
 *     the output store's memories with the model's set — each difference one
 *     memory version attributed to the dream's creator — and complete.
 * The input store of a `create_new` dream is only ever read.
 */
import type { TurnRunner } from "@openma/execution";
import { type Clock, type Database, type IdFactory, type MemoryRow, type Storage, sha256Hex, toIso } from "@openma/storage";
import { recordWebhookEvents } from "@openma/webhooks";
import type { Transaction } from "kysely";
import { z } from "zod";
import { changeDream, type Dream, type DreamUsage, inputSessionsOf, inputStoreOf, loadDream, outputStoreOf, ZERO_USAGE } from "./dreams.ts";
import { insertMemoryVersion, type MemoryVersionWrite } from "./memories.ts";
import type { Actor } from "./memory-access.ts";
import { lockStoreForWrite } from "./memory-access.ts";
import { ancestorsOf } from "./memory-paths.ts";
import type { MemoryStore } from "./routes/memory-stores.ts";
import { memoryContent, memoryPath } from "./schemas/memory.ts";

/** The slice of the harness's model port a dream uses (one request, no tools). */
export interface DreamModel {
  send(
    request: { model: string; system: string | null; messages: { role: "user"; content: string }[]; tools: never[] },
    signal: AbortSignal,
  ): Promise<
    | { type: "response"; response: { content: { type: string; text?: string }[]; usage: DreamUsage } }
    | { type: "failure"; failure: { errorType: string; message: string; retryable: boolean } }
    | { type: "aborted" }
  >;
}

export interface DreamJobDeps {
  storage: Storage;
  clock: Clock;
  ids: IdFactory;
  model: DreamModel;
}

/** Transcript text per session the model sees at most (the newest part is kept). */
const MAX_TRANSCRIPT_CHARS = 60_000;
/** The whole prompt at most (memories are never cut: a store too large for one request fails the dream instead). */
const MAX_PROMPT_CHARS = 600_000;

const SYSTEM = [
  "You reorganize an agent's memory store. You get its current memories (path and content) and transcripts of past sessions.",
  "Merge duplicates, resolve contradictions in favour of the newest evidence, drop what is obsolete, and keep paths short and meaningful.",
  'Answer with one JSON object and nothing else: {"memories":[{"path":"/dir/name.md","content":"..."}]} — the complete new set of memories.',
].join("\n");

const resultSchema = z.object({
  memories: z.array(z.object({ path: memoryPath, content: memoryContent })).max(2000),
});

export function isDreamId(id: string): boolean {
  return id.startsWith("drm_");
}

/** The execution worker's runner: dreams to the dream job, sessions to `sessions`. */
export function withDreams(sessions: TurnRunner, deps: DreamJobDeps): TurnRunner {
  return {
    runTurn: (id, signal, traceparent) => (isDreamId(id) ? runDream(deps, id, signal) : sessions.runTurn(id, signal, traceparent)),
    needsTurn: async (id) => (isDreamId(id) ? dreamNeedsRun(deps.storage, id) : sessions.needsTurn(id)),
    giveUp: (id, input) => (isDreamId(id) ? failDream(deps, id, "internal_error", input.error) : sessions.giveUp(id, input)),
  };
}

async function dreamNeedsRun(storage: Storage, id: string): Promise<boolean> {
  const row = await storage.db.selectFrom("dreams").select("status").where("id", "=", id).executeTakeFirst();
  return row?.status === "pending" || row?.status === "running";
}

async function failDream(deps: DreamJobDeps, id: string, type: string, message: string, usage?: DreamUsage): Promise<void> {
  const now = toIso(deps.clock.now());
  await changeDream(deps.storage, id, (d) =>
    d.status === "pending" || d.status === "running"
      ? {
          ...d,
          status: "failed" as const,
          ended_at: now,
          error: { type, message: message.slice(0, 1000) },
          usage: addUsage(d.usage, usage ?? ZERO_USAGE),
        }
      : null,
  );
}

const END_TURN = { type: "idle", stopReason: "end_turn" } as const;

export async function runDream(deps: DreamJobDeps, id: string, signal: AbortSignal) {
  const queued = await loadDream(deps.storage.db, id);
  if (queued.status !== "pending" && queued.status !== "running") return END_TURN;
  // The inputs are read before the start step: a dream whose inputs cannot fit one request fails without an output store.
  const prompt = await renderInputs(deps.storage, queued);
  if (prompt.length > MAX_PROMPT_CHARS) {
    await failDream(
      deps,
      id,
      "input_too_large",
      `the memory store and sessions come to ${prompt.length} characters; a dream reads at most ${MAX_PROMPT_CHARS}`,
    );
    return END_TURN;
  }
  const started = await startDream(deps, id);
  if (!started) return END_TURN;
  const attempt = await deps.model.send(
    {
      model: started.model.id,
      system: started.instructions ? `${SYSTEM}\n\nGuidance from the user:\n${started.instructions}` : SYSTEM,
      messages: [{ role: "user", content: prompt }],
      tools: [],
    },
    signal,
  );
  if (attempt.type === "aborted") return { type: "interrupted" } as const;
  if (attempt.type === "failure") {
    // A transient failure is the worker's to retry (with backoff, up to its attempt cap, then giveUp).
    if (attempt.failure.retryable) throw new Error(`model request failed: ${attempt.failure.message}`);
    await failDream(deps, id, attempt.failure.errorType, attempt.failure.message);
    return END_TURN;
  }
  const usage = attempt.response.usage;
  const text = attempt.response.content.flatMap((b) => (b.type === "text" && b.text ? [b.text] : [])).join("");
  const parsed = parseResult(text);
  if (typeof parsed === "string") {
    await failDream(deps, id, "invalid_model_output", parsed, usage);
    return END_TURN;
  }
  await finishDream(deps, id, parsed, usage);
  return END_TURN;
}

/** pending → running, and the output store recorded; null when the dream is no longer to be run. */
async function startDream(deps: DreamJobDeps, id: string): Promise<Dream | null> {
  const { after } = await changeDream(deps.storage, id, async (d, trx) => {
    if (d.status !== "pending" && d.status !== "running") return null;
    const next: Dream = { ...d, status: "running" };
    if (next.outputs.length === 0) {
      const outputId = outputStoreOf(d) ?? (await copyStore(deps, trx, d));
      next.outputs = [{ type: "memory_store", memory_store_id: outputId }];
    }
    return next;
  });
  return after;
}

async function ownerActor(trx: Transaction<Database>, dreamId: string): Promise<Actor> {
  const row = await trx.selectFrom("dreams").select("owner_key_id").where("id", "=", dreamId).executeTakeFirstOrThrow();
  return { type: "api_actor", api_key_id: row.owner_key_id };
}

/** The `create_new` output: a new store holding a copy of the input store's memories. */
async function copyStore(deps: DreamJobDeps, trx: Transaction<Database>, d: Dream): Promise<string> {
  const inputId = inputStoreOf(d);
  const input = await trx.selectFrom("memory_stores").select("body").where("id", "=", inputId).executeTakeFirstOrThrow();
  const source = JSON.parse(input.body) as MemoryStore;
  const now = toIso(deps.clock.now());
  const store: MemoryStore = {
    type: "memory_store",
    id: deps.ids("memstore"),
    name: `${source.name} (dream ${d.id})`.slice(0, 255),
    description: `Reorganized by dream ${d.id} from memory store ${source.id}.`,
    metadata: {},
    created_at: now,
    updated_at: now,
    archived_at: null,
  };
  await trx
    .insertInto("memory_stores")
    .values({ id: store.id, body: JSON.stringify(store), created_at: now, updated_at: now, archived_at: null })
    .execute();
  // The one webhook event a dream's work maps to in the SDK's list: its output store was created.
  await recordWebhookEvents(trx, deps, [{ type: "memory_store.created", id: store.id, orderKey: store.id, orderSeq: 0 }]);
  const actor = await ownerActor(trx, d.id);
  const memories = await trx.selectFrom("memories").selectAll().where("memory_store_id", "=", inputId).execute();
  for (const m of memories) await writeMemory(deps, trx, store.id, actor, now, { path: m.path, content: m.content });
  return store.id;
}

async function writeMemory(
  deps: DreamJobDeps,
  trx: Transaction<Database>,
  storeId: string,
  actor: Actor,
  now: string,
  m: { path: string; content: string },
): Promise<void> {
  const id = deps.ids("mem");
  const version: MemoryVersionWrite = {
    id: deps.ids("memver"),
    memoryId: id,
    storeId,
    operation: "created",
    path: m.path,
    content: m.content,
    actor,
    now,
  };
  await insertMemoryVersion(trx, version);
  const row: MemoryRow = {
    id,
    memory_store_id: storeId,
    path: m.path,
    content: m.content,
    content_sha256: sha256Hex(m.content),
    content_size_bytes: Buffer.byteLength(m.content, "utf8"),
    memory_version_id: version.id,
    created_at: now,
    updated_at: now,
  };
  await trx.insertInto("memories").values(row).execute();
}

/** What the model reads: the memories as they are, then each session's conversation, oldest first. */
async function renderInputs(storage: Storage, d: Dream): Promise<string> {
  const memories = await storage.db
    .selectFrom("memories")
    .select(["path", "content", "updated_at"])
    .where("memory_store_id", "=", inputStoreOf(d))
    .orderBy("path")
    .execute();
  const parts = ["# Current memories"];
  for (const m of memories) parts.push(`## ${m.path} (updated ${m.updated_at})\n${m.content}`);
  parts.push("# Session transcripts");
  for (const sessionId of inputSessionsOf(d)) parts.push(`## Session ${sessionId}\n${await transcriptOf(storage, sessionId)}`);
  return parts.join("\n\n");
}

async function transcriptOf(storage: Storage, sessionId: string): Promise<string> {
  const events = await storage.db
    .selectFrom("session_events")
    .select(["type", "processed_at", "body"])
    .where("session_id", "=", sessionId)
    .where("type", "in", ["user.message", "agent.message"])
    .orderBy("seq")
    .execute();
  const lines = events.map((e) => {
    const body = JSON.parse(e.body) as { content?: { type: string; text?: string }[] };
    const text = (body.content ?? []).flatMap((b) => (b.type === "text" && b.text ? [b.text] : [])).join("\n");
    return `[${e.processed_at}] ${e.type === "user.message" ? "user" : "agent"}: ${text}`;
  });
  const all = lines.join("\n");
  return all.length > MAX_TRANSCRIPT_CHARS ? all.slice(all.length - MAX_TRANSCRIPT_CHARS) : all;
}

/** The model's memory set, or why it cannot be used. */
function parseResult(text: string): { path: string; content: string }[] | string {
  const start = text.indexOf("{");
  const end = text.lastIndexOf("}");
  if (start < 0 || end < start) return "the model's answer holds no JSON object";
  let value: unknown;
  try {
    value = JSON.parse(text.slice(start, end + 1));
  } catch {
    return "the model's answer is not valid JSON";
  }
  const result = resultSchema.safeParse(value);
  if (!result.success) return `the model's answer is not a memory set: ${result.error.issues[0]?.message ?? "invalid"}`;
  const paths = new Set(result.data.memories.map((m) => m.path));
  if (paths.size !== result.data.memories.length) return "the model's answer names a path twice";
  const nested = result.data.memories.find((m) => ancestorsOf(m.path).some((a) => paths.has(a)));
  if (nested) return `the model's answer nests ${nested.path} under another memory`;
  return result.data.memories;
}

/** Replaces the output store's memories with `result` and completes the dream, unless it was canceled first. */
async function finishDream(deps: DreamJobDeps, id: string, result: { path: string; content: string }[], usage: DreamUsage): Promise<void> {
  const now = toIso(deps.clock.now());
  await changeDream(deps.storage, id, async (d, trx) => {
    if (d.status !== "running") return null;
    const storeId = outputStoreOf(d) as string;
    await lockStoreForWrite(trx, deps.storage, storeId);
    const actor = await ownerActor(trx, id);
    const current = await trx.selectFrom("memories").selectAll().where("memory_store_id", "=", storeId).execute();
    const wanted = new Map(result.map((m) => [m.path, m.content]));
    // Deletions first: a new path may sit where a removed memory's directory was.
    for (const m of current.filter((m) => !wanted.has(m.path))) {
      await trx.deleteFrom("memories").where("id", "=", m.id).execute();
      await insertMemoryVersion(trx, {
        id: deps.ids("memver"),
        memoryId: m.id,
        storeId,
        operation: "deleted",
        path: m.path,
        content: null,
        actor,
        now,
      });
    }
    for (const m of current) {
      const content = wanted.get(m.path);
      if (content === undefined || content === m.content) continue;
      const versionId = deps.ids("memver");
      await insertMemoryVersion(trx, { id: versionId, memoryId: m.id, storeId, operation: "modified", path: m.path, content, actor, now });
      await trx
        .updateTable("memories")
        .set({
          content,
          content_sha256: sha256Hex(content),
          content_size_bytes: Buffer.byteLength(content, "utf8"),
          memory_version_id: versionId,
          updated_at: now,
        })
        .where("id", "=", m.id)
        .execute();
    }
    const existing = new Set(current.map((m) => m.path));
    for (const m of result.filter((m) => !existing.has(m.path))) await writeMemory(deps, trx, storeId, actor, now, m);
    return { ...d, status: "completed" as const, ended_at: now, usage: addUsage(d.usage, usage) };
  });
}

function addUsage(a: DreamUsage, b: DreamUsage): DreamUsage {
  return {
    cache_creation_input_tokens: a.cache_creation_input_tokens + b.cache_creation_input_tokens,
    cache_read_input_tokens: a.cache_read_input_tokens + b.cache_read_input_tokens,
    input_tokens: a.input_tokens + b.input_tokens,
    output_tokens: a.output_tokens + b.output_tokens,
  };
}
