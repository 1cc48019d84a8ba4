/**
 * The runtime reaper: reconciles orphan records (compute whose hard kill
 * failed) with the sandbox port as reaper, on an injected scheduler, and
 * optionally runs candidate GC on its own interval. Backoff, the attempt cap
 * and the dead-letter state live in the orphan store's `reconcile`, so every
 * reaper process shares one policy and one claim protocol.
 */
import type { OrphanReaper, OrphanReconcileReport, RuntimeOrphanPort } from "@openma/contract";
import type { Scheduler } from "@openma/time";
import { every, Periodic } from "./every.ts";

export interface RuntimeReaperOptions {
  orphans: RuntimeOrphanPort;
  /** Usually the ManagedSandboxPort: `reap` works from a serialized lease alone. */
  reaper: OrphanReaper;
  scheduler: Scheduler;
  intervalMs: number;
  /** Records per reconcile pass. */
  limit?: number;
  gc?: { intervalMs: number; run(signal: AbortSignal): Promise<unknown> };
  onReport?: (report: OrphanReconcileReport) => void;
  onError?: (err: unknown) => void;
}

export class RuntimeReaper {
  readonly #options: RuntimeReaperOptions;
  readonly #periodic = new Periodic();

  constructor(options: RuntimeReaperOptions) {
    this.#options = options;
  }

  get running(): boolean {
    return this.#periodic.running;
  }

  start(): void {
    const { scheduler, intervalMs, gc, onError = () => {} } = this.#options;
    this.#periodic.start((signal) => [
      every(scheduler, intervalMs, signal, () => this.reconcileOnce(signal), onError),
      ...(gc ? [every(scheduler, gc.intervalMs, signal, () => gc.run(signal), onError)] : []),
    ]);
  }

  /** Stops scheduling and waits for the pass in flight. */
  stop(): Promise<void> {
    return this.#periodic.stop();
  }

  async reconcileOnce(signal: AbortSignal = new AbortController().signal): Promise<OrphanReconcileReport> {
    const { orphans, reaper, limit, onReport } = this.#options;
    const report = await orphans.reconcile({ reaper, limit, signal });
    onReport?.(report);
    return report;
  }
}
