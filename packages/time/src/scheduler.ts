/**
 * Time for the scripted model. Every scripted delay goes through a Scheduler so
 * a test can hold the server at a precise point (before the first byte,
 * between two SSE events) and release it by hand instead of sleeping on the
 * wall clock.
 */

export interface Scheduler {
  now(): number;
  /** Resolve after `ms`; reject with the signal's reason if it aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

function abortReason(signal: AbortSignal): Error {
  return signal.reason instanceof Error ? signal.reason : new Error("aborted");
}

export const realScheduler: Scheduler = {
  now: () => Date.now(),
  sleep(ms, signal) {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(abortReason(signal));
      const onAbort = () => {
        clearTimeout(timer);
        reject(abortReason(signal!));
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      }, ms);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  },
};

interface PendingSleep {
  due: number;
  seq: number;
  ms: number;
  resolve(): void;
}

/**
 * A scheduler tests drive: time only moves on `advance`. `untilSleeping`
 * lets a test wait for the server to reach a delay without polling.
 */
export class ManualScheduler implements Scheduler {
  #now: number;
  #seq = 0;
  #sleeps: PendingSleep[] = [];
  #waiters: { count: number; resolve(): void }[] = [];

  constructor(start = Date.parse("2026-01-01T00:00:00.000Z")) {
    this.#now = start;
  }

  now(): number {
    return this.#now;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(abortReason(signal));
      const entry: PendingSleep = {
        due: this.#now + ms,
        seq: this.#seq++,
        ms,
        resolve: () => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        },
      };
      const onAbort = () => {
        this.#sleeps = this.#sleeps.filter((s) => s !== entry);
        reject(abortReason(signal!));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#sleeps.push(entry);
      this.#notify();
    });
  }

  /** Durations (as requested) of the sleeps currently waiting, oldest first. */
  get pending(): number[] {
    return this.#sleeps.map((s) => s.ms);
  }

  /** Move time forward, waking every sleep that falls due, in due order. */
  advance(ms: number): void {
    if (!(ms >= 0)) throw new RangeError("advance() needs a non-negative number of milliseconds");
    this.#now += ms;
    const due = this.#sleeps.filter((s) => s.due <= this.#now).sort((a, b) => a.due - b.due || a.seq - b.seq);
    this.#sleeps = this.#sleeps.filter((s) => s.due > this.#now);
    for (const s of due) s.resolve();
  }

  /** Resolves once at least `count` sleeps are waiting. */
  untilSleeping(count = 1): Promise<void> {
    if (this.#sleeps.length >= count) return Promise.resolve();
    return new Promise<void>((resolve) => this.#waiters.push({ count, resolve }));
  }

  #notify(): void {
    const ready = this.#waiters.filter((w) => this.#sleeps.length >= w.count);
    this.#waiters = this.#waiters.filter((w) => this.#sleeps.length < w.count);
    for (const w of ready) w.resolve();
  }
}
