/**
 * Per-session delay before this host runs a session again after its runs
 * here failed. A run that fails (no compute, a broken image) leaves its
 * item to be reclaimed; without a delay the host would acquire and fail
 * again on every reclaim. The delay doubles per consecutive failure and is
 * capped below the API's first-heartbeat grace (90 s), so waiting never
 * costs the claim itself; a completed run resets it.
 */
export interface RetryBackoffOptions {
  baseMs: number;
  maxMs: number;
  /** Sessions remembered at most (oldest forgotten first), so a long-lived host stays bounded. */
  maxEntries: number;
}

export const DEFAULT_RETRY_BACKOFF: RetryBackoffOptions = { baseMs: 1_000, maxMs: 60_000, maxEntries: 10_000 };

export class RetryBackoff {
  readonly #options: RetryBackoffOptions;
  readonly #failures = new Map<string, number>();

  constructor(options: RetryBackoffOptions = DEFAULT_RETRY_BACKOFF) {
    this.#options = options;
  }

  /** How long to wait before the next run of `key` (0: no failure on record). */
  delayFor(key: string): number {
    const failures = this.#failures.get(key) ?? 0;
    if (failures === 0) return 0;
    return Math.min(this.#options.maxMs, this.#options.baseMs * 2 ** Math.min(failures - 1, 30));
  }

  succeeded(key: string): void {
    this.#failures.delete(key);
  }

  failed(key: string): void {
    const failures = (this.#failures.get(key) ?? 0) + 1;
    // Re-inserted, so Map order is least recently failed first.
    this.#failures.delete(key);
    this.#failures.set(key, failures);
    while (this.#failures.size > this.#options.maxEntries) {
      const oldest = this.#failures.keys().next().value as string;
      this.#failures.delete(oldest);
    }
  }

  get size(): number {
    return this.#failures.size;
  }
}
