/**
 * A port call with a deadline on the injected scheduler (never wall time).
 *
 * Cleanup cannot wait forever for a provider that does not answer: at the
 * deadline the call's own signal is aborted (a port that honours it stops)
 * and the caller gets a rejection, whether or not the port ever answers.
 * The call may still settle later; that answer is dropped here, so it can
 * neither change what the caller decided nor be acted on twice.
 */
import type { Scheduler } from "@openma/time";

export async function withinDeadline<T>(scheduler: Scheduler, ms: number, call: (signal: AbortSignal) => Promise<T>): Promise<T> {
  const deadline = new AbortController();
  const settled = new AbortController();
  const expired = scheduler.sleep(ms, settled.signal).then(() => {
    const error = new Error(`no answer within ${ms} ms; abandoned`);
    deadline.abort(error);
    throw error;
  });
  // Cancelling the timer rejects `expired`; that is no error, even if `call` threw before the race subscribed.
  expired.catch(() => {});
  try {
    // The race also handles a late rejection of an abandoned call.
    return await Promise.race([call(deadline.signal), expired]);
  } finally {
    // Answered (or abandoned): the timer must not stay pending on the scheduler.
    settled.abort();
  }
}
