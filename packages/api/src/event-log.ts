/**
 * The durable per-session event log. Every event gets the next gap-free `seq`
 * of its session (allocated by bumping `sessions.last_seq` under the session
 * row's lock, in the appending transaction), a `sevt_` id and `processed_at`.
 * Readers (list, SSE) page by `seq`; live readers are woken through the change
 * bus topic `sessionTopic(id)` once the append committed (on Postgres by the
 * commit itself: the appending statement queues a transactional NOTIFY) and
 * re-read the table themselves.
 *
 * The session body is kept a projection of the log here, in one place: status
 * events move `status`, `user.define_outcome` opens an outcome evaluation (its
 * `span.outcome_evaluation_*` events move it along) and
 * `session.usage` replaces the cumulative usage; entering and leaving
 * `running` opens and closes an activity interval (session-activity.ts).
 */
import { type Database, type SessionRow, toIso } from "@openma/storage";
import { recordWebhookEvents, sessionWebhookChanges } from "@openma/webhooks";
import { type Kysely, sql, type Transaction } from "kysely";
import type { ApiDeps } from "./context.ts";
import { notFound } from "./errors.ts";
import type { EventDraft, SessionEvent } from "./schemas/events.ts";
import { recordStatusChange } from "./session-activity.ts";

export type EventLogDeps = Pick<ApiDeps, "storage" | "clock" | "ids"> & Partial<Pick<ApiDeps, "logger">>;

export type { EventDraft, SessionEvent };

export function sessionTopic(sessionId: string): string {
  return `session:${sessionId}`;
}

export interface AppendResult {
  /** One per draft, in draft order: the new event, or the stored one its dedupe key matched. */
  events: SessionEvent[];
  /** Only the events this call added to the log. */
  appended: SessionEvent[];
}

export interface AppendOptions {
  /**
   * Append inside the caller's transaction. The caller must then call
   * `notifyAppended` after its commit (a wake-up before commit would let a
   * reader look before the rows are visible).
   */
  trx?: Transaction<Database>;
  /**
   * Runs under the session row's lock, right after the seqs were reserved and
   * before anything is written, with the session row as it was: a caller's
   * last check that this append may happen (throw to refuse: the transaction
   * rolls back). Saves a caller the separate `lockSession` statement.
   */
  admit?: (session: SessionRow) => Promise<void>;
}

/**
 * Appends events to a session's log, idempotently per `dedupeKey`. Without
 * `opts.trx` it runs its own transaction and publishes the session topic
 * after commit. Throws 404 when the session does not exist.
 */
export async function appendEvents(
  deps: EventLogDeps,
  sessionId: string,
  drafts: readonly EventDraft[],
  opts: AppendOptions = {},
): Promise<AppendResult> {
  if (opts.trx) return appendIn(opts.trx, deps, sessionId, drafts, opts.admit);
  const result = await deps.storage.db.transaction().execute((trx) => appendIn(trx, deps, sessionId, drafts, opts.admit));
  await notifyAppended(deps, sessionId, result.appended.length > 0);
  return result;
}

/**
 * Wakes live readers of a session. Best effort: a lost wake-up only delays
 * delivery until the reader's next wake-up (SSE readers also re-read on every
 * keep-alive tick), so a bus failure must not fail a request that committed.
 */
export async function notifySession(deps: EventLogDeps, sessionId: string): Promise<void> {
  try {
    await deps.storage.bus.publish(sessionTopic(sessionId));
  } catch (err) {
    deps.logger?.warn({ err: (err as Error).message, session_id: sessionId }, "session notification failed");
  }
}

/**
 * What a writer calls after committing a transaction that ran an append
 * (`added`: whether it added events, not only found them by dedupe key): on a
 * transactional bus the append already queued the wake-up for its commit (see
 * `reserveSeqs`), for every process, whether or not it added anything; this
 * process's own readers are woken here at once (`ChangeBus.committed`, which
 * must be told of every such commit to pair it with its delivery) rather than
 * when the database's delivery comes back. A non-transactional bus publishes
 * here when something was added.
 */
