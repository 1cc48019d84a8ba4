/**
 * When and where a conversation is compacted (compaction.ts runs it): pure
 * functions of the folded log, so the planner and a re-run after a crash
 * agree on both.
 */
import type { LoggedEvent, LogState } from "./log.ts";

/** The compaction settings the planner needs: the threshold for this model, and the previous compaction's cut (0: none). */
export interface CompactionPlan {
  threshold: number;
  keptFrom: number;
}

/** The cut of the compaction due before the next model call, or null when none is. */
export function compactionDue(state: LogState, plan: CompactionPlan | undefined): number | null {
  if (!plan || state.contextTokens < plan.threshold) return null;
  // Tried at this position and failed: the conversation goes on uncompacted until it changes.
  if (state.failedCompactions.has(state.lastContentSeq)) return null;
  return compactionCut(state, plan.keptFrom);
}

type Role = "user" | "assistant";

const INPUT_TYPES = new Set(["user.message", "system.message", "user.define_outcome"]);
const ROLE: Record<string, Role> = {
  "user.message": "user",
  "system.message": "user",
  "user.define_outcome": "user",
  "user.tool_result": "user",
  "user.custom_tool_result": "user",
  "agent.tool_result": "user",
  "agent.mcp_tool_result": "user",
  "agent.message": "assistant",
  "agent.tool_use": "assistant",
  "agent.custom_tool_use": "assistant",
  "agent.mcp_tool_use": "assistant",
};

function roleOf(e: LoggedEvent): Role | null {
  if (e.type === "span.outcome_evaluation_end")
    return e.body.result === "needs_revision" || e.body.result === "max_iterations_reached" ? "user" : null;
  return ROLE[e.type] ?? null;
}

/**
 * Where the verbatim part of a compacted conversation starts, or null when
 * nothing can be summarized. `keptFrom` is the previous compaction's cut (0
 * without one): a new cut lies after it, with at least one event between.
 */
export function compactionCut(state: LogState, keptFrom: number): number | null {
  // A cut must not separate a call from its result: no call before it may be answered at or after it.
  const answeredAt = state.toolUses.map((t) => ({ seq: t.seq, result: state.results.get(t.id)?.seq ?? 0 }));
  const clean = (seq: number) => answeredAt.every((t) => t.seq >= seq || t.result < seq);
  let previous: Role | null = null;
  let lastInput: number | null = null;
  let lastAssistant: number | null = null;
  for (const e of state.events) {
    if (e.seq < keptFrom) continue;
    const role = roleOf(e);
    if (!role) continue;
    if (previous !== null && role !== previous && clean(e.seq)) {
      if (INPUT_TYPES.has(e.type)) lastInput = e.seq;
      else if (role === "assistant") lastAssistant = e.seq;
    }
    previous = role;
  }
  return lastInput ?? lastAssistant;
}
