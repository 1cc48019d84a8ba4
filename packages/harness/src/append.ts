/**
 * Appends for the loop: always inside one transaction holding the session
 * row lock, refused when the session was terminated (or deleted) meanwhile,
 * so nothing is ever written after `session.status_terminated`. With
 * `interruptAfterSeq`, the write is also refused when a `user.interrupt`
 * landed after that log position (a model response that arrives after the
 * user interrupted is dropped, not recorded). A run of one thread of a
 * multi-agent session (`deps.scope`) has its drafts tagged with the thread
 * here (threads.ts), so no step needs to know which thread it runs.
 */
import { ApiError, appendEvents, type EventDraft, type EventLogDeps, lockSession, notifyAppended, type SessionEvent } from "@openma/api";
import type { Database } from "@openma/storage";
import type { Transaction } from "kysely";
import { type Scope, scopeDrafts, withReply } from "./threads.ts";

export interface SessionTx {
  trx: Transaction<Database>;
  /** Appends (idempotently per dedupe key) and returns the stored events in draft order. */
  append(drafts: readonly EventDraft[]): Promise<SessionEvent[]>;
}

export type Guarded<T> = { type: "ok"; value: T } | { type: "terminated" } | { type: "interrupted" };

export async function withSession<T>(
  deps: EventLogDeps & { scope?: Scope },
  sessionId: string,
  fn: (tx: SessionTx) => Promise<T>,
  guard: { interruptAfterSeq?: number } = {},
): Promise<Guarded<T>> {
  let appended = false;
  let result: Guarded<T>;
  try {
    result = await deps.storage.db.transaction().execute(async (trx): Promise<Guarded<T>> => {
      const row = await lockSession(trx, sessionId);
      if (row.archived_at || row.status === "terminated") return { type: "terminated" };
      if (guard.interruptAfterSeq !== undefined && (await loggedSince(trx, sessionId, guard.interruptAfterSeq, "user.interrupt"))) {
        return { type: "interrupted" };
      }
      const value = await fn({
        trx,
        async append(drafts) {
          const r = await appendEvents(deps, sessionId, withReply(deps.scope ?? null, scopeDrafts(deps.scope ?? null, drafts)), { trx });
          if (r.appended.length) appended = true;
          return r.events;
        },
      });
      return { type: "ok", value };
    });
  } catch (err) {
    // lockSession's 404: the session was deleted under us, which ends it like a termination.
    if (err instanceof ApiError && err.status === 404) return { type: "terminated" };
    throw err;
  }
  if (appended) await notifyAppended(deps, sessionId);
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
