/** @openma/harness: the default agent loop (harness outside the sandbox), its model port and its tools. */
export { giveUpTurn } from "./give-up.ts";
export * from "./model.ts";
export { DENIED_BY_USER, SANDBOX_FREE_REFUSAL, type StopReason } from "./plan.ts";
export { NO_SANDBOX_DRIVER, noSandboxResolver } from "./sandbox.ts";
export * from "./server-tools.ts";
export { runSandboxTool, SANDBOX_TOOL_DEFINITIONS, SANDBOX_TOOL_NAMES, type ToolOutput } from "./toolset/index.ts";
export { needsTurn, runTurn, type TurnOutcome, type TurnRunnerDeps } from "./turn.ts";
