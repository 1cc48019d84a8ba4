/**
 * The state one generation's run carries between its named steps: the held
 * fence, the run-wide abort signal, the latest known publication, the trace
 * and a cleanup stack. Steps receive it and return `Step<T>` values; nothing
 * else is mutable, so the transaction reads as a list of steps instead of one
 * closure juggling flags.
 *
 * The cleanup stack is what gives the seed's cleanup order for free: the
 * fence is acquired first and compute last, so unwinding in reverse
 * terminates (or suspends) compute, then releases output and workspace
 * bindings, and releases the fence at the very end, after compute is dead.
 *
 * After a lease loss or cancellation the run waits at most `abortGraceMs`
 * for any port: a step still pending then is abandoned (it fails as the
 * interruption), so cleanup, and with it the hard kill, is never held
 * hostage by a call stuck on, say, the dead connection that broke the
 * renewals. The abandoned call may still answer later; nothing it does can
 * publish (the guards refuse every next step and the fence refuses a lost
 * generation), whatever it acquires is undone at once (a closed cleanup
 * stack runs late items immediately), and what it traces is dropped.
 */
import {
  type ActivePublication,
  type FenceIdentity,
  fenceIdentity,
  type ManagedRuntimePlan,
  type OutputViolation,
  type RuntimeResourceFence,
  type RuntimeResourceScope,
  redactSecrets,
} from "@openma/contract";
import type { HeldLease } from "@openma/leases";
import { inHostSpan, settle } from "./spans.ts";
import type { CleanupSummary, HostTimings, ManagedRuntimeHostDeps, StepName, StepStatus, TraceEntry } from "./types.ts";

/** How the transaction ended, before cleanup turns it into a `RuntimeRunResult`. */
export type RunEnd =
  | { type: "completed"; publication: ActivePublication | null; rejectedOutputs: OutputViolation[] }
  | { type: "lease_lost"; stage: StepName; reason: string }
  | { type: "cancelled"; stage: StepName }
  | { type: "failed"; stage: StepName; error: string };

export type Interruption = Extract<RunEnd, { type: "lease_lost" | "cancelled" }>;

export type Step<T> = { ok: true; value: T } | { ok: false; end: RunEnd };

export function ok<T>(value: T): Step<T> {
  return { ok: true, value };
}

export function fail<T>(end: RunEnd): Step<T> {
  return { ok: false, end };
}

const MAX_DETAIL_LENGTH = 512;

