/**
 * The session's event log as the loop sees it: read incrementally, then
 * folded into `LogState`, everything the planner and the conversation
 * builder need. The log is the only state; nothing survives between steps
 * except what was appended.
 */
import { addUsageDelta, type BillableUsage, billableUsageOf } from "@openma/pricing";
import type { Storage } from "@openma/storage";
import { inScope, type Scope } from "./threads.ts";

export interface LoggedEvent {
  seq: number;
  id: string;
  type: string;
  body: Record<string, unknown>;
  /** The dedupe key the loop appended it under (tells its own bookkeeping apart, e.g. a compaction's model request). */
  key?: string | null;
  /** The thread it was appended by (null or absent: the primary thread). */
  threadId?: string | null;
}

const PAGE = 500;

/**
 * Appends to `events` everything after its last seq that belongs to `scope`
 * (the primary thread by default, threads.ts): the thread's own events and
 * the session-wide ones every thread sees.
 */
export async function readNewEvents(storage: Storage, sessionId: string, events: LoggedEvent[], scope: Scope = null): Promise<void> {
  let after = events.at(-1)?.seq ?? 0;
  for (;;) {
    const rows = await storage.db
      .selectFrom("session_events")
      .select(["seq", "id", "type", "body", "dedupe_key", "thread_id"])
      .where("session_id", "=", sessionId)
      .where("seq", ">", after)
      .where((eb) =>
        eb.or([
          scope ? eb("thread_id", "=", scope.id) : eb("thread_id", "is", null),
          eb("type", "in", ["session.usage", "user.interrupt"]),
        ]),
      )
      .orderBy("seq", "asc")
      .limit(PAGE)
      .execute();
    for (const row of rows) {
      const body = JSON.parse(row.body) as Record<string, unknown>;
      if (inScope(scope, { type: row.type, body, threadId: row.thread_id ?? null }))
        events.push({ seq: row.seq, id: row.id, type: row.type, body, key: row.dedupe_key, threadId: row.thread_id ?? null });
    }
    if (rows.length < PAGE) return;
    after = rows[rows.length - 1]?.seq ?? after;
  }
}

export type ToolUseKind = "tool" | "custom" | "mcp";

export interface ToolUseRecord {
  id: string;
  seq: number;
  kind: ToolUseKind;
  name: string;
  input: Record<string, unknown>;
  permission: string | null;
  mcpServerName: string | null;
}

export interface ResultRecord {
  seq: number;
  content: unknown[];
  isError: boolean;
}

export interface StatusRecord {
  seq: number;
  status: "running" | "idle" | "rescheduling" | "terminated";
  stopReason: { type: string; event_ids?: string[] } | null;
}

/** The session's cumulative usage (tokens, cache breakdown, server-tool requests), as priced by @openma/pricing. */
export type CumulativeUsage = BillableUsage;

/** The latest `user.define_outcome` and how far its evaluation got. */
export interface OutcomeRecord {
  seq: number;
  outcomeId: string;
  description: string;
  rubric: { type: "text"; content: string } | { type: "file"; file_id: string };
  maxIterations: number;
  /** Evaluations that ended (`span.outcome_evaluation_end`), oldest first. */
  ended: Array<{ seq: number; iteration: number; result: string }>;
  /** An evaluation that started and has not ended (a crash or an in-flight grader call). */
  open: { id: string; seq: number; iteration: number } | null;
}

/** Results after which no further evaluation runs. */
export const TERMINAL_OUTCOME_RESULTS: ReadonlySet<string> = new Set(["satisfied", "max_iterations_reached", "failed", "interrupted"]);

export interface LogState {
  events: readonly LoggedEvent[];
  lastSeq: number;
  terminated: boolean;
  lastStatus: StatusRecord | null;
  lastIdleSeq: number;
  /**
   * Last idle that ended a turn: any stop reason but `requires_action`. A `requires_action` idle only says which
   * calls the session waits on; it answers no input, so a tool result logged just before it (a fast worker
   * racing the loop's append of that idle) is still input the model must see.
   */
  lastTurnEndSeq: number;
  lastInterruptSeq: number;
  /** Last `span.model_request_end` with `is_error: false` (a response that landed). */
  lastResponseEndSeq: number;
  /** Last event the model must see that it has not answered: a user message or a tool result. */
  lastInputSeq: number;
  /** Last event that goes into the conversation (the request key of the next model call). */
  lastContentSeq: number;
  toolUses: ToolUseRecord[];
  results: Map<string, ResultRecord>;
  confirmations: Map<string, { result: string; denyMessage: string | null; seq: number }>;
  usage: CumulativeUsage;
  /**
   * Each thread's share of `usage` (null: the primary thread): the increases
   * of the snapshots it appended, so the shares add up to `usage` and each
   * can be priced on its own thread's model.
   */
  threadUsage: Map<string | null, CumulativeUsage>;
  outcome: OutcomeRecord | null;
  /**
   * Conversation size the model reported for the last response since the
   * last compaction (input + cache reads/writes + output tokens); 0 when no
   * response landed since.
   */
  contextTokens: number;
  /** The latest `agent.thread_context_compacted`. */
  compaction: { seq: number; id: string } | null;
  /** `span.model_request_start` ids of compaction summary requests (not the agent's own model calls). */
  compactionSpans: Set<string>;
  /** Conversation positions (`lastContentSeq`) whose compaction was tried and did not land. */
  failedCompactions: Set<number>;
}

