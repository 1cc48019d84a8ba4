/**
 * The planner: given the folded log, what is the one next thing to do?
 * Pure, so `runTurn` and `needsTurn` agree by construction, and a re-run
 * after a crash picks up exactly where the log says the turn stopped.
 *
 * Order of business:
 *  1. a terminated session does nothing;
 *  2. an outstanding tool use that the server can settle (run it, refuse it,
 *     or record a denial) is acted on, oldest first;
 *  3. tool uses nobody here can settle (custom tools, calls awaiting a
 *     confirmation, calls awaiting the self-hosted worker) make the session
 *     idle with `requires_action` listing them (re-emitted when the set shrinks);
 *  4. input the model has not seen (a user message, a tool result) calls the
 *     model, unless the session's budget is spent (then idle, `budget_reached`);
 *     a conversation near the model's context window is compacted first;
 *  5. an outcome the agent has worked on since its last verdict is evaluated;
 *  6. otherwise the turn is over: make sure the last status says idle.
 */
import { createHash } from "node:crypto";
import { type CompactionPlan, compactionDue } from "./compaction-cut.ts";
import type { LogState, OutcomeRecord, ToolUseRecord } from "./log.ts";
import { outstandingToolUses, TERMINAL_OUTCOME_RESULTS } from "./log.ts";
import type { ServerToolExecutor } from "./server-tools.ts";
import { isMcpExecutor, isSandboxTool, type SessionAgentView } from "./tools.ts";

/**
 * How a run ended:
 * - `idle`: the log ends with that `session.status_idle` (model failures end
 *   as `retries_exhausted`, after a `session.error` saying why);
 * - `waiting_for_hands`: idle with `requires_action`, and some of the calls
 *   wait for the self-hosted worker's `user.tool_result`;
 * - `interrupted`: the user interrupted (the log ends idle), or the caller's
 *   signal stopped the run (nothing more was recorded; `needsTurn` stays
 *   true and a later run resumes);
 * - `failed`: the session is gone or terminated, or the run hit an
 *   unexpected error (e.g. storage down); a later run may resume it.
 */
export type TurnOutcome =
  | { type: "idle"; stopReason: "end_turn" | "requires_action" | "retries_exhausted" | "refusal" | "budget_reached" }
  | { type: "waiting_for_hands" }
  | { type: "interrupted" }
  | { type: "failed"; error: string };

export type StopReason =
  | { type: "end_turn" }
  | { type: "requires_action"; event_ids: string[] }
  | { type: "retries_exhausted" }
  | { type: "refusal" }
  | { type: "budget_reached" };

export type Action = { type: "sandbox" } | { type: "server"; executor: ServerToolExecutor } | { type: "refuse"; message: string };

export type Step =
  | { kind: "terminated" }
  | { kind: "settled"; outcome: TurnOutcome }
  | { kind: "idle"; stopReason: StopReason; outcome: TurnOutcome; dedupeKey: string }
  | { kind: "act"; toolUse: ToolUseRecord; action: Action }
  | { kind: "call_model" }
  /** Summarize the conversation before `cut` first (compaction.ts), then call the model. */
  | { kind: "compact"; cut: number }
  | { kind: "evaluate"; evaluation: Evaluation };

/** The outcome evaluation the log calls for (`span.outcome_evaluation_*`). */
export interface Evaluation {
  outcome: OutcomeRecord;
  iteration: number;
  /** The evaluation's start event when it already started (a re-run after a crash). */
  startId: string | null;
  /** The user interrupted while it ran: it ends `interrupted` without a grader call. */
  interrupted: boolean;
}

/** True while an outcome is defined and has no terminal verdict. */
export function outcomePending(state: LogState): boolean {
  const o = state.outcome;
  return !!o && !o.ended.some((e) => TERMINAL_OUTCOME_RESULTS.has(e.result));
}

/**
 * An evaluation is due when an outcome is pending and the agent has answered
 * since it was defined (or since the last verdict), or one started and did
 * not end. An interrupt before it started settles the turn instead.
 */
export function evaluationDue(state: LogState): Evaluation | null {
  const o = state.outcome;
  if (!o || !outcomePending(state)) return null;
  if (o.open) return { outcome: o, iteration: o.open.iteration, startId: o.open.id, interrupted: state.lastInterruptSeq > o.open.seq };
  const since = Math.max(o.seq, o.ended.at(-1)?.seq ?? 0);
  if (state.lastResponseEndSeq <= since || state.lastInterruptSeq > state.lastResponseEndSeq) return null;
  return { outcome: o, iteration: o.ended.length, startId: null, interrupted: false };
}

export interface PlanContext {
  /** `self_hosted`, `cloud`, `none` (sandbox-free) or undefined when the environment is gone. */
  envType: string | undefined;
  archived: boolean;
  agent: SessionAgentView;
  executors: readonly ServerToolExecutor[];
  /** Whether the session's budget still allows a model call (usage.ts); `needsTurn` may leave it out. */
  budget?: "ok" | "reached" | "unpriced";
  /** When the conversation is compacted before a model call; without it, never (`needsTurn`). */
  compaction?: CompactionPlan | undefined;
}

