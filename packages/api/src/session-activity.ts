/**
 * Time a session spends running, measured by the server's injected clock.
 *
 * The event log's projection (event-log.ts) opens an interval when the
 * session's status moves to `running` and closes it when the status moves
 * away (`session_activity`, migration 0015). Readers add the open interval up
 * to "now", so `usage.active_seconds`, `stats.active_seconds` and
 * `stats.duration_seconds` are live on every read without a write per tick.
 * The harness reads the same numbers for its `session.usage` snapshots.
 */
import type { Database, SessionActivityRow } from "@openma/storage";
import { type Kysely, sql, type Transaction } from "kysely";

type Db = Kysely<Database> | Transaction<Database>;

export type Activity = Pick<SessionActivityRow, "active_ms" | "running_since_ms">;

export const NEVER_RAN: Activity = { active_ms: 0, running_since_ms: null };

export async function loadActivity(db: Db, sessionId: string): Promise<Activity> {
  const row = await db
    .selectFrom("session_activity")
    .select(["active_ms", "running_since_ms"])
    .where("session_id", "=", sessionId)
    .executeTakeFirst();
  return row ?? NEVER_RAN;
}

export async function loadActivities(db: Db, sessionIds: readonly string[]): Promise<Map<string, Activity>> {
  if (sessionIds.length === 0) return new Map();
  const rows = await db.selectFrom("session_activity").selectAll().where("session_id", "in", sessionIds).execute();
  return new Map(rows.map((r) => [r.session_id, r]));
}

/** Running time up to `nowMs`, the open interval included. */
export function activeMs(activity: Activity, nowMs: number): number {
  const open = activity.running_since_ms === null ? 0 : Math.max(0, nowMs - activity.running_since_ms);
  return activity.active_ms + open;
}

/** Seconds with millisecond precision. */
export function seconds(ms: number): number {
  return Math.round(ms) / 1000;
}

/**
 * Records a status change at `atMs` (call with the session row locked):
 * entering `running` opens an interval, leaving it closes one. One upsert
 * either way (it runs inside the appending transaction, where every
 * statement is a round trip on Postgres); it computes what `activeMs` does.
 */
export async function recordStatusChange(
  trx: Transaction<Database>,
  sessionId: string,
  wasRunning: boolean,
  isRunning: boolean,
  atMs: number,
) {
  if (wasRunning === isRunning) return;
  const closed = sql<number>`case when session_activity.running_since_ms is not null and session_activity.running_since_ms < ${atMs}
    then session_activity.active_ms + (${atMs} - session_activity.running_since_ms) else session_activity.active_ms end`;
  await trx
    .insertInto("session_activity")
    .values({ session_id: sessionId, active_ms: 0, running_since_ms: isRunning ? atMs : null })
    .onConflict((oc) =>
      oc.column("session_id").doUpdateSet(isRunning ? { running_since_ms: atMs } : { active_ms: closed, running_since_ms: null }),
    )
    .execute();
}

interface ClockedSession {
  status: string;
  created_at: string;
  updated_at: string;
  usage: Record<string, unknown>;
  stats: Record<string, unknown>;
}

/**
 * The session as a reader sees it at `nowMs`: active time from the activity
 * record, duration since creation (frozen at the last update once terminated).
 */
export function withActivity<T extends ClockedSession>(session: T, activity: Activity, nowMs: number): T {
  const active = seconds(activeMs(activity, nowMs));
  const end = session.status === "terminated" ? Date.parse(session.updated_at) : nowMs;
  const duration = seconds(Math.max(0, end - Date.parse(session.created_at)));
  return {
    ...session,
    usage: { ...session.usage, active_seconds: active },
    stats: { ...session.stats, active_seconds: active, duration_seconds: duration },
  };
}
