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
): Promise<void> {
  for (;;) {
    try {
      await scheduler.sleep(intervalMs, signal);
    } catch {
      return;
    }
    try {
      await task();
    } catch (err) {
      // A task cut short by the loop's own stop is not an error worth reporting.
      if (!signal.aborted) onError(err);
    }
  }
}
