/** A stand-in for the Anthropic Messages API, driven by a script, for tests and the offline demo. */

export { ManualScheduler, realScheduler, type Scheduler } from "@openma/time";
export type { RecordedRequest, RequestOutcome } from "./app.ts";
export { createScriptedModelApp, ScriptedModelCore } from "./app.ts";
export type { ErrorType } from "./errors.ts";
export type { UnusedTurn } from "./queue.ts";
export {
  type Fault,
  type FaultInput,
  type Matcher,
  parseFault,
  parseScript,
  type ResponseSpecInput,
  type Script,
  ScriptError,
  type ScriptInput,
  type TurnInput,
} from "./script.ts";
export { type ScriptedModel, type ScriptedModelOptions, startScriptedModel } from "./server.ts";
