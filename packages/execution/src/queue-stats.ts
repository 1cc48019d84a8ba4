/** What the execution queue holds right now, for metrics: one grouped query at scrape time. */
import type { Storage } from "@openma/storage";

export interface QueueStats {
  byState: Record<"idle" | "pending" | "running", number>;
  /** Seconds since the oldest pending session asked for a turn (0 when none waits). */
  oldestPendingAgeSeconds: number;
  /** Seconds since the oldest running claim was taken (0 when none runs). */
  oldestClaimAgeSeconds: number;
}

export async function queueStats(storage: Pick<Storage, "db">, nowMs: number): Promise<QueueStats> {
  const rows = await storage.db
    .selectFrom("session_executions")
    .select((eb) => [
      "state",
      eb.fn.countAll<number>().as("n"),
      eb.fn.min("requested_at_ms").as("oldest_request"),
      eb.fn.min("claimed_at_ms").as("oldest_claim"),
    ])
    .groupBy("state")
    .execute();
  const stats: QueueStats = { byState: { idle: 0, pending: 0, running: 0 }, oldestPendingAgeSeconds: 0, oldestClaimAgeSeconds: 0 };
  const age = (ms: number | null | undefined) => (ms == null ? 0 : Math.max(0, (nowMs - Number(ms)) / 1000));
  for (const row of rows) {
    if (row.state !== "idle" && row.state !== "pending" && row.state !== "running") continue;
    stats.byState[row.state] = Number(row.n);
    if (row.state === "pending") stats.oldestPendingAgeSeconds = age(row.oldest_request as number | null);
    if (row.state === "running") stats.oldestClaimAgeSeconds = age(row.oldest_claim as number | null);
  }
  return stats;
}
