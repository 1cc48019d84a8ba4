/**
 * What the execution worker runs: one brain turn of a session. The default
 * harness (`runTurn`/`needsTurn` of @openma/harness) is adapted to this by
 * the composition root (harness-runner.ts); tests use small runners of their own.
 */
import type { TurnOutcome } from "@openma/harness";

/** The harness's outcome of one turn (the worker only tells `failed` apart). */
export type { TurnOutcome } from "@openma/harness";

export interface TurnRunner {
  /**
   * Runs the session until it needs outside input or ends. Stateless and
   * re-runnable: a crashed attempt is simply run again from the event log.
   * Must stop promptly when `signal` aborts (lease lost, interrupt, shutdown).
   * `traceparent` is the W3C trace context of the request that queued the
   * turn, when tracing was on there: a traced runner continues that trace.
   */
  runTurn(sessionId: string, signal: AbortSignal, traceparent?: string | null): Promise<TurnOutcome>;
  /** True when the log has input the agent has not answered yet. */
  needsTurn(sessionId: string): Promise<boolean>;
  /**
   * The worker gave the turn up (its attempts ran out): record that in the
   * session (an error, then idle) so it does not stay `running` forever.
   * Idempotent per claim `generation`.
   */
  giveUp(sessionId: string, input: { error: string; attempts: number; generation: number }): Promise<void>;
}
