/**
 * A periodic task on an injected scheduler: the reaper, GC and the output
 * watcher all use it, so tests drive every loop with virtual time. A task
 * that throws is reported and the loop goes on; the loop ends when `signal`
 * aborts, and the returned promise resolves once the task in flight is done.
 */
import type { Scheduler } from "@openma/time";

export async function every(
  scheduler: Scheduler,
  intervalMs: number,
  signal: AbortSignal,
  task: () => Promise<unknown>,
  onError: (err: unknown) => void,
  /** Run the task once at once, before the first interval (a start-up pass). */
  immediate = false,
): Promise<void> {
  for (let first = true; ; first = false) {
    if (!(first && immediate)) {
      try {
        await scheduler.sleep(intervalMs, signal);
      } catch {
        return;
      }
    }
    try {
      await task();
    } catch (err) {
      // A task cut short by the loop's own stop is not an error worth reporting.
      if (!signal.aborted) onError(err);
    }
  }
}

/** Loops started together and stopped together: `start` is idempotent, `stop` waits for the tasks in flight. */
export class Periodic {
  #stop: AbortController | null = null;
  #loops: Array<Promise<void>> = [];

  get running(): boolean {
    return this.#stop !== null;
  }

  start(loops: (signal: AbortSignal) => Array<Promise<void>>): void {
    if (this.#stop) return;
    this.#stop = new AbortController();
    this.#loops = loops(this.#stop.signal);
  }

  async stop(): Promise<void> {
    this.#stop?.abort();
    this.#stop = null;
    await Promise.all(this.#loops);
    this.#loops = [];
  }
}
