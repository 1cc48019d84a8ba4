/**
 * One model request of a turn, with its retries, and the events it records.
 *
 * Idempotency: every event carries a dedupe key derived from `key`, the log
 * position the request was built from (`model:<seq of the last conversation
 * event>`), plus the attempt number, which is itself recounted from the log
 * (failed `span.model_request_end` events since that position). A re-run
 * after a crash therefore rebuilds the same request, reuses the span it had
 * opened, and appends nothing twice. The response (its blocks, the span end,
 * the usage snapshot and, when the turn ends there, the final idle) lands in
 * one transaction: either all of it or none. At most the one request that
 * was in flight when the process died is sent again.
 */
import type { ContentBlock } from "@anthropic-ai/sdk/resources/messages";
import type { EventDraft } from "@openma/api";
import { appendToSession, draft, type SessionGuard, withSession } from "./append.ts";
import { modelIdOf, type SessionContext, serverToolContext } from "./context.ts";
import { buildConversation, loadCompaction } from "./conversation.ts";
import { failedAttemptsSince, type LogState } from "./log.ts";
import type { ModelAttempt, ModelFailure, ModelRequest, ModelResponse, ModelUsage } from "./model.ts";
import { outcomePending, SANDBOX_FREE_REFUSAL, type TurnOutcome } from "./plan.ts";
import { PreviewPublisher } from "./previews.ts";
import { isDescribedError, type ServerToolExecutor } from "./server-tools.ts";
import { buildCatalogue, isMcpExecutor, isSandboxTool, type ToolCatalogue } from "./tools.ts";
import type { TurnRunnerDeps } from "./turn.ts";
import { addModelUsage, usageEventFields } from "./usage.ts";
import { TurnWatch, type WatchReason } from "./watch.ts";

export const ENDED: TurnOutcome = { type: "failed", error: "the session was terminated during the turn" };
const ZERO_USAGE = { input_tokens: 0, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };

export function spanEnd(key: string, attempt: number, startId: string, isError: boolean | null, usage = ZERO_USAGE): EventDraft {
  return draft(
    "span.model_request_end",
    { model_request_start_id: startId, is_error: isError, model_usage: usage },
    `${key}:end:${attempt}`,
  );
}

/** A response's token counts in the span's `model_usage` shape. */
export function spanUsage(u: ModelUsage): typeof ZERO_USAGE {
  return {
    input_tokens: u.input_tokens,
    output_tokens: u.output_tokens,
    cache_creation_input_tokens: u.cache_creation_input_tokens,
    cache_read_input_tokens: u.cache_read_input_tokens,
  };
}

export function errorDraft(failure: ModelFailure, retryStatus: "retrying" | "exhausted", key: string): EventDraft {
  return draft("session.error", { error: { type: failure.errorType, message: failure.message, retry_status: { type: retryStatus } } }, key);
}

interface ResponsePlan {
  drafts: EventDraft[];
  /** Tool uses refused on the spot (index into `drafts`, error text). */
  refusals: Array<{ index: number; message: string }>;
  outcome: TurnOutcome | null;
}

function toolUseDraft(block: Extract<ContentBlock, { type: "tool_use" }>, catalogue: ToolCatalogue, sandboxFree: boolean, key: string) {
  const input = block.input && typeof block.input === "object" ? block.input : {};
  const route = catalogue.routes.get(block.name);
  if (!route) {
    const refusal =
      sandboxFree && isSandboxTool(block.name)
        ? SANDBOX_FREE_REFUSAL
        : `tool ${JSON.stringify(block.name)} is not available in this session`;
    // Refused before any policy applied: `deny` and no `evaluation` (the SDK's documented shape).
    return { draft: draft("agent.tool_use", { name: block.name, input, evaluated_permission: "deny" }, key), refusal };
  }
  if (route.type === "custom") return { draft: draft("agent.custom_tool_use", { name: block.name, input }, key), refusal: null };
  const permission = { evaluated_permission: route.permission.evaluated_permission, evaluation: route.permission.evaluation };
  const name = route.type === "server" ? route.toolName : block.name;
  if (route.type === "server" && route.mcpServerName) {
    return { draft: draft("agent.mcp_tool_use", { name, input, mcp_server_name: route.mcpServerName, ...permission }, key), refusal: null };
  }
  return { draft: draft("agent.tool_use", { name, input, ...permission }, key), refusal: null };
}