export async function notifyAppended(deps: EventLogDeps, sessionId: string, added = true): Promise<void> {
  const { bus } = deps.storage;
  if (bus.publishOnCommit) bus.committed?.([sessionTopic(sessionId)]);
  else if (added) await notifySession(deps, sessionId);
}

/**
 * Takes the session row's write lock (a no-op UPDATE: a row lock on Postgres,
 * the database write lock on SQLite) and returns the row, so read-modify-write
 * of the session body cannot lose a concurrent update. Throws 404 when absent.
 */
export async function lockSession(trx: Transaction<Database>, sessionId: string): Promise<SessionRow> {
  const row = await trx
    .updateTable("sessions")
    .set((eb) => ({ last_seq: eb.ref("last_seq") }))
    .where("id", "=", sessionId)
    .returningAll()
    .executeTakeFirst();
  if (!row) throw notFound("session", sessionId);
  return row;
}

// Postgres caps a statement at 65535 bind parameters; 8 per row keeps chunks far below.
const INSERT_CHUNK = 500;

interface Reserved {
  /** The session row as it was before the reservation. */
  session: SessionRow;
  /** Whether any webhook endpoint is enabled (else the outbox has nothing to write). */
  webhooks: boolean;
}

/**
 * One statement that takes the session row's write lock (as `lockSession`),
 * reserves `count` seqs by moving `last_seq` past them, tells whether any
 * webhook endpoint is enabled and, on a transactional bus, queues the
 * session's wake-up for the commit: one round trip where there were four.
 * Throws 404 when the session is absent.
 */
async function reserveSeqs(trx: Transaction<Database>, deps: EventLogDeps, sessionId: string, count: number): Promise<Reserved> {
  const notice = deps.storage.bus.publishOnCommit;
  const reserve = trx
    .updateTable("sessions")
    .set((eb) => ({ last_seq: eb("last_seq", "+", count) }))
    .where("id", "=", sessionId)
    .returningAll()
    .returning(
      sql<number>`case when exists (select 1 from webhook_endpoints where state = 'enabled') then 1 else 0 end`.as("enabled_webhooks"),
    );
  const row = await (notice ? reserve.returning(notice(sessionTopic(sessionId)).as("notified")) : reserve).executeTakeFirst();
  if (!row) throw notFound("session", sessionId);
  const { notified: _notified, enabled_webhooks, ...session } = row as SessionRow & { notified?: unknown; enabled_webhooks: unknown };
  return { session: { ...session, last_seq: session.last_seq - count }, webhooks: Number(enabled_webhooks) > 0 };
}

