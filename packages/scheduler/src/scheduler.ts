/**
 * Fires deployments' cron schedules. Every process may run one: a tick reads
 * the active scheduled deployments, works out each one's due occurrence and
 * hands it to `fire`, whose transaction claims the occurrence by inserting
 * the run under the unique (deployment_id, scheduled_at) index — so however
 * many schedulers tick at once, an occurrence becomes exactly one run.
 *
 * Misfire policy (docs/deployments.md): a tick fires only the newest
 * occurrence at or before now, if it is newer than both the last one fired
 * and the schedule's anchor (creation, unpause or schedule change). After
 * downtime that is at most one catch-up run; older missed occurrences are
 * skipped, never queued.
 */
import type { Database } from "@openma/storage";
import type { Scheduler } from "@openma/time";
import type { Kysely } from "kysely";
import { latestOccurrence } from "./cron.ts";

/** What a fire did: made the run, found it claimed by another process, or found the deployment no longer due. */
export type FireOutcome = "fired" | "taken" | "skipped";

export type FireFn = (deploymentId: string, scheduledAtMs: number) => Promise<FireOutcome>;

export interface ScheduleState {
  schedule_expression: string | null;
  schedule_timezone: string | null;
  schedule_anchor_ms: number | null;
  last_scheduled_ms: number | null;
}

/** The occurrence due at `nowMs`, or null (see the misfire policy above). */
export function dueOccurrence(row: ScheduleState, nowMs: number): number | null {
  if (!row.schedule_expression || !row.schedule_timezone) return null;
  const latest = latestOccurrence({ expression: row.schedule_expression, timezone: row.schedule_timezone }, nowMs);
  if (latest === null) return null;
  if (row.schedule_anchor_ms !== null && latest <= row.schedule_anchor_ms) return null;
  if (row.last_scheduled_ms !== null && latest <= row.last_scheduled_ms) return null;
  return latest;
}

export interface SchedulerLogger {
  warn(obj: object, msg?: string): void;
}

export interface DeploymentSchedulerOptions {
  db: Kysely<Database>;
  clock: { now(): number };
  fire: FireFn;
  logger: SchedulerLogger;
  /** Waits between ticks (default: the real scheduler's sleep). */
  scheduler: Scheduler;
  /** Time between ticks. Cron has minute resolution; the default ticks a few times a minute. */
  intervalMs?: number;
}

export interface TickReport {
  fired: number;
  taken: number;
  failed: number;
}

export class DeploymentScheduler {
  #stop: AbortController | null = null;
  #loop: Promise<void> | null = null;

  constructor(private readonly opts: DeploymentSchedulerOptions) {}

  /** One pass at the clock's current time. */
  async tick(): Promise<TickReport> {
    const now = this.opts.clock.now();
    const rows = await this.opts.db
      .selectFrom("deployments")
      .select(["id", "schedule_expression", "schedule_timezone", "schedule_anchor_ms", "last_scheduled_ms"])
      .where("archived_at", "is", null)
      .where("status", "=", "active")
      .where("schedule_expression", "is not", null)
      .execute();
    const report: TickReport = { fired: 0, taken: 0, failed: 0 };
    for (const row of rows) {
      let due: number | null;
      try {
        due = dueOccurrence(row, now);
      } catch (err) {
        // A stored expression the parser now rejects must not stop every other deployment.
        report.failed++;
        this.opts.logger.warn({ deployment_id: row.id, err: (err as Error).message }, "deployment schedule cannot be evaluated");
        continue;
      }
      if (due === null) continue;
      try {
        const outcome = await this.opts.fire(row.id, due);
        if (outcome === "fired") report.fired++;
        else if (outcome === "taken") report.taken++;
      } catch (err) {
        report.failed++;
        this.opts.logger.warn({ deployment_id: row.id, err: (err as Error).message }, "deployment fire failed; retried next tick");
      }
    }
    return report;
  }

  start(): void {
    if (this.#loop) return;
    const stop = new AbortController();
    this.#stop = stop;
    this.#loop = (async () => {
      while (!stop.signal.aborted) {
        await this.tick().catch((err: Error) => this.opts.logger.warn({ err: err.message }, "deployment scheduler tick failed"));
        await this.opts.scheduler.sleep(this.opts.intervalMs ?? 15_000, stop.signal).catch(() => {});
      }
    })();
  }

  async stop(): Promise<void> {
    this.#stop?.abort();
    await this.#loop;
    this.#loop = null;
  }
}
