/**
 * The per-process execution worker: claims sessions that need a brain turn
 * from the execution queue, holds each claim with the one lease controller
 * (`holdLease`), runs the turn with the lease's signal, and releases the
 * claim with a disposition that says whether the session needs another turn.
 *
 * It wakes on the bus topic published when a session becomes pending and
 * polls as a fallback (a lost notification then costs one poll interval).
 * Lease loss aborts the turn at once; a `user.interrupt` appended while the
 * turn runs aborts it too, and the row goes back to pending (the interrupt
 * bumped its version), so the next attempt handles the interrupt from the log.
 */
import { type HeldLease, holdLease, type LeasePolicy, type RenewResult } from "@openma/leases";
import type { Storage } from "@openma/storage";
import { realScheduler, type Scheduler } from "@openma/time";
import { ExecutionLeaseStore } from "./lease-store.ts";
import { claimNext, EXECUTION_TOPIC, type ExecutionClaim, type ReleaseDisposition } from "./queue.ts";
import type { TurnOutcome, TurnRunner } from "./runner.ts";
import { type SessionWatch, type StopReason, watchSession } from "./watch.ts";

export interface WorkerLogger {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

const quiet: WorkerLogger = { info() {}, warn() {}, error() {} };

/** How one claimed attempt ended. */
export type AttemptResult =
  | { type: "ran"; outcome: TurnOutcome }
  /** The session had nothing to answer (a spurious wake-up or a request already served). */
  | { type: "skipped" }
  | { type: "threw"; error: string }
  | { type: "interrupted"; reason: StopReason }
  | { type: "lease_lost"; reason: string }
  | { type: "shutdown" }
  /** Too many consecutive attempts without settling: not run again until new input arrives. */
  | { type: "gave_up" };

export type WorkerEvent =
  | { type: "claimed"; sessionId: string; generation: number; attempts: number }
  /** No lease value here: it carries the token. */
  | { type: "renewal"; sessionId: string; result: RenewResult<unknown>["type"]; expiresAt: number | null }
  | { type: "ended"; sessionId: string; result: AttemptResult; releasedAs: "idle" | "pending" | null };

export interface ExecutionWorkerOptions {
  storage: Storage;
  runner: TurnRunner;
  scheduler?: Scheduler;
  logger?: WorkerLogger;
  /** Turns run at once by this process. */
  concurrency?: number;
  /** Fallback poll when no wake-up arrives. */
  pollIntervalMs?: number;
  /** Lease TTL; renewal every third of it, lost a sixth before expiry. */
  leaseTtlMs?: number;
  /** Consecutive unsettled attempts after which a session is given up until new input. */
  maxAttempts?: number;
  /** Delay before retrying an attempt whose runner threw (by attempt number, 1-based). */
  retryBackoffMs?: (attempt: number) => number;
  /** Prefix of the per-attempt owner ids (e.g. host name and pid), for diagnostics. */
  ownerPrefix?: string;
  /** Observes claims and attempt ends (tests, metrics). */
  onEvent?: (event: WorkerEvent) => void;
  /**
   * Abort a running turn when a `user.interrupt` (or termination, deletion)
   * lands in its log. Default true; a runner that watches its session itself
   * (the default harness) is better left to react on its own.
   */
  abortOnInterrupt?: boolean;
}

const DEFAULTS = { concurrency: 16, pollIntervalMs: 5_000, leaseTtlMs: 30_000, maxAttempts: 5 };

export function defaultRetryBackoff(attempt: number): number {
  return Math.min(1_000 * 2 ** Math.max(0, attempt - 1), 60_000);
}

class WorkerStopping extends Error {
  constructor() {
    super("execution worker stopping");
    this.name = "WorkerStopping";
  }
}

export class ExecutionWorker {
  readonly #storage: Storage;
  readonly #runner: TurnRunner;
  readonly #scheduler: Scheduler;
  readonly #log: WorkerLogger;
  readonly #concurrency: number;
  readonly #pollIntervalMs: number;
  readonly #ttlMs: number;
  readonly #policy: LeasePolicy;
  readonly #maxAttempts: number;
  readonly #backoff: (attempt: number) => number;
  readonly #ownerPrefix: string;
  readonly #onEvent: (event: WorkerEvent) => void;
  readonly #abortOnInterrupt: boolean;
  readonly #turns = new Set<Promise<void>>();
  readonly #shutdown = new AbortController();
  #loop: Promise<void> | null = null;
  /** Set by `drain`: no more claims, running turns may finish. */
  #draining = false;
  #woken = false;
  #resume: (() => void) | null = null;