async function appendIn(
  trx: Transaction<Database>,
  deps: EventLogDeps,
  sessionId: string,
  drafts: readonly EventDraft[],
  admit?: (session: SessionRow) => Promise<void>,
): Promise<AppendResult> {
  const { session, webhooks } = await reserveSeqs(trx, deps, sessionId, drafts.length);
  await admit?.(session);
  // Checked under the lock: a concurrent append with the same key has committed or not started.
  const known = await storedByDedupeKey(trx, sessionId, drafts);
  const nowMs = deps.clock.now();
  const processedAt = toIso(nowMs);
  let seq = session.last_seq;
  const events: SessionEvent[] = [];
  const appended: SessionEvent[] = [];
  const rows: Database["session_events"][] = [];
  for (const draft of drafts) {
    const existing = draft.dedupeKey ? known.get(draft.dedupeKey) : undefined;
    if (existing) {
      events.push(existing);
      continue;
    }
    const { id: _id, type: _type, processed_at: _at, ...fields } = draft.fields;
    const event: SessionEvent = { id: draft.id ?? deps.ids("sevt"), type: draft.type, ...fields, processed_at: processedAt };
    seq += 1;
    rows.push({
      session_id: sessionId,
      seq,
      id: event.id,
      type: event.type,
      processed_at: processedAt,
      body: JSON.stringify(event),
      dedupe_key: draft.dedupeKey,
      thread_id: draft.threadId ?? null,
    });
    if (draft.dedupeKey) known.set(draft.dedupeKey, event);
    events.push(event);
    appended.push(event);
  }
  for (let i = 0; i < rows.length; i += INSERT_CHUNK) {
    await trx
      .insertInto("session_events")
      .values(rows.slice(i, i + INSERT_CHUNK))
      .execute();
  }
  const projected = projectEvents(session, appended, processedAt);
  // Drafts already in the log used no seq: give back what was reserved for them, so seq stays gap-free.
  const reservedUpTo = session.last_seq + drafts.length;
  if (projected || seq !== reservedUpTo) {
    await trx
      .updateTable("sessions")
      .set(projected ? { last_seq: seq, ...projected } : { last_seq: seq })
      .where("id", "=", sessionId)
      .execute();
  }
  if (rows.length === 0) return { events, appended };
  if (projected) await recordStatusChange(trx, sessionId, session.status === "running", projected.status === "running", nowMs);
  // Written in this transaction when an endpoint is enabled; without one there is nothing to ask the outbox.
  if (webhooks) {
    await recordWebhookEvents(
      trx,
      deps,
      rows.flatMap((row) => sessionWebhookChanges(sessionId, row)),
    );
  }
  return { events, appended };
}

async function storedByDedupeKey(
  trx: Transaction<Database>,
  sessionId: string,
  drafts: readonly EventDraft[],
): Promise<Map<string, SessionEvent>> {
  const keys = [...new Set(drafts.flatMap((d) => (d.dedupeKey ? [d.dedupeKey] : [])))];
  const known = new Map<string, SessionEvent>();
  if (keys.length === 0) return known;
  const rows = await trx
    .selectFrom("session_events")
    .select(["dedupe_key", "body"])
    .where("session_id", "=", sessionId)
    .where("dedupe_key", "in", keys)
    .execute();
  for (const row of rows) if (row.dedupe_key) known.set(row.dedupe_key, JSON.parse(row.body) as SessionEvent);
  return known;
}

const STATUS_OF: Record<string, string> = {
  "session.status_running": "running",
  "session.status_idle": "idle",
  "session.status_rescheduled": "rescheduling",
  "session.status_terminated": "terminated",
};

const PROJECTED_TYPES = new Set([
  ...Object.keys(STATUS_OF),
  "user.define_outcome",
  "span.outcome_evaluation_start",
  "span.outcome_evaluation_end",
  "session.usage",
]);

const TERMINAL_RESULTS = new Set(["satisfied", "max_iterations_reached", "failed", "interrupted"]);

type Evaluation = Record<string, unknown> & { outcome_id?: unknown };

/** `outcome_evaluations[]` after an evaluation span event: `evaluating` while graded, then the verdict. */
function projectEvaluation(evaluations: Evaluation[], event: SessionEvent, at: string): Evaluation[] {
  return evaluations.map((e) => {
    if (e.outcome_id !== event.outcome_id) return e;
    if (event.type === "span.outcome_evaluation_start") return { ...e, iteration: event.iteration, result: "evaluating" };
    const terminal = TERMINAL_RESULTS.has(String(event.result));
    return {
      ...e,
      iteration: event.iteration,
      result: event.result,
      explanation: event.explanation ?? null,
      completed_at: terminal ? at : null,
    };
  });
}