function planResponse(
  key: string,
  attempt: number,
  startId: string,
  response: ModelResponse,
  catalogue: ToolCatalogue,
  sandboxFree: boolean,
  usageFields: Record<string, unknown>,
  previewed: (index: number) => string | undefined,
  evaluating: boolean,
): ResponsePlan {
  const drafts: EventDraft[] = [];
  const refusals: ResponsePlan["refusals"] = [];
  let toolUses = 0;
  response.content.forEach((block, i) => {
    const blockKey = `${key}:block:${i}`;
    // A block previewed on the stream lands under the id its `event_start` announced.
    const id = previewed(i);
    const withId = (d: EventDraft): EventDraft => (id ? { ...d, id } : d);
    if (block.type === "thinking" || block.type === "redacted_thinking") drafts.push(withId(draft("agent.thinking", {}, blockKey)));
    else if (block.type === "text" && block.text !== "") {
      drafts.push(withId(draft("agent.message", { content: [{ type: "text", text: block.text }] }, blockKey)));
    } else if (block.type === "tool_use") {
      toolUses++;
      const made = toolUseDraft(block, catalogue, sandboxFree, blockKey);
      if (made.refusal) refusals.push({ index: drafts.length, message: made.refusal });
      drafts.push(made.draft);
    }
  });
  drafts.push(spanEnd(key, attempt, startId, false, spanUsage(response.usage)));
  drafts.push(draft("session.usage", usageFields, `${key}:usage`));
  // With an outcome pending, the turn goes on to its evaluation instead of idling.
  if (toolUses > 0 || evaluating) return { drafts, refusals, outcome: null };
  const refused = response.stopReason === "refusal";
  drafts.push(
    draft(
      "session.status_idle",
      {
        stop_reason: { type: refused ? "refusal" : "end_turn" },
        stop_details: refused ? { type: "refusal", category: null, explanation: null } : null,
      },
      `${key}:idle`,
    ),
  );
  return { drafts, refusals, outcome: { type: "idle", stopReason: refused ? "refusal" : "end_turn" } };
}

/** What an aborted wait means: the caller stopped us (resume later), the user interrupted (replan), or the session ended. */
export function abortOutcome(reason: WatchReason | null): TurnOutcome | "interrupt" {
  if (reason === "interrupt") return "interrupt";
  if (reason === "terminated") return ENDED;
  return { type: "interrupted" };
}

