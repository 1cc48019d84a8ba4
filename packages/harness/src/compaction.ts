/**
 * Context compaction (docs/adr/0022-context-compaction.md): when the model
 * reported, for its last response, a conversation at or above the
 * compaction threshold of its context window (context-window.ts), the next
 * model call is preceded by a summary turn. The model is asked to summarize
 * everything before a cut; `agent.thread_context_compacted` lands with the
 * summary (in `session_compactions`, same transaction) and the loop goes on
 * from summary + the events after the cut.
 *
 * The cut: the latest user input (message, system message, outcome) that is
 * not the first thing since the previous cut, so the pending request stays
 * verbatim; failing that (one long tool loop), the latest assistant turn.
 * Never between a tool call and its result.
 *
 * Exactness: everything is derived from the log (and the summary row written
 * with its event), keyed by the conversation position
 * (`compact:<lastContentSeq>`), so a re-run after a crash rebuilds the same
 * request, reuses the span it opened, and records the compaction once. A
 * summary request that fails is recorded (span end with an error plus a
 * `session.error`) and the conversation goes on uncompacted from there.
 */
import type { EventDraft } from "@openma/api";
import { appendToSession, draft, withSession } from "./append.ts";
import { modelIdOf, type SessionContext, serverToolContext } from "./context.ts";
import { buildConversation, loadCompaction } from "./conversation.ts";
import { COMPACTION_KEY_PREFIX, type LogState } from "./log.ts";
import type { ModelFailure, ModelRequest } from "./model.ts";
import { abortOutcome, ENDED, errorDraft, spanEnd, spanUsage } from "./model-step.ts";
import type { TurnOutcome } from "./plan.ts";
import type { ServerToolExecutor } from "./server-tools.ts";
import { buildCatalogue } from "./tools.ts";
import type { TurnRunnerDeps } from "./turn.ts";
import { addModelUsage, usageEventFields } from "./usage.ts";
import { TurnWatch } from "./watch.ts";

export const SUMMARY_INSTRUCTION =
  "This conversation is about to be compacted: everything above will be replaced by your summary of it. " +
  "Write a summary that lets you continue the work without the original: the user's goals and instructions, " +
  "decisions made, facts and results learned (names, paths, commands, values), the state of the task and what remains. " +
  "Answer with the summary only, as plain text, and do not call tools.";

function summaryOf(content: ReadonlyArray<{ type: string; text?: string }>): string {
  return content
    .filter((b) => b.type === "text")
    .map((b) => b.text ?? "")
    .join("\n")
    .trim();
}

function failedCompaction(key: string, startId: string, failure: Pick<ModelFailure, "errorType" | "message">): EventDraft[] {
  const message = `context compaction failed, the conversation goes on uncompacted: ${failure.message}`;
  return [spanEnd(key, 1, startId, true), errorDraft({ ...failure, message, retryable: true }, "retrying", `${key}:error`)];
}

/**
 * Runs the summary turn and records the compaction. Returns the turn's
 * outcome when it ends here, or null to plan the next step (the model call,
 * from the compacted conversation or, after a failure, the full one).
 */
export async function compactStep(
  deps: TurnRunnerDeps,
  ctx: SessionContext,
  state: LogState,
  executors: readonly ServerToolExecutor[],
  cut: number,
  signal: AbortSignal,
): Promise<TurnOutcome | null> {
  const key = `${COMPACTION_KEY_PREFIX}${state.lastContentSeq}`;
  const previous = await loadCompaction(deps.storage, ctx.sessionId, state);
  // The tools are declared as in the agent's own requests: the summarized part may hold tool calls.
  const catalogue = await buildCatalogue(ctx.agent, ctx.envType === "none", executors, serverToolContext(deps, ctx));
  const messages = await buildConversation(deps.storage, state, catalogue.exposed, { compaction: previous, before: cut });
  const instruction = { type: "text" as const, text: SUMMARY_INSTRUCTION };
  const last = messages.at(-1);
  if (last?.role === "user" && Array.isArray(last.content)) last.content.push(instruction);
  else messages.push({ role: "user", content: [instruction] });
  const request: ModelRequest = {
    model: modelIdOf(ctx.agent),
    system: ctx.agent.system ?? null,
    messages,
    tools: catalogue.definitions,
    userId: ctx.sessionId,
  };
  const started = await appendToSession(deps, ctx.sessionId, [draft("span.model_request_start", {}, `${key}:start:1`)]);
  if (started.type !== "ok") return ENDED;
  const startId = (started.value[0] as { id: string }).id;
  const watch = new TurnWatch(deps.storage, ctx.sessionId, state.lastSeq, signal);
  let sent: Awaited<ReturnType<typeof deps.model.send>>;
  try {
    sent = await deps.model.send(request, watch.signal);
  } finally {
    watch.close();
  }
  const record = async (drafts: EventDraft[]) => {
    const r = await appendToSession(deps, ctx.sessionId, drafts);
    return r.type === "terminated" ? ENDED : null;
  };
  if (sent.type === "aborted") {
    const outcome = abortOutcome(watch.reason);
    return outcome === "interrupt" ? record([spanEnd(key, 1, startId, null)]) : outcome;
  }
  if (sent.type === "failure") return record(failedCompaction(key, startId, sent.failure));
  const response = sent.response;
  const summary = summaryOf(response.content);
  if (!summary) return record(failedCompaction(key, startId, { errorType: "unknown_error", message: "the summary was empty" }));
  const usage = await usageEventFields(deps, ctx, state, addModelUsage(state.usage, response.usage));
  const landed = await withSession(
    deps,
    ctx.sessionId,
    async (tx) => {
      const events = await tx.append([
        spanEnd(key, 1, startId, false, spanUsage(response.usage)),
        draft("session.usage", usage, `${key}:usage`),
        draft("agent.thread_context_compacted", {}, `${key}:event`),
      ]);
      const eventId = (events[2] as { id: string }).id;
      await tx.trx
        .insertInto("session_compactions")
        .values({ session_id: ctx.sessionId, event_id: eventId, kept_from_seq: cut, summary })
        .onConflict((oc) => oc.columns(["session_id", "event_id"]).doNothing())
        .execute();
    },
    // A summary that arrives after the user interrupted is dropped, like any response.
    { interruptAfterSeq: state.lastSeq },
  );
  if (landed.type === "terminated") return ENDED;
  if (landed.type === "interrupted") return record([spanEnd(key, 1, startId, null)]);
  return null;
}
