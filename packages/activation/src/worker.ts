/**
 * The activation worker (`acquire_then_session_poll`): claims activation
 * intents from the durable queue, holds each claim's lease (renewed through
 * @openma/leases while the launch is pending), launches one VM per intent
 * through a launcher port, and records the VM's runtime id. It never touches
 * Work: the launched VM's own worker polls, claims, heartbeats and stops the
 * session's Work (docs/activation.md).
 *
 * Two rules make "launched exactly once" hold across crashes
 * (docs/adr/0026-activation-intents.md):
 * - every claim of an intent launches with the intent's one idempotency key,
 *   so a claim that follows a crash mid-launch gets the VM the first attempt
 *   made instead of a second one;
 * - a launch is not aborted when the lease is lost (only on shutdown or its
 *   own timeout): it finishes, so its VM's id is known, and the holder then
 *   decides: the intent recorded this VM (a successor adopted it) or is still
 *   pending (the next claim adopts it by the key) → keep; the intent was
 *   cancelled, exhausted or completed with another VM → destroy it as an
 *   orphan.
 */
import { holdLease } from "@openma/leases";
import { realScheduler, type Scheduler } from "@openma/time";
import type { ActivationClaim, ActivationInput, SqlActivationIntentStore } from "./intents.ts";

export interface LaunchInput {
  /** The event that asked for the VM (stable across claims). */
  activationId: string;
  /** The intent's provider idempotency token: the same for every claim of the intent. */
  idempotencyKey: string;
  environmentId: string;
  workspaceId: string;
  sessionId: string;
  attempt: number;
  generation: number;
  signal: AbortSignal;
}

/** Launches and destroys VMs. `launch` must be idempotent for `idempotencyKey`. */
export interface MicrovmLauncherPort {
  launch(input: LaunchInput): Promise<{ runtimeId: string }>;
  destroy(input: { runtimeId: string; reason: "activation_fence_lost"; signal: AbortSignal }): Promise<void>;
}

export const ACTIVATION_DESCRIPTOR = { provider: "aws-microvm", version: "1.0.0", strategy: "acquire_then_session_poll" } as const;

export interface ActivationWorkerOptions {
  store: SqlActivationIntentStore;
  launcher: MicrovmLauncherPort;
  ownerId: string;
  leaseTtlMs?: number;
  /** How often a held claim renews (default a third of the TTL; must be below it). */
  renewEveryMs?: number;
  retryDelayMs?: number;
  maxAttempts?: number;
  activationDeadlineMs?: number;
  reconcileBatchSize?: number;
  /** A launch that takes longer is abandoned (and retried later under the same key). */
  launchTimeoutMs?: number;
  scheduler?: Scheduler;
}

export type ProcessOutcome =
  | { type: "launched"; eventId: string; runtimeId: string }
  | { type: "retrying" | "exhausted"; eventId: string; error: string }
  /** The claim was lost; the VM (if one answered) was kept because the intent holds or will adopt it. */
  | { type: "lost"; eventId: string; runtimeId: string | null }
  | { type: "orphan_destroyed"; eventId: string; runtimeId: string };

export class ActivationWorker {
  readonly descriptor = ACTIVATION_DESCRIPTOR;
  readonly #o: Required<Omit<ActivationWorkerOptions, "renewEveryMs">> & { renewEveryMs: number };
  readonly #stop = new AbortController();