/** The session columns that change because of `events`, or null when none do. */
function projectEvents(
  session: SessionRow,
  events: readonly SessionEvent[],
  at: string,
): Pick<SessionRow, "status" | "body" | "updated_at"> | null {
  if (!events.some((e) => PROJECTED_TYPES.has(e.type))) return null;
  const body = JSON.parse(session.body) as Record<string, unknown> & { outcome_evaluations?: unknown[] };
  let status = session.status;
  for (const event of events) {
    // An archived session stays terminated whatever its agent reports afterwards.
    if (STATUS_OF[event.type] && !session.archived_at) status = STATUS_OF[event.type] as string;
    if (event.type === "user.define_outcome") {
      body.outcome_evaluations = [
        ...(body.outcome_evaluations ?? []),
        {
          type: "outcome_evaluation",
          outcome_id: event.outcome_id,
          description: event.description,
          iteration: 0,
          result: "pending",
          explanation: null,
          completed_at: null,
        },
      ];
    }
    if (event.type === "span.outcome_evaluation_start" || event.type === "span.outcome_evaluation_end") {
      body.outcome_evaluations = projectEvaluation((body.outcome_evaluations ?? []) as Evaluation[], event, at);
    }
    if (event.type === "session.usage" && event.usage && typeof event.usage === "object") body.usage = event.usage;
  }
  body.status = status;
  return { status, body: JSON.stringify(body), updated_at: at };
}

export interface StoredEvent {
  seq: number;
  id: string;
  type: string;
  /** The event's JSON exactly as stored (what list and stream return). */
  body: string;
  /** The thread it belongs to; null for the primary thread. */
  thread_id?: string | null;
}

/** Up to `limit` events with `seq > afterSeq`, oldest first. */
export async function readEventsAfter(db: Kysely<Database>, sessionId: string, afterSeq: number, limit: number): Promise<StoredEvent[]> {
  return queryEventsAfter(db, sessionId, afterSeq, limit);
}

let ticks = 0;

/** A process-wide logical clock that orders wake-ups against shared reads. */
export function logicalTick(): number {
  ticks += 1;
  return ticks;
}

export interface SharedRead {
  rows: StoredEvent[];
  /** `logicalTick()` when the underlying query started. */
  startedAt: number;
}

/**
 * `readEventsAfter` for live readers. Every reader of a session wakes on the
 * same notification and, when caught up, asks for the same page, so identical
 * reads in flight share one query: 100 subscribers cost one query per
 * wake-up, not 100. A reader that joins a read started before its own wake-up
 * must read again (the rows that woke it may not be in that result): compare
 * `startedAt` with the wake-up's tick.
 */
export function readEventsAfterShared(db: Kysely<Database>, sessionId: string, afterSeq: number, limit: number): Promise<SharedRead> {
  let reads = inFlight.get(db);
  if (!reads) {
    reads = new Map();
    inFlight.set(db, reads);
  }
  const key = `${sessionId}\u0000${afterSeq}\u0000${limit}`;
  const running = reads.get(key);
  if (running) return running;
  const startedAt = logicalTick();
  const started = queryEventsAfter(db, sessionId, afterSeq, limit)
    .then((rows) => ({ rows, startedAt }))
    .finally(() => reads.delete(key));
  reads.set(key, started);
  return started;
}

const inFlight = new WeakMap<object, Map<string, Promise<SharedRead>>>();

function queryEventsAfter(db: Kysely<Database>, sessionId: string, afterSeq: number, limit: number): Promise<StoredEvent[]> {
  return db
    .selectFrom("session_events")
    .select(["seq", "id", "type", "body", "thread_id"])
    .where("session_id", "=", sessionId)
    .where("seq", ">", afterSeq)
    .orderBy("seq", "asc")
    .limit(limit)
    .execute();
}

/** The `seq` of one event of this session, or undefined when it is not in this session's log. */
export async function eventSeq(db: Kysely<Database>, sessionId: string, eventId: string): Promise<number | undefined> {
  const row = await db
    .selectFrom("session_events")
    .select("seq")
    .where("id", "=", eventId)
    .where("session_id", "=", sessionId)
    .executeTakeFirst();
  return row?.seq;
}
