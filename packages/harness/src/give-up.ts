/**
 * The end of a turn the execution worker gave up on (its attempts ran out):
 * the session says so in its log, a `session.error` then
 * `session.status_idle` (`retries_exhausted`), instead of staying `running`
 * with nobody working on it. New input starts a fresh turn as usual.
 */
import { appendToSession, draft } from "./append.ts";
import type { TurnRunnerDeps } from "./turn.ts";

export async function giveUpTurn(
  deps: Pick<TurnRunnerDeps, "storage" | "clock" | "ids" | "logger">,
  sessionId: string,
  input: { error: string; attempts: number; generation: number },
): Promise<void> {
  // One give-up per claim generation: a retried release appends nothing twice.
  const key = `gave_up:${input.generation}`;
  const message = `the turn was given up after ${input.attempts} failed attempts: ${input.error}`;
  await appendToSession(deps, sessionId, [
    draft("session.error", { error: { type: "unknown_error", message, retry_status: { type: "exhausted" } } }, `${key}:error`),
    draft("session.status_idle", { stop_reason: { type: "retries_exhausted" }, stop_details: null }, `${key}:idle`),
  ]);
}
