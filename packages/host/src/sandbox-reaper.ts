/**
 * The sandbox reaper of the serve lane (docs/serve-sandboxes.md, ADR 0005):
 * any server of a deployment, at start-up and then on its schedule, lists
 * what its driver holds under the deployment's labels, looks each sandbox's
 * owner record up, and reaps the ones whose owner lease expired, whose
 * stored idle deadline passed, or that no record names. A live owner's
 * sandbox is never touched: a record is taken away from its owner by one
 * conditional statement (`takeOver`) that loses against any renewal or use.
 *
 * A sandbox the reaper cannot kill becomes an orphan record (the runtime
 * host lane's store: backoff, attempt cap, dead-letter), reconciled on the
 * same pass. Records whose sandbox is already gone (an owner killed between
 * claiming the record and starting the sandbox) are cleared.
 *
 * Generic over the ports: any driver that can list what it owns works,
 * local or remote.
 */
import {
  type ManagedSandboxLease,
  type OrphanReaper,
  type OrphanReconcileReport,
  type RuntimeOrphanPort,
  type RuntimeResourceScope,
  type SandboxInventoryPort,
  type SandboxOwnershipPort,
  sandboxOwnerVerdict,
} from "@openma/contract";
import type { Scheduler } from "@openma/time";
import { describeError } from "./context.ts";
import { withinDeadline } from "./deadline.ts";
import { every, Periodic } from "./every.ts";

export interface SandboxReaperOptions {
  /** The driver, configured to list only this deployment's serve-lane sandboxes. */
  sandbox: OrphanReaper & SandboxInventoryPort;
  ownership: SandboxOwnershipPort;
  orphans: RuntimeOrphanPort;
  deployment: string;
  /** The driver name the owner records carry (its provider name). */
  driver: string;
  scheduler: Scheduler;
  intervalMs: number;
  /** Bound on each provider call (list, reap); default 60 s. */
  callTimeoutMs?: number;
  /** Stale records cleared per pass (default 100). */
  staleLimit?: number;
  onReport?: (report: SandboxReapReport) => void;
  onError?: (err: unknown) => void;
}

export interface SandboxReapReport {
  /** Sandboxes the driver listed. */
  listed: number;
  /** Left alone: their owner is live. */
  live: number;
  reaped: number;
  /** Could not be killed: now orphan records. */
  orphaned: number;
  /** Records cleared whose sandbox was already gone. */
  cleared: number;
  orphans: OrphanReconcileReport;
}

export class SandboxReaper {
  readonly #options: SandboxReaperOptions;
  readonly #periodic = new Periodic();

  constructor(options: SandboxReaperOptions) {
    this.#options = options;
  }

  get running(): boolean {
    return this.#periodic.running;
  }

  /** A pass at once (start-up: what a dead server left), then one every `intervalMs`. */
  start(): void {
    const { scheduler, intervalMs, onError = () => {} } = this.#options;
    this.#periodic.start((signal) => [every(scheduler, intervalMs, signal, () => this.reapOnce(signal), onError, true)]);
  }

  /** Stops scheduling and waits for the pass in flight. */
  stop(): Promise<void> {
    return this.#periodic.stop();
  }

  async reapOnce(signal: AbortSignal = new AbortController().signal): Promise<SandboxReapReport> {
    const { sandbox, ownership, orphans, scheduler, deployment, driver } = this.#options;
    const timeout = this.#options.callTimeoutMs ?? 60_000;
    const listed = await withinDeadline(scheduler, timeout, (bound) => sandbox.listOwned({ signal: AbortSignal.any([signal, bound]) }));
    if (listed.type === "failed") throw new Error(`listing ${driver} sandboxes failed: ${listed.error}`);
    const ownerIds = [...new Set(listed.runtimes.map((r) => r.ownerId))];
    const records = new Map((await ownership.get({ ids: ownerIds, signal })).map((r) => [r.id, r]));
    const report: SandboxReapReport = {
      listed: listed.runtimes.length,
      live: 0,
      reaped: 0,
      orphaned: 0,
      cleared: 0,
      orphans: emptyReport(),
    };
    const now = scheduler.now();

    for (const runtime of listed.runtimes) {
      signal.throwIfAborted();
      const verdict = sandboxOwnerVerdict(records.get(runtime.ownerId) ?? null, now);
      // Judged on a snapshot; the takeover re-checks atomically, so an owner that renewed or used it since keeps it.
      if (verdict === "live" || (verdict !== "unowned" && (await ownership.takeOver({ id: runtime.ownerId, signal })) === "live")) {
        report.live += 1;
        continue;
      }
      report[await this.#reap(runtime.scope, runtime.generation, runtime.lease, signal)] += 1;
    }

    const seen = new Set(ownerIds);
    const stale = await ownership.listStale({ deployment, driver, limit: this.#options.staleLimit ?? 100, signal });
    // A record whose runtime was listed was judged above.
    for (const record of stale.filter((r) => !seen.has(r.id))) {
      // Not listed, but the record knew its lease: reap by lease (a listing that lagged the acquire, or a
      // provider that cannot list). Reaped BEFORE the record goes: a reaper killed in between leaves the
      // record for the next pass, where deleting it first would leave a runtime no listing can find (the
      // Cloudflare bridge). A stale record never turns live again (renew and touch only move live ones),
      // so no owner can be using it; a second reaper racing here reaps an already-gone runtime, harmlessly.
      if (record.lease !== null) await this.#reap(record.scope, 1, record.lease, signal);
      if ((await ownership.takeOver({ id: record.id, signal })) !== "taken") continue;
      report.cleared += 1;
    }

    report.orphans = await orphans.reconcile({ reaper: sandbox, signal });
    this.#options.onReport?.(report);
    return report;
  }

  /** Hard kill through the driver; a failure becomes an orphan record (backoff, dead-letter). */
  async #reap(
    scope: RuntimeResourceScope,
    generation: number,
    lease: ManagedSandboxLease,
    signal: AbortSignal,
  ): Promise<"reaped" | "orphaned"> {
    const { sandbox, orphans, scheduler } = this.#options;
    const result = await withinDeadline(scheduler, this.#options.callTimeoutMs ?? 60_000, (bound) =>
      sandbox.reap({ scope, lease, reason: "lease_lost", signal: AbortSignal.any([signal, bound]) }),
    ).catch((err: unknown) => ({ type: "failed" as const, error: describeError(err) }));
    if (result.type !== "failed") return "reaped";
    await orphans.enqueue({ scope, generation, lease, reason: "lease_lost", error: result.error, redact: [], signal });
    return "orphaned";
  }
}

function emptyReport(): OrphanReconcileReport {
  return { due: 0, reaped: 0, retried: 0, deadLettered: 0, skipped: 0 };
}
