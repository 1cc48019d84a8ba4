/**
 * The default harness as the worker's turn runner. The harness watches the
 * session itself while it waits on the model or a tool and records what an
 * interrupt did to the call in flight, so the worker leaves interrupts to it
 * (`abortOnInterrupt: false` in the composition root).
 */
import { giveUpTurn, needsTurn, runTurn, type TurnRunnerDeps } from "@openma/harness";
import type { TurnRunner } from "./runner.ts";

export function harnessRunner(deps: TurnRunnerDeps): TurnRunner {
  return {
    runTurn: (sessionId, signal) => runTurn(deps, sessionId, signal),
    needsTurn: (sessionId) => needsTurn(deps.storage, sessionId),
    giveUp: (sessionId, input) => giveUpTurn(deps, sessionId, input),
  };
}