  constructor(options: ActivationWorkerOptions) {
    const leaseTtlMs = options.leaseTtlMs ?? 30_000;
    const renewEveryMs = options.renewEveryMs ?? Math.floor(leaseTtlMs / 3);
    if (!(renewEveryMs > 0 && renewEveryMs < leaseTtlMs)) throw new RangeError("renewEveryMs must be positive and below leaseTtlMs");
    this.#o = {
      store: options.store,
      launcher: options.launcher,
      ownerId: options.ownerId,
      leaseTtlMs,
      renewEveryMs,
      retryDelayMs: options.retryDelayMs ?? 1000,
      maxAttempts: options.maxAttempts ?? 5,
      activationDeadlineMs: options.activationDeadlineMs ?? 600_000,
      reconcileBatchSize: options.reconcileBatchSize ?? 16,
      launchTimeoutMs: options.launchTimeoutMs ?? 120_000,
      scheduler: options.scheduler ?? realScheduler,
    };
  }

  /** Records the intent (idempotent per event) and, if it is due and free, launches it now. */
  async activate(input: ActivationInput): Promise<ProcessOutcome | { type: "not_claimed"; eventId: string }> {
    const o = this.#o;
    await o.store.enqueue({ ...input, maxAttempts: o.maxAttempts, deadlineAtMs: o.scheduler.now() + o.activationDeadlineMs });
    const claimed = await o.store.claim({ ownerId: o.ownerId, leaseTtlMs: o.leaseTtlMs, eventId: input.eventId });
    if (claimed.type === "empty") return { type: "not_claimed", eventId: input.eventId };
    return this.process(claimed.claim);
  }

  /** Claims and processes due intents, up to the batch size; returns what happened to each. */
  async reconcile(): Promise<ProcessOutcome[]> {
    const outcomes: ProcessOutcome[] = [];
    while (outcomes.length < this.#o.reconcileBatchSize && !this.#stop.signal.aborted) {
      const claimed = await this.#o.store.claim({ ownerId: this.#o.ownerId, leaseTtlMs: this.#o.leaseTtlMs });
      if (claimed.type === "empty") break;
      outcomes.push(await this.process(claimed.claim));
    }
    return outcomes;
  }

  /** Reconciles every `intervalMs` (and at once after a full batch) until `stop()`. */
  async run(intervalMs: number, onOutcome?: (outcome: ProcessOutcome) => void): Promise<void> {
    while (!this.#stop.signal.aborted) {
      const outcomes = await this.reconcile();
      for (const outcome of outcomes) onOutcome?.(outcome);
      if (outcomes.length >= this.#o.reconcileBatchSize) continue;
      await this.#o.scheduler.sleep(intervalMs, this.#stop.signal).catch(() => {});
    }
  }

  stop(): void {
    this.#stop.abort();
  }

  /** Runs a provider call under the worker's stop signal and the launch timeout (on the injected scheduler). */
  async #bounded<T>(call: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const done = new AbortController();
    const timeout = new AbortController();
    this.#o.scheduler.sleep(this.#o.launchTimeoutMs, done.signal).then(
      () => timeout.abort(new Error(`provider call timed out after ${this.#o.launchTimeoutMs} ms`)),
      () => {},
    );
    try {
      return await call(AbortSignal.any([this.#stop.signal, timeout.signal]));
    } finally {
      done.abort();
    }
  }

  async process(claim: ActivationClaim): Promise<ProcessOutcome> {
    const o = this.#o;
    const { intent } = claim;
    const held = holdLease<ActivationClaim>(
      {
        renew: async (c) => {
          const r = await o.store.renew(c, o.leaseTtlMs);
          return r.type === "renewed"
            ? { type: "renewed", lease: c, expiresAt: r.expiresAtMs }
            : { type: "lost", reason: "activation lease taken over" };
        },
        release: (c) => o.store.release(c),
      },
      { lease: claim, expiresAt: claim.expiresAtMs },
      // A renewal that takes longer than the margin is abandoned, so a stuck store cannot carry the claim past its expiry.
      { renewEveryMs: o.renewEveryMs, safetyMarginMs: Math.floor(o.renewEveryMs / 2), renewTimeoutMs: Math.floor(o.renewEveryMs / 2) },
      o.scheduler,
    );
    let runtimeId: string;
    try {
      ({ runtimeId } = await this.#bounded((signal) =>
        o.launcher.launch({
          activationId: intent.eventId,
          idempotencyKey: intent.idempotencyKey,
          environmentId: intent.environmentId,
          workspaceId: intent.workspaceId,
          sessionId: intent.sessionId,
          attempt: intent.attemptCount,
          generation: claim.generation,
          signal,
        }),
      ));
    } catch (err) {
      const error = err instanceof Error ? err.message : String(err);
      const retried = await o.store.retry(claim, { nextAttemptAtMs: o.scheduler.now() + o.retryDelayMs, error });
      await held.release();
      if (retried.type === "lost") return { type: "lost", eventId: intent.eventId, runtimeId: null };
      return { type: retried.type === "released" ? "retrying" : "exhausted", eventId: intent.eventId, error };
    }
    const completed = held.signal.aborted ? ({ type: "lost" } as const) : await o.store.complete(claim, runtimeId);
    await held.release();
    if (completed.type === "completed") return { type: "launched", eventId: intent.eventId, runtimeId };
    // The VM exists but this claim no longer owns the intent: keep it only if the intent holds it or can still adopt it.
    const now = await o.store.get(intent.eventId);
    if (now?.state === "pending" || (now?.state === "completed" && now.runtimeId === runtimeId))
      return { type: "lost", eventId: intent.eventId, runtimeId };
    await this.#bounded((signal) => o.launcher.destroy({ runtimeId, reason: "activation_fence_lost", signal }));
    return { type: "orphan_destroyed", eventId: intent.eventId, runtimeId };
  }
}