/** The `session.error` of each executor whose tools could not be listed. */
function toolListingErrors(key: string, catalogue: ToolCatalogue): EventDraft[] {
  return catalogue.failures.map(({ executor, mcp, error }) => {
    const message = `could not list the tools of ${mcp ? "MCP server " : ""}${JSON.stringify(executor.id)}: ${errorMessage(error)}`;
    // Listing is tried again on the next model request, hence "retrying".
    const described = isDescribedError(error)
      ? error.toSessionError("retrying")
      : mcp
        ? { type: "mcp_connection_failed_error", mcp_server_name: executor.id, message, retry_status: { type: "retrying" } }
        : { type: "unknown_error", message, retry_status: { type: "retrying" } };
    return draft("session.error", { error: described }, `${key}:tools:${executor.id}`);
  });
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** One model request being worked on: everything its attempts share. */
interface Requested {
  deps: TurnRunnerDeps;
  ctx: SessionContext;
  state: LogState;
  key: string;
  request: ModelRequest;
  catalogue: ToolCatalogue;
  signal: AbortSignal;
  /** Drafts still to land before the first attempt's span start, in the same transaction (taken by it). */
  lead: EventDraft[];
}

/** "retry": the attempt failed transiently and the back-off is over. */
type AttemptOutcome = TurnOutcome | null | "retry";

/**
 * Runs the model request the log calls for. Returns the turn's outcome when
 * the turn ends here, or null when the caller should plan the next step.
 * `lead` (the turn's `session.status_running`, say) lands first, in the
 * transaction of the request's first event: one commit less before the request.
 */
export async function modelStep(
  deps: TurnRunnerDeps,
  ctx: SessionContext,
  state: LogState,
  executors: readonly ServerToolExecutor[],
  signal: AbortSignal,
  lead: readonly EventDraft[] = [],
): Promise<TurnOutcome | null> {
  const key = `model:${state.lastContentSeq}`;
  let held = lead;
  // Listing an MCP server's tools goes over the network: the running status is not held back behind it.
  if (held.length > 0 && executors.some((e) => isMcpExecutor(ctx.agent, e))) {
    if ((await appendToSession(deps, ctx.sessionId, held)).type !== "ok") return ENDED;
    held = [];
  }
  const catalogue = await buildCatalogue(ctx.agent, ctx.envType === "none", executors, serverToolContext(deps, ctx));
  const request: ModelRequest = {
    model: modelIdOf(ctx.agent),
    system: ctx.agent.system ?? null,
    messages: await buildConversation(deps.storage, state, catalogue.exposed, {
      compaction: await loadCompaction(deps.storage, ctx.sessionId, state),
    }),
    tools: catalogue.definitions,
    userId: ctx.sessionId,
  };
  // Listing failures are told before the request (its error events carry no span): with the lead, in order.
  const leading = [...held, ...toolListingErrors(key, catalogue)];
  const rq: Requested = { deps, ctx, state, key, request, catalogue, signal, lead: leading };
  for (let attempt = failedAttemptsSince(state, state.lastContentSeq) + 1; ; attempt++) {
    const outcome = await runAttempt(rq, attempt);
    if (outcome !== "retry") return outcome;
  }
}

async function runAttempt(rq: Requested, attempt: number): Promise<AttemptOutcome> {
  const { deps, ctx, key } = rq;
  const lead = rq.lead.splice(0);
  const started = await appendToSession(deps, ctx.sessionId, [...lead, draft("span.model_request_start", {}, `${key}:start:${attempt}`)]);
  if (started.type !== "ok") return ENDED;
  const startId = (started.value.at(-1) as { id: string }).id;
  const watch = new TurnWatch(deps.storage, ctx.sessionId, rq.state.lastSeq, rq.signal);
  const previews = new PreviewPublisher(deps.storage.bus, ctx.sessionId, () => deps.ids("sevt"), deps.scope?.id ?? null);
  let result: ModelAttempt;
  try {
    result = await deps.model.send(rq.request, watch.signal, previews);
  } finally {
    watch.close();
  }
  // Every preview frame goes out before the events that conclude them.
  await previews.flush();
  if (result.type === "response") return recordResponse(rq, attempt, startId, result.response, (i) => previews.idFor(i));
  if (result.type === "failure") return recordFailure(rq, attempt, startId, result.failure);
  const outcome = abortOutcome(watch.reason);
  if (outcome !== "interrupt") return outcome;
  await appendToSession(deps, ctx.sessionId, [spanEnd(key, attempt, startId, null)]);
  return null;
}

async function recordResponse(
  rq: Requested,
  attempt: number,
  startId: string,
  response: ModelResponse,
  previewed: (index: number) => string | undefined,
): Promise<TurnOutcome | null> {
  const { deps, ctx, key } = rq;
  const usageFields = await usageEventFields(deps, ctx, rq.state, addModelUsage(rq.state.usage, response.usage));
  const refused = response.stopReason === "refusal";
  const evaluating = !refused && outcomePending(rq.state);
  const plan = planResponse(key, attempt, startId, response, rq.catalogue, ctx.envType === "none", usageFields, previewed, evaluating);
  const guard: SessionGuard = {
    // A response that arrives after the user interrupted is dropped.
    interruptAfterSeq: rq.state.lastSeq,
    // A response that would end the turn answers only what its request held. A user.message that
    // landed meanwhile would be closed unseen by the final idle: drop the response instead (as after
    // an interrupt) and plan again, so the next request holds both messages.
    ...(plan.outcome?.type === "idle" ? { messageAfter: { seq: rq.state.lastSeq, threadId: deps.scope?.id ?? null } } : {}),
  };
  const landed =
    plan.refusals.length === 0
      ? await appendToSession(deps, ctx.sessionId, plan.drafts, guard)
      : await withSession(
          deps,
          ctx.sessionId,
          async (tx) => {
            const events = await tx.append(plan.drafts);
            const refusals = plan.refusals.map(({ index, message }) => {
              const id = (events[index] as { id: string }).id;
              return draft(
                "agent.tool_result",
                { tool_use_id: id, content: [{ type: "text", text: message }], is_error: true },
                `result:${id}`,
              );
            });
            await tx.append(refusals);
          },
          guard,
        );
  if (landed.type === "terminated") return ENDED;
  if (landed.type === "interrupted" || landed.type === "superseded") {
    await appendToSession(deps, ctx.sessionId, [spanEnd(key, attempt, startId, null)]);
    return null;
  }
  return plan.outcome;
}

async function recordFailure(rq: Requested, attempt: number, startId: string, failure: ModelFailure): Promise<AttemptOutcome> {
  const { deps, ctx, key } = rq;
  const { retry } = deps.model;
  if (!failure.retryable || attempt > retry.maxRetries) {
    await appendToSession(deps, ctx.sessionId, [
      spanEnd(key, attempt, startId, true),
      errorDraft(failure, "exhausted", `${key}:error:${attempt}`),
      draft("session.status_idle", { stop_reason: { type: "retries_exhausted" }, stop_details: null }, `${key}:idle`),
    ]);
    deps.logger.warn({ session_id: ctx.sessionId, error_type: failure.errorType, attempts: attempt }, "model request failed; turn ended");
    return { type: "idle", stopReason: "retries_exhausted" };
  }
  const waiting = await appendToSession(deps, ctx.sessionId, [
    spanEnd(key, attempt, startId, true),
    errorDraft(failure, "retrying", `${key}:error:${attempt}`),
    draft("session.status_rescheduled", {}, `${key}:rescheduled:${attempt}`),
  ]);
  if (waiting.type !== "ok") return ENDED;
  const backoff = new TurnWatch(deps.storage, ctx.sessionId, rq.state.lastSeq, rq.signal);
  try {
    await retry.sleep(retry.delayMs(attempt, failure), backoff.signal);
  } catch {
    const outcome = abortOutcome(backoff.reason);
    return outcome === "interrupt" ? null : outcome;
  } finally {
    backoff.close();
  }
  const resumed = await appendToSession(deps, ctx.sessionId, [draft("session.status_running", {}, `${key}:running:${attempt + 1}`)]);
  return resumed.type === "ok" ? "retry" : ENDED;
}
