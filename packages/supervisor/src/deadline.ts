/**
 * A re-armable deadline on the injected Scheduler: `arm` replaces any
 * pending one, `cancel` drops it. Tests drive it with ManualScheduler, so a
 * timeout happens exactly when the test advances time past it.
 */
import type { Scheduler } from "@openma/time";

export class Deadline {
  readonly #scheduler: Scheduler;
  #pending: AbortController | null = null;

  constructor(scheduler: Scheduler) {
    this.#scheduler = scheduler;
  }

  arm(ms: number, onExpire: () => void): void {
    this.cancel();
    const pending = new AbortController();
    this.#pending = pending;
    this.#scheduler.sleep(ms, pending.signal).then(
      () => {
        if (this.#pending !== pending) return;
        this.#pending = null;
        onExpire();
      },
      () => {}, // cancelled
    );
  }

  cancel(): void {
    this.#pending?.abort();
    this.#pending = null;
  }
}

/** Resolves `true` if `promise` settles within `ms`, `false` otherwise (the promise is left running). */
export async function within(scheduler: Scheduler, ms: number, promise: Promise<unknown>): Promise<boolean> {
  const timer = new AbortController();
  try {
    return await Promise.race([
      promise.then(
        () => true,
        () => true,
      ),
      scheduler.sleep(ms, timer.signal).then(
        () => false,
        () => true, // only aborted once the promise won
      ),
    ]);
  } finally {
    timer.abort();
  }
}