  constructor(opts: ExecutionWorkerOptions) {
    this.#storage = opts.storage;
    this.#runner = opts.runner;
    this.#scheduler = opts.scheduler ?? realScheduler;
    this.#log = opts.logger ?? quiet;
    this.#concurrency = positiveInt(opts.concurrency ?? DEFAULTS.concurrency, "concurrency");
    this.#pollIntervalMs = positiveInt(opts.pollIntervalMs ?? DEFAULTS.pollIntervalMs, "pollIntervalMs");
    this.#ttlMs = positiveInt(opts.leaseTtlMs ?? DEFAULTS.leaseTtlMs, "leaseTtlMs");
    if (this.#ttlMs < 600) throw new RangeError("leaseTtlMs must be at least 600 ms");
    this.#policy = {
      renewEveryMs: Math.floor(this.#ttlMs / 3),
      safetyMarginMs: Math.floor(this.#ttlMs / 6),
      renewTimeoutMs: Math.floor(this.#ttlMs / 6),
    };
    this.#maxAttempts = positiveInt(opts.maxAttempts ?? DEFAULTS.maxAttempts, "maxAttempts");
    this.#backoff = opts.retryBackoffMs ?? defaultRetryBackoff;
    this.#ownerPrefix = opts.ownerPrefix ?? `pid${process.pid}`;
    this.#onEvent = opts.onEvent ?? (() => {});
    this.#abortOnInterrupt = opts.abortOnInterrupt ?? true;
  }

  /** Turns running now. */
  get active(): number {
    return this.#turns.size;
  }

  start(): void {
    if (this.#shutdown.signal.aborted) throw new Error("a stopped execution worker cannot be restarted");
    this.#loop ??= this.#run();
  }

  /**
   * Stops claiming, aborts running turns and hands their sessions back as
   * pending (the harness is re-runnable), so another process resumes them at
   * once instead of after lease expiry.
   */
  async stop(): Promise<void> {
    this.#shutdown.abort(new WorkerStopping());
    this.#kick();
    await this.#loop;
    while (this.#turns.size > 0) await Promise.allSettled([...this.#turns]);
  }

  /**
   * A rolling restart's stop: claims nothing more and lets the running turns
   * finish for up to `timeoutMs`; whatever still runs then is handed back as
   * pending (`stop`), so another process resumes it at once.
   */
  async drain(timeoutMs: number): Promise<void> {
    this.#draining = true;
    const deadline = new AbortController();
    const expired = this.#scheduler.sleep(timeoutMs, deadline.signal).then(
      () => true,
      () => false,
    );
    try {
      while (this.#turns.size > 0) {
        const finished = Promise.allSettled([...this.#turns]).then(() => false);
        if (await Promise.race([finished, expired])) break;
      }
    } finally {
      deadline.abort();
    }
    await this.stop();
  }

  /** Wakes the claim loop (bus notification, a finished turn). */
  readonly #kick = (): void => {
    this.#woken = true;
    const resume = this.#resume;
    this.#resume = null;
    resume?.();
  };

  async #run(): Promise<void> {
    const unsubscribe = this.#storage.bus.subscribe(EXECUTION_TOPIC, this.#kick);
    try {
      while (!this.#shutdown.signal.aborted) {
        this.#woken = false;
        await this.#fill();
        if (this.#shutdown.signal.aborted) break;
        if (!this.#woken) await this.#waitForWake();
      }
    } finally {
      unsubscribe();
    }
  }

  /** Claims while there are free slots and claimable sessions. */
  async #fill(): Promise<void> {
    while (this.#turns.size < this.#concurrency && !this.#shutdown.signal.aborted && !this.#draining) {
      let claim: ExecutionClaim | null;
      try {
        claim = await claimNext(this.#storage.db, this.#storage.dialect, {
          nowMs: this.#scheduler.now(),
          ttlMs: this.#ttlMs,
          ownerPrefix: this.#ownerPrefix,
        });
      } catch (err) {
        this.#log.warn({ err: (err as Error).message }, "execution claim failed; retrying at the next poll");
        return;
      }
      if (!claim) return;
      if (this.#shutdown.signal.aborted) {
        // Claimed while stopping: hand it straight back.
        this.#track(this.#handBack(claim));
        return;
      }
      this.#track(this.#attempt(claim));
    }
  }

  #track(turn: Promise<void>): void {
    const tracked = turn
      .catch((err: Error) => this.#log.error({ err: err.message }, "execution attempt failed unexpectedly"))
      .finally(() => {
        this.#turns.delete(tracked);
        this.#kick();
      });
    this.#turns.add(tracked);
  }

  async #waitForWake(): Promise<void> {
    const sleeping = new AbortController();
    const woken = new Promise<void>((resolve) => {
      this.#resume = resolve;
    });
    try {
      await Promise.race([woken, this.#scheduler.sleep(this.#pollIntervalMs, sleeping.signal).catch(() => {})]);
    } finally {
      sleeping.abort();
      this.#resume = null;
    }
  }

  async #handBack(claim: ExecutionClaim): Promise<void> {
    const store = new ExecutionLeaseStore(this.#storage.db, this.#scheduler, this.#ttlMs);
    store.disposition = { type: "hand_back" };
    await store.release(claim);
    await this.#announce(store.releasedAs ?? null);
  }

  /** One claimed attempt: hold the lease, run the turn, release with the right disposition. */
  async #attempt(claim: ExecutionClaim): Promise<void> {
    const { sessionId } = claim;
    this.#onEvent({ type: "claimed", sessionId, generation: claim.generation, attempts: claim.attempts });
    const store = new ExecutionLeaseStore(this.#storage.db, this.#scheduler, this.#ttlMs, (result) =>
      this.#onEvent({ type: "renewal", sessionId, result: result.type, expiresAt: result.type === "renewed" ? result.expiresAt : null }),
    );
    const held = holdLease(store, { lease: claim, expiresAt: claim.expiresAt }, this.#policy, this.#scheduler);
    const result = claim.attempts > this.#maxAttempts ? ({ type: "gave_up" } as const) : await this.#runHeld(claim, held);
    if (result.type === "lease_lost") {
      // Not released: another holder may own it already; the row is left to the claim that replaces us.
      this.#log.warn({ session_id: sessionId, reason: result.reason }, "execution lease lost; the turn was aborted");
      this.#onEvent({ type: "ended", sessionId, result, releasedAs: null });
      return;
    }
    store.disposition = await this.#dispositionFor(sessionId, claim, result);
    if (store.disposition.type === "give_up") await this.#giveUp(sessionId, claim, store.disposition.error);
    const end = await held.release();
    const releasedAs = end.type === "released" ? (store.releasedAs ?? null) : null;
    if (result.type === "gave_up" || result.type === "threw") {
      this.#log.error({ session_id: sessionId, attempts: claim.attempts, result }, "execution attempt did not complete");
    }
    this.#onEvent({ type: "ended", sessionId, result, releasedAs });
    await this.#announce(releasedAs);
  }

  /** Runs the turn under the lease's signal (plus interrupts and shutdown); why it stopped decides the result. */
  async #runHeld(claim: ExecutionClaim, held: HeldLease<ExecutionClaim>): Promise<AttemptResult> {
    const { sessionId } = claim;
    const interrupt = new AbortController();
    let stopReason: StopReason | null = null;
    let watch: SessionWatch | null = null;
    let result: AttemptResult;
    try {
      if (this.#abortOnInterrupt) {
        const onStop = (reason: StopReason) => {
          stopReason = reason;
          interrupt.abort(new Error(`turn interrupted: ${reason.type === "event" ? reason.eventType : "session deleted"}`));
        };
        const onError = (err: Error) => this.#log.warn({ err: err.message, session_id: sessionId }, "session watch failed");
        watch = await watchSession(this.#storage, sessionId, onStop, onError);
      }
      result = await this.#runOnce(claim, AbortSignal.any([held.signal, interrupt.signal, this.#shutdown.signal]));
    } catch (err) {
      result = { type: "threw", error: (err as Error).message };
    } finally {
      watch?.close();
    }
    // Whatever the runner returned, an aborted signal says what really happened.
    if (held.signal.aborted) {
      const end = await held.ended;
      return { type: "lease_lost", reason: end.type === "lost" ? end.reason : end.type === "failed" ? end.error : "released" };
    }
    if (this.#shutdown.signal.aborted) return { type: "shutdown" };
    if (stopReason) return { type: "interrupted", reason: stopReason };
    return result;
  }

  async #runOnce({ sessionId, traceparent }: ExecutionClaim, signal: AbortSignal): Promise<AttemptResult> {
    if (!(await this.#runner.needsTurn(sessionId))) return { type: "skipped" };
    if (signal.aborted) return { type: "threw", error: "aborted before the turn started" };
    return { type: "ran", outcome: await this.#runner.runTurn(sessionId, signal, traceparent) };
  }

  async #dispositionFor(sessionId: string, claim: ExecutionClaim, result: AttemptResult): Promise<ReleaseDisposition> {
    switch (result.type) {
      case "shutdown":
        return { type: "hand_back" };
      case "interrupted":
        // Interrupts are answered by the next attempt, from the log.
        return { type: "requeue" };
      case "gave_up":
        return { type: "give_up", error: `gave up after ${claim.attempts - 1} attempts` };
      case "threw":
        return this.#retry(claim, result.error);
      case "skipped":
        return { type: "settle" };
      case "ran": {
        let unanswered: boolean;
        try {
          unanswered = await this.#runner.needsTurn(sessionId);
        } catch (err) {
          return this.#retry(claim, (err as Error).message);
        }
        // Settled: idle, or pending at once if input arrived meanwhile (the version tells).
        if (!unanswered) return { type: "settle" };
        // A failed turn that left its input unanswered (a database blip, say) is retried after a backoff;
        // any other turn that leaves work behind goes straight back. Both are bounded by maxAttempts.
        if (result.outcome.type === "failed") return this.#retry(claim, result.outcome.error);
        return { type: "requeue" };
      }
      case "lease_lost":
        throw new Error("unreachable: a lost lease is not released");
    }
  }

  /** Still under the lease: the session's log says the turn ended in an error, so it is not left `running`. */
  async #giveUp(sessionId: string, claim: ExecutionClaim, error: string): Promise<void> {
    const attempts = Math.min(claim.attempts, this.#maxAttempts);
    await this.#runner.giveUp(sessionId, { error, attempts, generation: claim.generation }).catch((err: Error) => {
      this.#log.error({ session_id: sessionId, err: err.message }, "recording a given-up turn failed");
    });
  }

  #retry(claim: ExecutionClaim, error: string): ReleaseDisposition {
    if (claim.attempts >= this.#maxAttempts) return { type: "give_up", error };
    return { type: "retry", availableAtMs: this.#scheduler.now() + this.#backoff(claim.attempts), error };
  }

  /** A row back to pending needs a claimer: wake every worker (this one included). */
  async #announce(releasedAs: "idle" | "pending" | null): Promise<void> {
    if (releasedAs !== "pending") return;
    await this.#storage.bus.publish(EXECUTION_TOPIC).catch((err: Error) => {
      this.#log.warn({ err: err.message }, "execution notification failed");
    });
  }
}

function positiveInt(value: number, name: string): number {
  if (!(Number.isSafeInteger(value) && value > 0)) throw new RangeError(`${name} must be a positive integer`);
  return value;
}
