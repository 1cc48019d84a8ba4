/**
 * The one lease controller of the system. Every lease (a session's execution
 * claim, a Work item held by a runtime host, a runtime resource fence) is
 * claimed by its own store-specific statement, then *held* here: renewed on a
 * schedule, declared lost when it can no longer be proven current, released
 * on a graceful stop. Policies are parameters, never forks, so lease loss,
 * transient renewal failure, graceful stop and cancellation mean the same
 * thing everywhere.
 *
 * Holding is deliberately pessimistic: a lease counts as lost as soon as the
 * holder cannot show a successful renewal that extends past now plus a safety
 * margin, even if the store might still consider it valid. Losing early is
 * safe (the work is fenced and redone); holding past expiry is split brain.
 */
import type { Scheduler } from "@openma/time";

export type RenewResult<L> =
  /** The store extended the lease; `lease` replaces the held value (e.g. a rotated token). */
  | { type: "renewed"; lease: L; expiresAt: number }
  /** The store says another holder owns it now, or it was revoked. Final. */
  | { type: "lost"; reason: string }
  /** The renewal could not be performed (network, database busy). Retried until expiry. */
  | { type: "transient"; error: string };

export interface LeaseStore<L> {
  renew(lease: L, signal: AbortSignal): Promise<RenewResult<L>>;
  /** Best effort: a release that fails only delays the next claim until expiry. */
  release(lease: L, signal: AbortSignal): Promise<void>;
}

export interface LeasePolicy {
  /** How often to renew while held. */
  renewEveryMs: number;
  /** The lease is treated as lost this long before its recorded expiry. */
  safetyMarginMs: number;
  /** A single renewal attempt is abandoned after this long (counts as transient). */
  renewTimeoutMs: number;
}

export type LeaseEnd =
  | { type: "released" }
  | { type: "lost"; reason: string }
  /** The store threw instead of returning a result: treated as loss, with the error kept for logs. */
  | { type: "failed"; error: string };

export interface HeldLease<L> {
  /** Aborted the moment the lease ends for any reason: pass it to the work the lease protects. */
  readonly signal: AbortSignal;
  /** The latest lease value (renewals may replace it). */
  readonly current: L;
  /** Stops renewing and releases the lease; resolves when done. Idempotent. */
  release(): Promise<LeaseEnd>;
  /** Resolves when the lease ends (released, lost or failed). */
  readonly ended: Promise<LeaseEnd>;
}

class LeaseLostError extends Error {
  constructor(readonly end: LeaseEnd) {
    super(end.type === "released" ? "lease released" : end.type === "lost" ? `lease lost: ${end.reason}` : `lease failed: ${end.error}`);
    this.name = "LeaseLostError";
  }
}

/** Starts holding a freshly claimed lease until `release()` or loss. */
export function holdLease<L>(
  store: LeaseStore<L>,
  claimed: { lease: L; expiresAt: number },
  policy: LeasePolicy,
  scheduler: Scheduler,
): HeldLease<L> {
  const lifetime = new AbortController();
  const stopRenewing = new AbortController();
  let current = claimed.lease;
  let expiresAt = claimed.expiresAt;
  let finish!: (end: LeaseEnd) => void;
  const ended = new Promise<LeaseEnd>((resolve) => {
    finish = resolve;
  });
  let endValue: LeaseEnd | null = null;

  const end = (value: LeaseEnd) => {
    if (endValue) return;
    endValue = value;
    stopRenewing.abort();
    lifetime.abort(new LeaseLostError(value));
    finish(value);
  };

  const expired = () => scheduler.now() >= expiresAt - policy.safetyMarginMs;

  const renewOnce = async (): Promise<void> => {
    const attempt = new AbortController();
    const onStop = () => attempt.abort();
    stopRenewing.signal.addEventListener("abort", onStop, { once: true });
    // The timeout races the renewal; whichever settles first wins.
    const timeout = scheduler.sleep(policy.renewTimeoutMs, attempt.signal).then(
      (): RenewResult<L> => ({ type: "transient", error: `renewal timed out after ${policy.renewTimeoutMs} ms` }),
      (): RenewResult<L> => ({ type: "transient", error: "renewal abandoned" }),
    );
    try {
      const result = await Promise.race([store.renew(current, attempt.signal), timeout]);
      if (stopRenewing.signal.aborted) return;
      if (result.type === "renewed") {
        current = result.lease;
        expiresAt = result.expiresAt;
      } else if (result.type === "lost") {
        end({ type: "lost", reason: result.reason });
      }
    } finally {
      attempt.abort();
      stopRenewing.signal.removeEventListener("abort", onStop);
    }
  };

  const loop = async () => {
    try {
      for (;;) {
        // Sleep until the next renewal, but never past the point where the lease must count as lost.
        const untilUnsafe = expiresAt - policy.safetyMarginMs - scheduler.now();
        await scheduler.sleep(Math.max(0, Math.min(policy.renewEveryMs, untilUnsafe)), stopRenewing.signal);
        if (stopRenewing.signal.aborted) return;
        await renewOnce();
        if (endValue) return;
        if (expired()) return end({ type: "lost", reason: "could not renew before expiry" });
      }
    } catch (err) {
      if (stopRenewing.signal.aborted) return;
      end({ type: "failed", error: err instanceof Error ? err.message : String(err) });
    }
  };

  if (expired()) end({ type: "lost", reason: "claimed lease was already expiring" });
  else void loop();

  let releasing: Promise<LeaseEnd> | null = null;
  return {
    signal: lifetime.signal,
    get current() {
      return current;
    },
    ended,
    release() {
      releasing ??= (async () => {
        if (endValue) return endValue;
        stopRenewing.abort();
        const value: LeaseEnd = { type: "released" };
        try {
          await store.release(current, new AbortController().signal);
        } catch {
          // Best effort: an unreleased lease simply expires before the next claim.
        }
        end(value);
        return endValue ?? value;
      })();
      return releasing;
    },
  };
}

export function isLeaseLostError(err: unknown): err is LeaseLostError {
  return err instanceof LeaseLostError;
}
