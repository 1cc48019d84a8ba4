/**
 * A scripted stand-in for the model APIs agents speak (Anthropic Messages,
 * OpenAI Responses and Chat Completions, Gemini), driven by one script, for
 * tests and the offline demo.
 */

export { ManualScheduler, realScheduler, type Scheduler } from "@openma/time";
export type { RecordedRequest, RequestOutcome } from "./app.ts";
export { createScriptedModelApp, ScriptedModelCore } from "./app.ts";
export type { AuthVia } from "./dialect.ts";
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
  type SideRequestsInput,
  type SideRule,
  type SideRuleInput,
  type TurnInput,
} from "./script.ts";
export { type ScriptedModel, type ScriptedModelOptions, startScriptedModel } from "./server.ts";
export { DEFAULT_SIDE_RULES, jsonFromSchema } from "./side.ts";
export { DIALECTS, type Dialect, type RequestView, type ViewBlock, type ViewMessage } from "./view.ts";