/** Dedupe-key prefix of a compaction's summary request: `compact:<lastContentSeq>:…`. */
export const COMPACTION_KEY_PREFIX = "compact:";

const TOOL_USE_KINDS: Record<string, ToolUseKind> = {
  "agent.tool_use": "tool",
  "agent.custom_tool_use": "custom",
  "agent.mcp_tool_use": "mcp",
};

/** Result event type → the field naming the tool use it answers. */
const RESULT_FIELDS: Record<string, string> = {
  "user.tool_result": "tool_use_id",
  "user.custom_tool_result": "custom_tool_use_id",
  "agent.tool_result": "tool_use_id",
  "agent.mcp_tool_result": "mcp_tool_use_id",
};

const STATUS_OF: Record<string, StatusRecord["status"]> = {
  "session.status_running": "running",
  "session.status_idle": "idle",
  "session.status_rescheduled": "rescheduling",
  "session.status_terminated": "terminated",
  // A thread's log has its own status events (threads.ts renames them on append).
  "session.thread_status_running": "running",
  "session.thread_status_idle": "idle",
  "session.thread_status_rescheduled": "rescheduling",
  "session.thread_status_terminated": "terminated",
};

export const CONTENT_TYPES: ReadonlySet<string> = new Set([
  "user.message",
  "agent.thread_message_received",
  "system.message",
  "agent.message",
  ...Object.keys(TOOL_USE_KINDS),
  ...Object.keys(RESULT_FIELDS),
]);

function num(v: unknown): number {
  return typeof v === "number" && Number.isFinite(v) && v > 0 ? v : 0;
}

/** Tokens a response says its conversation holds: everything the next request sends again, plus what it wrote. */
function contextSize(raw: unknown): number {
  const u = (raw ?? {}) as Record<string, unknown>;
  return num(u.input_tokens) + num(u.cache_read_input_tokens) + num(u.cache_creation_input_tokens) + num(u.output_tokens);
}