export const SANDBOX_FREE_REFUSAL =
  'sandbox tools (bash, read, write, edit, glob, grep) are unavailable in a sandbox-free session (environment config type "none"); only server-side tools can run here';
export const DENIED_BY_USER = "The user denied this tool call.";

type Disposition = { type: "act"; action: Action } | { type: "block"; hands: boolean };

function dispose(t: ToolUseRecord, state: LogState, ctx: PlanContext): Disposition {
  if (t.kind === "custom") return { type: "block", hands: false };
  if (t.permission === "deny") return { type: "act", action: { type: "refuse", message: `${t.name}: this tool call is not permitted` } };
  const selfHosted = ctx.envType === "self_hosted";
  if (t.permission === "ask") {
    const verdict = state.confirmations.get(t.id);
    if (!verdict) return { type: "block", hands: false };
    if (verdict.result !== "allow") return { type: "act", action: { type: "refuse", message: verdict.denyMessage || DENIED_BY_USER } };
  }
  if (t.kind === "mcp") {
    const executor = ctx.executors.find((e) => e.id === t.mcpServerName && isMcpExecutor(ctx.agent, e));
    if (executor) return { type: "act", action: { type: "server", executor } };
    return { type: "act", action: { type: "refuse", message: `MCP server ${JSON.stringify(t.mcpServerName)} is not available` } };
  }
  if (isSandboxTool(t.name)) {
    if (selfHosted) return { type: "block", hands: true };
    if (ctx.envType === "none") return { type: "act", action: { type: "refuse", message: SANDBOX_FREE_REFUSAL } };
    return { type: "act", action: { type: "sandbox" } };
  }
  const executor = ctx.executors.find((e) => !isMcpExecutor(ctx.agent, e) && e.handles(t.name));
  if (executor) return { type: "act", action: { type: "server", executor } };
  return { type: "act", action: { type: "refuse", message: `tool ${JSON.stringify(t.name)} is not available in this session` } };
}

function settledIdle(stopReason: string | undefined): TurnOutcome {
  if (stopReason === "retries_exhausted" || stopReason === "refusal" || stopReason === "budget_reached")
    return { type: "idle", stopReason };
  return { type: "idle", stopReason: "end_turn" };
}

function sameIds(a: readonly string[] | undefined, b: readonly string[]): boolean {
  return !!a && a.length === b.length && a.every((id, i) => id === b[i]);
}

export function planStep(state: LogState, ctx: PlanContext): Step {
  if (state.terminated || ctx.archived) return { kind: "terminated" };
  const outstanding = outstandingToolUses(state);
  const blocked: string[] = [];
  let hands = false;
  for (const t of outstanding) {
    const d = dispose(t, state, ctx);
    if (d.type === "act") return { kind: "act", toolUse: t, action: d.action };
    blocked.push(t.id);
    hands ||= d.hands;
  }
  const last = state.lastStatus;
  if (blocked.length) {
    const outcome: TurnOutcome = hands ? { type: "waiting_for_hands" } : { type: "idle", stopReason: "requires_action" };
    if (last?.status === "idle" && last.stopReason?.type === "requires_action" && sameIds(last.stopReason.event_ids, blocked)) {
      return { kind: "settled", outcome };
    }
    const digest = createHash("sha256").update(blocked.join(",")).digest("hex").slice(0, 32);
    return {
      kind: "idle",
      stopReason: { type: "requires_action", event_ids: blocked },
      outcome,
      dedupeKey: `idle:requires_action:${digest}`,
    };
  }
  if (state.lastInputSeq > Math.max(state.lastResponseEndSeq, state.lastTurnEndSeq, state.lastInterruptSeq)) {
    if (ctx.budget === undefined || ctx.budget === "ok") {
      const cut = compactionDue(state, ctx.compaction);
      return cut === null ? { kind: "call_model" } : { kind: "compact", cut };
    }
    // The spend so far has reached the ceiling: the turn ends here, before the model call.
    return {
      kind: "idle",
      stopReason: { type: "budget_reached" },
      outcome: { type: "idle", stopReason: "budget_reached" },
      dedupeKey: `idle:budget_reached:${state.lastSeq}`,
    };
  }
  const evaluation = evaluationDue(state);
  if (evaluation) return { kind: "evaluate", evaluation };
  const interrupted = state.lastInterruptSeq > state.lastIdleSeq;
  if (last?.status === "idle" && last.stopReason?.type !== "requires_action")
    return { kind: "settled", outcome: settledIdle(last.stopReason?.type) };
  if (!last && !interrupted) return { kind: "settled", outcome: { type: "idle", stopReason: "end_turn" } };
  return {
    kind: "idle",
    stopReason: { type: "end_turn" },
    outcome: interrupted ? { type: "interrupted" } : { type: "idle", stopReason: "end_turn" },
    dedupeKey: `idle:end_turn:${state.lastSeq}`,
  };
}
