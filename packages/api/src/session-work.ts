/**
 * The session side of the work queue: what the sessions and environments
 * routes do to a session's work item (enqueue it when input arrives, stop it
 * when the session is interrupted, archived or deleted, stop an environment's
 * items when it goes), and the requeue a stopped item owes its session when
 * input arrived that it did not serve.
 *
 * Everything here runs inside the caller's transaction and never publishes:
 * the caller wakes pollers (`notifyWork` in work-queue.ts) after commit. This
 * module imports nothing from work-queue.ts, which uses `requeueUnserved`
 * when a worker stops an item, so the two never form an import cycle.
 */
import { type Database, toIso, type WorkItemRow } from "@openma/storage";
import { sql, type Transaction } from "kysely";
import type { ApiDeps } from "./context.ts";
import { WORK_BEARING_TYPES } from "./schemas/events.ts";

/**
 * Ensures one live (non-stopped) work item exists for the session, inside the
 * caller's transaction. The partial unique index `work_items_live_session`
 * makes this race-free: of two concurrent enqueues one inserts and the other
 * finds that item. A `stopping` item nobody holds any more (never acked, or
 * its lease ran out) is finished off first, since no worker will ever stop it.
 * This enqueue has new input in hand, so it does not wait for the reclaim
 * window the queue's own sweep of such items grants an unacked hand-out
 * (`sweepAbandonedStopping` in work-queue.ts). The caller publishes
 * `notifyWork` after commit when `created`. `traceparent` (the enqueuing
 * request's trace context, with tracing on) goes with a new item only: an
 * item that already exists keeps the trace of the request that created it.
 */
export async function ensureSessionWork(
  trx: Transaction<Database>,
  deps: ApiDeps,
  environmentId: string,
  sessionId: string,
  traceparent: string | null = null,
): Promise<{ workId: string; created: boolean }> {
  const now = toIso(deps.clock.now());
  await trx
    .updateTable("work_items")
    .set({ state: "stopped", stopped_at: now, lease_expires_at: null })
    .where("session_id", "=", sessionId)
    .where("state", "=", "stopping")
    .where((eb) => eb.or([eb("lease_expires_at", "is", null), eb("lease_expires_at", "<=", now)]))
    .execute();
  const workId = deps.ids("work");
  const head = await sessionHead(trx, sessionId);
  const inserted = await trx
    .insertInto("work_items")
    .values({
      id: workId,
      environment_id: environmentId,
      session_id: sessionId,
      data: JSON.stringify({ type: "session", id: sessionId }),
      state: "queued",
      metadata: "{}",
      created_at: now,
      acknowledged_at: null,
      started_at: null,
      latest_heartbeat_at: null,
      last_heartbeat: null,
      stop_requested_at: null,
      stopped_at: null,
      polled_at: null,
      polled_by: null,
      lease_expires_at: null,
      ttl_seconds: deps.workTtlSeconds,
      token_hash: null,
      served_seq: head,
      traceparent,
    })
    .onConflict((oc) => oc.doNothing())
    .returning("id")
    .executeTakeFirst();
  if (inserted) return { workId: inserted.id, created: true };
  const live = await trx
    .selectFrom("work_items")
    .select("id")
    .where("session_id", "=", sessionId)
    .where("state", "!=", "stopped")
    .executeTakeFirstOrThrow();
  // An item nobody has acked yet will read the whole log when it starts, so it serves this input too.
  // A started item may already be past its last read (idle timeout, teardown): its watermark stays.
  await trx
    .updateTable("work_items")
    .set({ served_seq: head })
    .where("id", "=", live.id)
    .where("state", "=", "queued")
    .where("served_seq", "<", head)
    .execute();
  return { workId: live.id, created: false };
}

/** The session's log head inside the caller's transaction (0 for a session that does not exist). */
async function sessionHead(trx: Transaction<Database>, sessionId: string): Promise<number> {
  const row = await trx.selectFrom("sessions").select("last_seq").where("id", "=", sessionId).executeTakeFirst();
  return row?.last_seq ?? 0;
}

/**
 * Closes the stopping-item gap: a user event that arrived while a worker still
 * held its (stopping, or about to stop) item found that item live and got no
 * new one. When the item reaches `stopped`, enqueue a new item if the session
 * has work-bearing input after the item's watermark that no ending idle has
 * answered since. Runs in the stopping transaction (a worker's force stop, or
 * the queue's sweep of an item whose holder vanished); the caller notifies.
 */
export async function requeueUnserved(
  trx: Transaction<Database>,
  deps: ApiDeps,
  stopped: WorkItemRow,
): Promise<{ environmentId: string; workId: string } | null> {
  if (!stopped.session_id) return null;
  const session = await trx
    .selectFrom("sessions")
    .select(["id", "status", "archived_at"])
    .where("id", "=", stopped.session_id)
    .executeTakeFirst();
  if (!session || session.archived_at || session.status === "terminated") return null;
  const latest = await trx
    .selectFrom("session_events")
    .select((eb) => eb.fn.max<number | null>("seq").as("seq"))
    .where("session_id", "=", session.id)
    .where("type", "in", [...WORK_BEARING_TYPES])
    .where("seq", ">", stopped.served_seq ?? 0)
    .executeTakeFirst();
  const inputSeq = latest?.seq == null ? null : Number(latest.seq);
  if (inputSeq === null) return null;
  const idles = await trx
    .selectFrom("session_events")
    .select("body")
    .where("session_id", "=", session.id)
    .where("type", "=", "session.status_idle")
    .where("seq", ">", inputSeq)
    .execute();
  const answered = idles.some((e) => (JSON.parse(e.body) as { stop_reason?: { type?: string } }).stop_reason?.type !== "requires_action");
  if (answered) return null;
  const next = await ensureSessionWork(trx, deps, stopped.environment_id, session.id);
  return next.created ? { environmentId: stopped.environment_id, workId: next.workId } : null;
}

/**
 * Moves the session's live work item to `stopping` (graceful) or `stopped`
 * (force). A graceful stop of an item no worker has been handed yet stops it
 * outright: there is nobody to tell.
 */
export async function stopSessionWork(
  trx: Transaction<Database>,
  deps: ApiDeps,
  sessionId: string,
  opts: { force: boolean },
): Promise<void> {
  const now = toIso(deps.clock.now());
  const stopped = {
    state: "stopped",
    stopped_at: now,
    stop_requested_at: sql<string>`coalesce(stop_requested_at, ${now})`,
    lease_expires_at: null,
  };
  if (opts.force) {
    await trx.updateTable("work_items").set(stopped).where("session_id", "=", sessionId).where("state", "!=", "stopped").execute();
    return;
  }
  await trx
    .updateTable("work_items")
    .set(stopped)
    .where("session_id", "=", sessionId)
    .where("state", "=", "queued")
    .where("polled_at", "is", null)
    .execute();
  await trx
    .updateTable("work_items")
    .set({ state: "stopping", stop_requested_at: now })
    .where("session_id", "=", sessionId)
    .where("state", "in", ["queued", "starting", "active"])
    .execute();
}

/** Force-stops every live item of an environment (environment deletion). */
export async function stopEnvironmentWork(trx: Transaction<Database>, deps: ApiDeps, environmentId: string): Promise<void> {
  const now = toIso(deps.clock.now());
  await trx
    .updateTable("work_items")
    .set({ state: "stopped", stopped_at: now, stop_requested_at: sql<string>`coalesce(stop_requested_at, ${now})`, lease_expires_at: null })
    .where("environment_id", "=", environmentId)
    .where("state", "!=", "stopped")
    .execute();
}
