/**
 * One outcome evaluation: `span.outcome_evaluation_start`, a grader request
 * to the session's model (no tools, a JSON verdict), then
 * `span.outcome_evaluation_end` with the verdict, its explanation and the
 * grader's usage (also added to the session's usage).
 *
 * Verdicts: `satisfied` and `failed` (the grader's own) end the outcome;
 * `needs_revision` sends the agent back to work, unless this was the last
 * allowed iteration, which makes it `max_iterations_reached` (one final
 * acknowledgment turn follows); an interrupt while grading ends it
 * `interrupted`. A grader answer that cannot be read, or a grader request
 * that fails, is `failed` with the reason as explanation.
 *
 * Idempotency: start and end carry keys derived from the outcome id and the
 * iteration, so a re-run after a crash reuses the open start and records one
 * end.
 */
import type { EventDraft } from "@openma/api";
import { appendToSession, draft } from "./append.ts";
import { modelIdOf, type SessionContext } from "./context.ts";
import type { LogState } from "./log.ts";
import type { ModelAttempt, ModelUsage } from "./model.ts";
import { rubricText } from "./outcome.ts";
import type { Evaluation, TurnOutcome } from "./plan.ts";
import type { TurnRunnerDeps } from "./turn.ts";
import { addModelUsage, usageEventFields } from "./usage.ts";
import { TurnWatch } from "./watch.ts";

const GRADER_SYSTEM = `You are the outcome grader of an agent session. Judge the agent's work against the outcome and its rubric.
Answer with one JSON object and nothing else: {"result": "satisfied" | "needs_revision" | "failed", "explanation": "<why>"}.
Use "failed" only when the rubric cannot apply to what was produced.`;

const ZERO: ModelUsage = {
  input_tokens: 0,
  output_tokens: 0,
  cache_creation_input_tokens: 0,
  cache_read_input_tokens: 0,
  cache_creation_5m: 0,
  cache_creation_1h: 0,
};

interface Verdict {
  result: "satisfied" | "needs_revision" | "failed" | "max_iterations_reached" | "interrupted";
  explanation: string;
  usage: ModelUsage;
}

/** What the agent said since the outcome was defined: the deliverable the grader reads. */
function deliverable(state: LogState, since: number): string {
  const parts: string[] = [];
  for (const e of state.events) {
    if (e.seq <= since || e.type !== "agent.message" || !Array.isArray(e.body.content)) continue;
    for (const block of e.body.content as Array<{ type?: string; text?: string }>)
      if (block.type === "text" && block.text) parts.push(block.text);
  }
  return parts.join("\n\n") || "(the agent said nothing)";
}

function readVerdict(attempt: ModelAttempt): Omit<Verdict, "usage"> {
  if (attempt.type === "failure") return { result: "failed", explanation: `the grader request failed: ${attempt.failure.message}` };
  if (attempt.type !== "response") return { result: "interrupted", explanation: "the evaluation was interrupted" };
  const text = attempt.response.content.flatMap((b) => (b.type === "text" ? [b.text] : [])).join("");
  const json = text.slice(text.indexOf("{"), text.lastIndexOf("}") + 1);
  try {
    const parsed = JSON.parse(json) as { result?: unknown; explanation?: unknown };
    const explanation = typeof parsed.explanation === "string" ? parsed.explanation : "";
    if (parsed.result === "satisfied" || parsed.result === "needs_revision" || parsed.result === "failed") {
      return { result: parsed.result, explanation };
    }
  } catch {
    // fall through: an unreadable verdict
  }
  return { result: "failed", explanation: `the grader's answer could not be read as a verdict: ${text.slice(0, 500)}` };
}

async function grade(deps: TurnRunnerDeps, ctx: SessionContext, state: LogState, ev: Evaluation, signal: AbortSignal): Promise<Verdict> {
  if (ev.interrupted) return { result: "interrupted", explanation: "the user interrupted the evaluation", usage: ZERO };
  const o = ev.outcome;
  const rubric = await rubricText(deps.storage, o.rubric);
  const watch = new TurnWatch(deps.storage, ctx.sessionId, state.lastSeq, signal);
  let attempt: ModelAttempt;
  try {
    attempt = await deps.model.send(
      {
        model: modelIdOf(ctx.agent),
        system: GRADER_SYSTEM,
        messages: [
          {
            role: "user",
            content: `Outcome: ${o.description}\n\nRubric:\n${rubric}\n\nThe agent's work:\n${deliverable(state, o.seq)}`,
          },
        ],
        tools: [],
        userId: ctx.sessionId,
      },
      watch.signal,
    );
  } finally {
    watch.close();
  }
  if (attempt.type === "aborted" && watch.reason !== "interrupt") throw new Error("evaluation stopped");
  const verdict = readVerdict(attempt);
  const usage = attempt.type === "response" ? attempt.response.usage : ZERO;
  const last = ev.iteration + 1 >= o.maxIterations;
  return { ...verdict, result: verdict.result === "needs_revision" && last ? "max_iterations_reached" : verdict.result, usage };
}

/** Runs the evaluation the planner called for. Returns the turn's outcome when it ends here, or null to plan on. */
export async function evaluateStep(
  deps: TurnRunnerDeps,
  ctx: SessionContext,
  state: LogState,
  ev: Evaluation,
  signal: AbortSignal,
): Promise<TurnOutcome | null> {
  const key = `outcome:${ev.outcome.outcomeId}:${ev.iteration}`;
  let startId = ev.startId;
  if (!startId) {
    const started = await appendToSession(deps, ctx.sessionId, [
      draft("span.outcome_evaluation_start", { outcome_id: ev.outcome.outcomeId, iteration: ev.iteration }, `${key}:start`),
    ]);
    if (started.type !== "ok") return { type: "failed", error: "the session was terminated during the turn" };
    startId = (started.value[0] as { id: string }).id;
  }
  let verdict: Verdict;
  try {
    verdict = await grade(deps, ctx, state, ev, signal);
  } catch {
    // The caller stopped us (lease lost, shutdown): a later run grades again under the same start.
    return { type: "interrupted" };
  }
  const u = verdict.usage;
  const drafts: EventDraft[] = [
    draft(
      "span.outcome_evaluation_end",
      {
        outcome_id: ev.outcome.outcomeId,
        outcome_evaluation_start_id: startId,
        iteration: ev.iteration,
        result: verdict.result,
        explanation: verdict.explanation,
        usage: {
          input_tokens: u.input_tokens,
          output_tokens: u.output_tokens,
          cache_creation_input_tokens: u.cache_creation_input_tokens,
          cache_read_input_tokens: u.cache_read_input_tokens,
        },
      },
      `${key}:end`,
    ),
  ];
  if (verdict.usage !== ZERO)
    drafts.push(draft("session.usage", await usageEventFields(deps, ctx, state, addModelUsage(state.usage, u)), `${key}:usage`));
  const landed = await appendToSession(deps, ctx.sessionId, drafts);
  return landed.type === "ok" ? null : { type: "failed", error: "the session was terminated during the turn" };
}