export function scanLog(events: readonly LoggedEvent[]): LogState {
  const state: LogState = {
    events,
    lastSeq: events.at(-1)?.seq ?? 0,
    terminated: false,
    lastStatus: null,
    lastIdleSeq: 0,
    lastTurnEndSeq: 0,
    lastInterruptSeq: 0,
    lastResponseEndSeq: 0,
    lastInputSeq: 0,
    lastContentSeq: 0,
    toolUses: [],
    results: new Map(),
    confirmations: new Map(),
    usage: billableUsageOf(undefined),
    threadUsage: new Map(),
    outcome: null,
    contextTokens: 0,
    compaction: null,
    compactionSpans: new Set(),
    failedCompactions: new Set(),
  };
  /** Compaction span start id → the position it compacts. */
  const compactionAt = new Map<string, number>();
  const useSeq = new Map<string, number>();
  for (const e of events) {
    const b = e.body;
    if (CONTENT_TYPES.has(e.type)) state.lastContentSeq = e.seq;
    const kind = TOOL_USE_KINDS[e.type];
    if (kind) {
      state.toolUses.push({
        id: e.id,
        seq: e.seq,
        kind,
        name: String(b.name ?? ""),
        input: (b.input ?? {}) as Record<string, unknown>,
        permission: typeof b.evaluated_permission === "string" ? b.evaluated_permission : null,
        mcpServerName: typeof b.mcp_server_name === "string" ? b.mcp_server_name : null,
      });
      useSeq.set(e.id, e.seq);
      continue;
    }
    const resultField = RESULT_FIELDS[e.type];
    if (resultField) {
      const toolUseId = String(b[resultField] ?? "");
      if (state.results.has(toolUseId)) continue; // the first answer wins; a late duplicate changes nothing
      state.results.set(toolUseId, { seq: e.seq, content: Array.isArray(b.content) ? b.content : [], isError: b.is_error === true });
      // An answer to a call the user interrupted is history, not new input.
      if ((useSeq.get(toolUseId) ?? 0) > state.lastInterruptSeq) state.lastInputSeq = e.seq;
      continue;
    }
    const status = STATUS_OF[e.type];
    if (status) {
      const reason = b.stop_reason as StatusRecord["stopReason"] | undefined;
      state.lastStatus = { seq: e.seq, status, stopReason: status === "idle" ? (reason ?? { type: "end_turn" }) : null };
      if (status === "idle") state.lastIdleSeq = e.seq;
      if (status === "idle" && state.lastStatus.stopReason?.type !== "requires_action") state.lastTurnEndSeq = e.seq;
      if (status === "terminated") state.terminated = true;
      continue;
    }
    switch (e.type) {
      case "user.message":
      case "system.message":
      case "agent.thread_message_received":
        state.lastInputSeq = e.seq;
        break;
      case "user.interrupt":
        state.lastInterruptSeq = e.seq;
        break;
      case "user.define_outcome":
        state.outcome = {
          seq: e.seq,
          outcomeId: String(b.outcome_id),
          description: String(b.description ?? ""),
          rubric: b.rubric as OutcomeRecord["rubric"],
          maxIterations: typeof b.max_iterations === "number" ? b.max_iterations : 3,
          ended: [],
          open: null,
        };
        state.lastInputSeq = e.seq;
        state.lastContentSeq = e.seq;
        break;
      case "span.outcome_evaluation_start": {
        const o = state.outcome;
        if (o && o.outcomeId === b.outcome_id) o.open = { id: e.id, seq: e.seq, iteration: Number(b.iteration) };
        break;
      }
      case "span.outcome_evaluation_end": {
        const o = state.outcome;
        if (o && o.outcomeId === b.outcome_id) {
          o.open = null;
          o.ended.push({ seq: e.seq, iteration: Number(b.iteration), result: String(b.result) });
          // The grader's verdict is the agent's next input when it asks for more work.
          if (b.result === "needs_revision" || b.result === "max_iterations_reached") {
            state.lastInputSeq = e.seq;
            state.lastContentSeq = e.seq;
          }
        }
        break;
      }
      case "user.tool_confirmation":
        if (!state.confirmations.has(String(b.tool_use_id))) {
          state.confirmations.set(String(b.tool_use_id), {
            result: String(b.result),
            denyMessage: typeof b.deny_message === "string" ? b.deny_message : null,
            seq: e.seq,
          });
        }
        break;
      case "span.model_request_start":
        if (e.key?.startsWith(COMPACTION_KEY_PREFIX)) {
          compactionAt.set(e.id, Number(e.key.split(":")[1]));
          state.compactionSpans.add(e.id);
        }
        break;
      case "span.model_request_end": {
        const at = compactionAt.get(String(b.model_request_start_id));
        // A summary request is bookkeeping: it neither answers the agent's input nor measures its conversation.
        if (at !== undefined) {
          if (b.is_error !== false) state.failedCompactions.add(at);
          break;
        }
        if (b.is_error === false) {
          state.lastResponseEndSeq = e.seq;
          state.contextTokens = contextSize(b.model_usage);
        }
        break;
      }
      case "agent.thread_context_compacted":
        // The conversation changed under the model: the next request starts from the summary.
        state.compaction = { seq: e.seq, id: e.id };
        state.contextTokens = 0;
        state.lastInputSeq = e.seq;
        state.lastContentSeq = e.seq;
        break;
      case "session.usage": {
        const next = billableUsageOf(b.usage);
        const thread = e.threadId ?? null;
        const share = state.threadUsage.get(thread) ?? billableUsageOf(undefined);
        addUsageDelta(share, next, state.usage);
        state.threadUsage.set(thread, share);
        state.usage = next;
        break;
      }
      case "session.deleted":
        state.terminated = true;
        break;
    }
  }
  return state;
}

/** Tool uses still waiting for a result; a later `user.interrupt` abandons the ones before it. */
export function outstandingToolUses(state: LogState): ToolUseRecord[] {
  return state.toolUses.filter((t) => !state.results.has(t.id) && t.seq > state.lastInterruptSeq);
}

/** Failed attempts of the model request built from the log up to `contentSeq`. */
export function failedAttemptsSince(state: LogState, contentSeq: number): number {
  let n = 0;
  for (const e of state.events) {
    if (e.seq <= contentSeq || e.type !== "span.model_request_end" || e.body.is_error !== true) continue;
    if (!state.compactionSpans.has(String(e.body.model_request_start_id))) n++;
  }
  return n;
}
