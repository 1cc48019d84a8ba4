/**
 * Appends for the loop: always inside one transaction holding the session
 * row lock, refused when the session was terminated (or deleted) meanwhile,
 * so nothing is ever written after `session.status_terminated`. With
 * `interruptAfterSeq`, the write is also refused when a `user.interrupt`
 * landed after that log position (a model response that arrives after the
 * user interrupted is dropped, not recorded), and with `messageAfter` when a
 * `user.message` did. `appendToSession` is the same for a transaction that
 * only appends, with the lock taken by the append's own seq reservation. A run of one thread of a
 * multi-agent session (`deps.scope`) has its drafts tagged with the thread
 * here (threads.ts), so no step needs to know which thread it runs.
 */
import { ApiError, appendEvents, type EventDraft, type EventLogDeps, lockSession, notifyAppended, type SessionEvent } from "@openma/api";
import type { Database, SessionRow } from "@openma/storage";
import type { Transaction } from "kysely";
import { type Scope, scopeDrafts, withReply } from "./threads.ts";

export interface SessionTx {
  trx: Transaction<Database>;
  /** Appends (idempotently per dedupe key) and returns the stored events in draft order. */
  append(drafts: readonly EventDraft[]): Promise<SessionEvent[]>;
}

export type Guarded<T> = { type: "ok"; value: T } | { type: "terminated" } | { type: "interrupted" } | { type: "superseded" };

export interface SessionGuard {
  /** Refuse (`interrupted`) when a `user.interrupt` landed after this log position. */
  interruptAfterSeq?: number;
  /** Refuse (`superseded`) when a `user.message` of this thread (null: the primary) landed after `seq`. */
  messageAfter?: { seq: number; threadId: string | null };
}

/** Why a guarded write was refused, thrown inside its transaction so that it rolls back. */
class Refused extends Error {
  constructor(readonly outcome: "terminated" | "interrupted" | "superseded") {
    super(`session write refused: ${outcome}`);
  }
}

/** The guards of a write, checked under the session lock on the row as it was locked; throws `Refused`. */
async function admit(trx: Transaction<Database>, sessionId: string, row: SessionRow, guard: SessionGuard): Promise<void> {
  if (row.archived_at || row.status === "terminated") throw new Refused("terminated");
  if (guard.interruptAfterSeq !== undefined && (await loggedSince(trx, sessionId, guard.interruptAfterSeq, "user.interrupt"))) {
    throw new Refused("interrupted");
  }
  const after = guard.messageAfter;
  if (after && (await loggedSince(trx, sessionId, after.seq, "user.message", after.threadId))) throw new Refused("superseded");
}

/** A guarded transaction's end: refusals and the session's deletion (lockSession's 404) as outcomes. */
function refusal(err: unknown): Guarded<never> {
  if (err instanceof Refused) return { type: err.outcome };
  // The session was deleted under us, which ends it like a termination.
  if (err instanceof ApiError && err.status === 404) return { type: "terminated" };
  throw err;
}

/**
 * `withSession` for a transaction whose only writes are `drafts`: the lock
 * and the guards ride on the append's own seq reservation (the same row lock,
 * taken by the same statement), one round trip less than locking first.
 */
export async function appendToSession(
  deps: EventLogDeps & { scope?: Scope },
  sessionId: string,
  drafts: readonly EventDraft[],
  guard: SessionGuard = {},
): Promise<Guarded<SessionEvent[]>> {
  let result: Awaited<ReturnType<typeof appendEvents>>;
  try {
    result = await deps.storage.db.transaction().execute((trx) =>
      appendEvents(deps, sessionId, withReply(deps.scope ?? null, scopeDrafts(deps.scope ?? null, drafts)), {
        trx,
        admit: (row) => admit(trx, sessionId, row, guard),
      }),
    );
  } catch (err) {
    return refusal(err);
  }
  await notifyAppended(deps, sessionId, result.appended.length > 0);
  return { type: "ok", value: result.events };
}

export async function withSession<T>(
  deps: EventLogDeps & { scope?: Scope },
  sessionId: string,
  fn: (tx: SessionTx) => Promise<T>,
  guard: SessionGuard = {},
): Promise<Guarded<T>> {
  // Whether an append ran (its reservation queued the wake-up) and whether it added anything.
  let ran = false;
  let appended = false;
  let result: Guarded<T>;
  try {
    result = await deps.storage.db.transaction().execute(async (trx): Promise<Guarded<T>> => {
      await admit(trx, sessionId, await lockSession(trx, sessionId), guard);
      const value = await fn({
        trx,
        async append(drafts) {
          const r = await appendEvents(deps, sessionId, withReply(deps.scope ?? null, scopeDrafts(deps.scope ?? null, drafts)), { trx });
          ran = true;
          if (r.appended.length) appended = true;
          return r.events;
        },
      });
      return { type: "ok", value };
    });
  } catch (err) {
    return refusal(err);
  }
  if (ran) await notifyAppended(deps, sessionId, appended);
  return result;
}

/**
 * Whether an event of `type` landed after log position `afterSeq`: of any thread, or with
 * `threadId` of that one only (`null`: the primary thread). Run under the session lock, the
 * answer holds until the transaction ends.
 */
export async function loggedSince(
  trx: Transaction<Database>,
  sessionId: string,
  afterSeq: number,
  type: string,
  threadId?: string | null,
): Promise<boolean> {
  let query = trx
    .selectFrom("session_events")
    .select("seq")
    .where("session_id", "=", sessionId)
    .where("seq", ">", afterSeq)
    .where("type", "=", type);
  if (threadId !== undefined) query = query.where("thread_id", threadId === null ? "is" : "=", threadId);
  return (await query.limit(1).executeTakeFirst()) !== undefined;
}

export function draft(type: string, fields: Record<string, unknown>, dedupeKey: string): EventDraft {
  return { type, fields, dedupeKey };
}