export function describeError(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export class Trace {
  readonly entries: TraceEntry[] = [];
  #secrets: string[] = [];
  #sealed = false;

  /** Values that must never appear in a trace (the fence token). */
  redact(secret: string): void {
    this.#secrets.push(secret);
  }

  /** The entries of a finished run. Later entries (an abandoned call answering late) are dropped, not appended to a returned result. */
  seal(): TraceEntry[] {
    this.#sealed = true;
    return [...this.entries];
  }

  add(step: StepName, status: StepStatus, detail?: string): void {
    if (this.#sealed) return;
    const entry: TraceEntry = { step, status };
    if (detail !== undefined) entry.detail = redactSecrets(detail, this.#secrets, MAX_DETAIL_LENGTH);
    this.entries.push(entry);
  }
}

type CleanupItem = (end: RunEnd) => Promise<void>;

/**
 * Last acquired, first released. Items trace and swallow their own failures.
 * Each item is popped before it runs, so nothing is undone twice; an item
 * pushed while unwinding is undone by the same unwind, before the fence.
 */
export class CleanupStack {
  #items: CleanupItem[] = [];
  #closedWith: RunEnd | null = null;

  get depth(): number {
    return this.#items.length;
  }

  push(item: CleanupItem): void {
    // Acquired by an abandoned step that answered after cleanup: nobody will unwind it, so undo it now.
    if (this.#closedWith) void item(this.#closedWith);
    else this.#items.push(item);
  }

  async unwind(end: RunEnd, toDepth = 0): Promise<void> {
    while (this.#items.length > toDepth) await this.#items.pop()!(end);
  }

  /** The run's final cleanup: unwinds everything, and anything acquired later is undone at once. */
  async close(end: RunEnd): Promise<void> {
    await this.unwind(end);
    this.#closedWith = end;
  }
}

export class RunContext {
  readonly cleanup = new CleanupStack();
  readonly summary: CleanupSummary = { compute: "none", orphanIds: [] };
  /** Aborted on lease loss (renewal, stale publish) and on cancellation. */
  readonly signal: AbortSignal;
  /** Cleanup must run to the end even after the run signal fired (suspend and terminate carry their own bound instead). */
  readonly cleanupSignal = new AbortController().signal;
  /** The newest publication this run knows of (acquire, then each of its own publishes). */
  active: ActivePublication | null;
  readonly #loss = new AbortController();
  readonly #external: AbortSignal;
  /** Aborted when the transaction is over: the grace timer, if running, is no longer needed. */
  readonly #over = new AbortController();
  /** Rejects `abortGraceMs` after `signal` fired; never settles if the transaction ends first. */
  readonly #graceOver: Promise<never>;

  constructor(
    readonly deps: ManagedRuntimeHostDeps,
    readonly timings: HostTimings,
    readonly scope: RuntimeResourceScope,
    readonly plan: ManagedRuntimePlan,
    readonly trace: Trace,
    readonly held: HeldLease<RuntimeResourceFence>,
    active: ActivePublication | null,
    external: AbortSignal,
  ) {
    this.active = active;
    this.#external = external;
    this.signal = AbortSignal.any([held.signal, this.#loss.signal, external]);
    // A signal already aborted here never fires: then every guard refuses before it calls a port, so nothing needs bounding.
    this.#graceOver = new Promise<never>((_, reject) => {
      const expire = () =>
        deps.scheduler.sleep(timings.abortGraceMs, this.#over.signal).then(
          () => reject(new Error(`no answer within ${timings.abortGraceMs} ms of the abort; abandoned for the hard kill`)),
          () => {},
        );
      this.signal.addEventListener("abort", expire, { once: true, signal: this.#over.signal });
    });
    // Only the races below observe the expiry; with none pending it is no error.
    this.#graceOver.catch(() => {});
  }

  /** The transaction returned (cleanup follows): stop the grace timer. */
  endTransaction(): void {
    this.#over.abort();
  }

  /**
   * `work`, or a rejection once the grace period after an abort is over:
   * the host stops waiting for a port that does not honour the abort.
   * `work` keeps running; its late answer is ignored by the caller.
   */
  untilGrace<T>(work: Promise<T>): Promise<T> {
    return Promise.race([work, this.#graceOver]);
  }

  get fence(): RuntimeResourceFence {
    return this.held.current;
  }

  get identity(): FenceIdentity {
    return fenceIdentity(this.held.current);
  }

  get generation(): number {
    return this.held.current.generation;
  }

  /** Idempotency key of a stage of this generation: unique per scope because generations are. */
  key(...parts: Array<string | number>): string {
    return [this.generation, ...parts].join(":");
  }

  /** The fence said stale: stop everything, as if the renewal loop had noticed. */
  loseLease(reason: string): void {
    // A second call is a no-op: an AbortController keeps its first reason.
    this.#loss.abort(new Error(reason));
  }

  /** Why the run must stop now, if it must. Lease loss wins over cancellation: it is the stronger claim. */
  interruption(stage: StepName): Interruption | null {
    if (this.#loss.signal.aborted) return { type: "lease_lost", stage, reason: describeError(this.#loss.signal.reason) };
    if (this.held.signal.aborted) return { type: "lease_lost", stage, reason: describeError(this.held.signal.reason) };
    if (this.#external.aborted) return { type: "cancelled", stage };
    return null;
  }

  /**
   * Runs one step: refuses to start after an interruption, turns a thrown
   * port error into a `failed` end (or `lease_lost`/`cancelled` when the
   * throw was the port honouring our abort), and abandons the step as
   * interrupted when it is still pending once the grace period after an
   * abort is over. `boundsItsOwnWaits` is for `run_harness`, which gives
   * the harness that grace itself and must stop its monitor and close its
   * turn commits before it returns.
   */
  guard<T>(stage: StepName, fn: () => Promise<Step<T>>, opts: { boundsItsOwnWaits?: boolean } = {}): Promise<Step<T>> {
    return inHostSpan(`openma.host.${stage}`, {}, async (span) => {
      const step = await this.#guarded(stage, fn, opts);
      settle(span, step.ok ? "ok" : step.end.type);
      return step;
    });
  }

  async #guarded<T>(stage: StepName, fn: () => Promise<Step<T>>, opts: { boundsItsOwnWaits?: boolean }): Promise<Step<T>> {
    const before = this.interruption(stage);
    if (before) {
      this.trace.add(stage, before.type);
      return fail(before);
    }
    try {
      const step = fn();
      return await (opts.boundsItsOwnWaits ? step : this.untilGrace(step));
    } catch (err) {
      const end: Interruption | Extract<RunEnd, { type: "failed" }> = this.interruption(stage) ?? {
        type: "failed",
        stage,
        error: describeError(err),
      };
      this.trace.add(stage, end.type, describeError(err));
      return fail(end);
    }
  }

  /** Cleanup helper: runs `fn`, traces a failure, never throws. */
  bestEffort(step: StepName, fn: () => Promise<string | undefined>): Promise<boolean> {
    return inHostSpan(`openma.host.${step}`, {}, async (span) => {
      try {
        const detail = await fn();
        this.trace.add(step, "ok", detail);
        settle(span, "ok");
        return true;
      } catch (err) {
        this.trace.add(step, "failed", describeError(err));
        settle(span, "failed");
        return false;
      }
    });
  }
}
