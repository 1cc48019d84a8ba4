/**
 * Activation driven by the Work queue, as `openma serve` runs it
 * (docs/activation.md): every Work item enqueued for a session of an
 * environment configured for `acquire_then_session_poll` becomes an
 * activation intent whose event id is the Work id, so each Work gets one VM
 * however many server processes see it (the intent is inserted once per
 * event id, and its launch is claimed under a lease). The VM's own worker
 * then polls, acks, heartbeats and stops that Work.
 *
 * Each pass: enqueue and launch the intents of new queued Work, cancel the
 * pending intents whose Work has stopped (a held launch's VM is then
 * destroyed as an orphan), and retry the intents that are due again.
 */
import type { Database } from "@openma/storage";
import { realScheduler, type Scheduler } from "@openma/time";
import type { Kysely } from "kysely";
import type { ActivationTables, SqlActivationIntentStore } from "./intents.ts";
import type { ActivationWorker, ProcessOutcome } from "./worker.ts";

/** New Work one pass turns into intents; the rest waits for the next pass. */
const BATCH = 32;
/** OpenMA has one workspace; the intent records it for the provider's payload. */
const WORKSPACE = "default";

export interface WorkActivationOptions {
  db: Kysely<Database>;
  store: SqlActivationIntentStore;
  worker: ActivationWorker;
  /** The environments whose sessions get a VM each. */
  environmentIds: readonly string[];
  scheduler?: Scheduler;
}

export type WorkActivationOutcome = ProcessOutcome | { type: "cancelled"; eventId: string };

export class WorkActivation {
  readonly #o: Required<WorkActivationOptions>;
  readonly #db: Kysely<Database & ActivationTables>;
  readonly #stop = new AbortController();

  constructor(options: WorkActivationOptions) {
    if (options.environmentIds.length === 0) throw new RangeError("environmentIds: at least one environment");
    this.#o = { scheduler: realScheduler, ...options };
    this.#db = options.db.withTables<ActivationTables>();
  }

  /** One pass; returns what happened to each intent it touched. */
  async pass(): Promise<WorkActivationOutcome[]> {
    const outcomes: WorkActivationOutcome[] = [];
    const fresh = await this.#db
      .selectFrom("work_items")
      .select(["id", "environment_id", "session_id"])
      .where("environment_id", "in", [...this.#o.environmentIds])
      .where("state", "=", "queued")
      .where("session_id", "is not", null)
      .where(({ not, exists, selectFrom }) =>
        not(exists(selectFrom("activation_intents").select("event_id").whereRef("activation_intents.event_id", "=", "work_items.id"))),
      )
      .orderBy("created_at")
      .limit(BATCH)
      .execute();
    for (const work of fresh) {
      if (work.session_id === null) continue; // excluded above; the column type does not know it
      const outcome = await this.#o.worker.activate({
        eventId: work.id,
        environmentId: work.environment_id,
        workspaceId: WORKSPACE,
        sessionId: work.session_id,
      });
      if (outcome.type !== "not_claimed") outcomes.push(outcome);
    }
    const ended = await this.#db
      .selectFrom("activation_intents")
      .innerJoin("work_items", "work_items.id", "activation_intents.event_id")
      .select("activation_intents.event_id")
      .where("activation_intents.state", "=", "pending")
      .where("work_items.state", "=", "stopped")
      .where("work_items.environment_id", "in", [...this.#o.environmentIds])
      .limit(BATCH)
      .execute();
    for (const { event_id } of ended) {
      if (await this.#o.store.cancel(event_id)) outcomes.push({ type: "cancelled", eventId: event_id });
    }
    outcomes.push(...(await this.#o.worker.reconcile()));
    return outcomes;
  }

  /** Passes every `intervalMs` until `stop()`; a failed pass is reported and the next one runs as usual. */
  async run(intervalMs: number, report: { outcome(o: WorkActivationOutcome): void; error(err: unknown): void }): Promise<void> {
    while (!this.#stop.signal.aborted) {
      try {
        for (const outcome of await this.pass()) report.outcome(outcome);
      } catch (err) {
        report.error(err);
      }
      await this.#o.scheduler.sleep(intervalMs, this.#stop.signal).catch(() => {});
    }
  }

  stop(): void {
    this.#stop.abort();
    this.#o.worker.stop();
  }
}
