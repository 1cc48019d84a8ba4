/**
 * The default harness ("brain", harness outside the sandbox): a stateless
 * agent loop over the session's event log.
 *
 * `runTurn` repeatedly reads the log, asks the planner for the one next
 * step, and performs it: call the model, settle a tool use, or record that
 * the session is idle. Everything it knows comes from the log, and every
 * event it appends carries a deterministic dedupe key, so a crashed run can
 * simply be run again:
 *
 *  - events already recorded are never recorded twice (same keys);
 *  - at most the one unfinished step is repeated: the model request that was
 *    in flight (its response had not landed) or the tool call whose result
 *    had not landed (tools therefore run at least once, results are
 *    recorded exactly once);
 *  - a response lands atomically (blocks, span end, usage, final idle).
 *
 * The caller (the execution queue) guarantees one runner per session at a
 * time; if two ever overlap, the dedupe keys still keep the log consistent.
 */
import { setImmediate } from "node:timers/promises";
import type { EventDraft, Logger } from "@openma/api";
import type { SandboxResolver } from "@openma/contract";
import type { PriceTable } from "@openma/pricing";
import type { Clock, IdFactory, SecretBox, Storage } from "@openma/storage";
import { actStep } from "./actions.ts";
import { appendToSession, draft, withSession } from "./append.ts";
import { compactStep } from "./compaction.ts";
import type { CompactionPlan } from "./compaction-cut.ts";
import { loadContext, modelIdOf, type SessionContext, serverToolContext } from "./context.ts";
import { type ContextWindowTable, compactionThreshold, DEFAULT_CONTEXT_WINDOWS } from "./context-window.ts";
import { loadCompaction } from "./conversation.ts";
import { type LoggedEvent, type LogState, readNewEvents, scanLog } from "./log.ts";
import type { ModelPort } from "./model.ts";
import { modelStep } from "./model-step.ts";
import { evaluateStep } from "./outcome-step.ts";
import { planStep, type Step, type TurnOutcome } from "./plan.ts";
import { credentialHostErrors } from "./server-tools/vault-credentials.ts";
import type { ServerToolContext, ServerToolExecutor, SessionToolSet } from "./server-tools.ts";
import { childThreads, type Scope, type ThreadToolDeps, threadToolExecutor } from "./threads.ts";
import { type BudgetState, budgetState } from "./usage.ts";

export type { TurnOutcome } from "./plan.ts";

export interface TurnRunnerDeps {
  storage: Storage;
  clock: Clock;
  ids: IdFactory;
  logger: Logger;
  model: ModelPort;
  sandboxes: SandboxResolver;
  /** Executors shared by every session (web_fetch). */
  serverTools: ServerToolExecutor[];
  /**
   * Optional: executors that belong to one run of one session (e.g.
   * `createMcpExecutors(ctx.agent)`), made on the run's first step and
   * closed when it returns.
   */
  sessionTools?: (ctx: ServerToolContext) => SessionToolSet;
  /** The server's vault key, handed to server tools that use vault credentials. */
  secrets?: SecretBox | undefined;
  /** List prices for `list_cost` and budgets (default: `@openma/pricing`'s public list prices). */
  prices?: PriceTable | undefined;
  /** Context windows by model, for compaction (default: `DEFAULT_CONTEXT_WINDOWS`; operators: `OPENMA_CONTEXT_WINDOWS`). */
  contextWindows?: ContextWindowTable | undefined;
  /** Most threads a multi-agent session may start besides its primary one (default `DEFAULT_MAX_THREADS`). */
  maxThreads?: number | undefined;
  /** Set by `runTurn` for the run of one thread (threads.ts); absent: the primary thread. */
  scope?: Scope;
}

/** Threads a session may start besides its primary one, unless the operator says otherwise. */
export const DEFAULT_MAX_THREADS = 20;

/** A guard against a planner bug looping forever; a real turn never gets near it. */
const MAX_STEPS = 10_000;

function plan(
  state: LogState,
  ctx: SessionContext,
  executors: readonly ServerToolExecutor[],
  budget?: BudgetState,
  compaction?: CompactionPlan,
): Step {
  return planStep(state, { envType: ctx.envType, archived: ctx.archived, agent: ctx.agent, executors, budget, compaction });
}

/** The compaction settings for this step; the previous cut is read only when the conversation is big enough to matter. */
async function compactionPlan(deps: TurnRunnerDeps, ctx: SessionContext, state: LogState): Promise<CompactionPlan> {
  const threshold = compactionThreshold(deps.contextWindows ?? DEFAULT_CONTEXT_WINDOWS, modelIdOf(ctx.agent));
  if (state.contextTokens < threshold) return { threshold, keptFrom: 0 };
  return { threshold, keptFrom: (await loadCompaction(deps.storage, ctx.sessionId, state))?.keptFromSeq ?? 0 };
}

/** Why a budget on an unpriced model stops the turn (once per stop, with the idle). */
function unpricedBudgetError(ctx: SessionContext, key: string): EventDraft {
  const message = `this session has a budget, but no list price is known for model ${JSON.stringify(modelIdOf(ctx.agent))}, so its cost cannot be tracked; the operator can add the model to the price table (OPENMA_PRICE_TABLE), or the budget can be removed`;
  return draft("session.error", { error: { type: "unknown_error", message, retry_status: { type: "exhausted" } } }, `${key}:error`);
}

/** `session.status_running` before the turn does work, unless the log already says running (then none). */
function runningDraft(state: LogState): EventDraft[] {
  if (state.lastStatus?.status === "running") return [];
  return [draft("session.status_running", {}, `running:${state.lastStatus?.seq ?? 0}`)];
}

/** Appends `session.status_running` unless the log already says running. False when the session ended. */
async function running(deps: TurnRunnerDeps, sessionId: string, state: LogState): Promise<boolean> {
  const drafts = runningDraft(state);
  if (drafts.length === 0) return true;
  const r = await appendToSession(deps, sessionId, drafts);
  return r.type === "ok";
}

/**
 * Lets pending I/O run before the next step. A step's statements on SQLite
 * complete synchronously, so a run of steps is one unbroken chain of
 * microtasks: without this, the socket writes and reads of what a step just
 * landed (SSE frames to clients, responses) wait for the whole turn to reach
 * its next real I/O. Two check phases are needed to bracket one poll phase.
 */
async function yieldToIo(): Promise<void> {
  await setImmediate();
  await setImmediate();
}

/**
 * Runs the session until it needs input from outside (user, self-hosted
 * worker, confirmation) or ends. Stateless: rebuilds everything from the
 * event log, so a crashed run can simply be run again. A multi-agent
 * session's threads run here one after the other (primary first), inside the
 * same execution claim, until none has unanswered input.
 */
export async function runTurn(deps: TurnRunnerDeps, sessionId: string, signal: AbortSignal): Promise<TurnOutcome> {
  // The primary thread's outcome is the session's: a thread's run only ends the call early when it fails.
  let primary = await runScope(deps, sessionId, signal, null);
  for (let round = 0; round < MAX_STEPS; round++) {
    if (signal.aborted || primary.type === "failed" || primary.type === "interrupted") return primary;
    const scope = await nextScope(deps.storage, sessionId);
    if (scope === undefined) return primary;
    const outcome = await runScope(deps, sessionId, signal, scope);
    if (scope === null) primary = outcome;
    else if (outcome.type === "failed" || outcome.type === "interrupted") return outcome;
  }
  return { type: "failed", error: `session ${sessionId} kept its threads busy for ${MAX_STEPS} rounds` };
}

/** The first thread (primary first, then by creation) with work to do; undefined when none has. */
async function nextScope(storage: Storage, sessionId: string): Promise<Scope | undefined> {
  if (await scopeNeedsTurn(storage, sessionId, null)) return null;
  for (const thread of await childThreads(storage, sessionId)) if (await scopeNeedsTurn(storage, sessionId, thread)) return thread;
  return undefined;
}

async function runScope(deps: TurnRunnerDeps, sessionId: string, signal: AbortSignal, scope: Scope): Promise<TurnOutcome> {
  const scoped: TurnRunnerDeps = { ...deps, scope };
  const held: { set: SessionToolSet | null } = { set: null };
  const threadTool = scope ? null : threadToolExecutor(threadToolDeps(scoped));
  try {
    return await runSteps(scoped, sessionId, signal, (ctx) => {
      if (deps.sessionTools) held.set ??= deps.sessionTools(serverToolContext(deps, ctx));
      const base = held.set ? [...deps.serverTools, ...held.set.executors] : deps.serverTools;
      return threadTool ? [...base, threadTool] : base;
    });
  } catch (err) {
    if (signal.aborted) return { type: "interrupted" };
    const error = err instanceof Error ? err.message : String(err);
    deps.logger.error({ session_id: sessionId, session_thread_id: scope?.id, err: error }, "turn failed");
    return { type: "failed", error };
  } finally {
    await held.set
      ?.close()
      .catch((err: Error) => deps.logger.warn({ session_id: sessionId, err: err.message }, "closing session tools failed"));
  }
}

function threadToolDeps(deps: TurnRunnerDeps): ThreadToolDeps {
  return {
    storage: deps.storage,
    clock: deps.clock,
    ids: deps.ids,
    maxThreads: deps.maxThreads ?? DEFAULT_MAX_THREADS,
    async append(sessionId, fn) {
      const r = await withSession(deps, sessionId, (tx) =>
        fn(tx.trx, async (drafts) => {
          await tx.append(drafts);
        }),
      );
      return r.type === "ok" ? r.value : null;
    },
  };
}

/**
 * §5.5 `credential_host_unreachable_error` for each vault credential whose
 * hosts the environment's networking forbids: checked once per run, before
 * its first model request. The session goes on without that credential's
 * reach (no credential is marked required in this API), so the error says
 * `retrying` like the other non-fatal configuration errors (the SDK
 * documents `terminal` as "the session will be terminated"). Keyed on the
 * turn (the last idle before it), so a re-run after a crash records nothing
 * twice while every later turn is told again.
 */
async function credentialHostDrafts(deps: TurnRunnerDeps, ctx: SessionContext, state: LogState): Promise<EventDraft[]> {
  if (ctx.vaultIds.length === 0) return [];
  let errors: Awaited<ReturnType<typeof credentialHostErrors>>;
  try {
    errors = await credentialHostErrors({
      storage: deps.storage,
      vaultIds: ctx.vaultIds,
      environment: ctx.environment,
      secrets: deps.secrets,
    });
  } catch (err) {
    // A check that cannot run must not block the turn; the executors still refuse what the credentials do not cover.
    deps.logger.warn({ session_id: ctx.sessionId, err: (err as Error).message }, "credential host check failed");
    return [];
  }
  return errors.map((error) =>
    draft(
      "session.error",
      { error: { ...error, retry_status: { type: "retrying" } } },
      `credential_hosts:${state.lastIdleSeq}:${error.credential_id}`,
    ),
  );
}

const TERMINATED = (sessionId: string): TurnOutcome => ({ type: "failed", error: `session ${sessionId} is terminated` });

async function runSteps(
  deps: TurnRunnerDeps,
  sessionId: string,
  signal: AbortSignal,
  executorsFor: (ctx: SessionContext) => readonly ServerToolExecutor[],
): Promise<TurnOutcome> {
  const events: LoggedEvent[] = [];
  const scope = deps.scope ?? null;
  // Credential hosts are a session matter: the primary thread reports them.
  let hostsChecked = scope !== null;
  for (let step = 0; step < MAX_STEPS; step++) {
    if (step > 0) await yieldToIo();
    if (signal.aborted) return { type: "interrupted" };
    const ctx = await loadContext(deps.storage, sessionId, scope);
    if (!ctx) return { type: "failed", error: `session ${sessionId} was not found` };
    await readNewEvents(deps.storage, sessionId, events, scope);
    const state = scanLog(events);
    const executors = executorsFor(ctx);
    const budget = await budgetState(deps, ctx, state);
    const next = plan(state, ctx, executors, budget, await compactionPlan(deps, ctx, state));
    let outcome: TurnOutcome | null = null;
    switch (next.kind) {
      case "terminated":
        return TERMINATED(sessionId);
      case "settled":
        return next.outcome;
      case "idle": {
        const stop = draft("session.status_idle", { stop_reason: next.stopReason, stop_details: null }, next.dedupeKey);
        const drafts =
          next.stopReason.type === "budget_reached" && budget === "unpriced" ? [unpricedBudgetError(ctx, next.dedupeKey), stop] : [stop];
        const r = await appendToSession(deps, sessionId, drafts);
        return r.type === "terminated" ? TERMINATED(sessionId) : next.outcome;
      }
      case "act":
        if (!(await running(deps, sessionId, state))) return TERMINATED(sessionId);
        outcome = await actStep(deps, ctx, state, next.toolUse, next.action, signal);
        break;
      case "evaluate":
        if (!(await running(deps, sessionId, state))) return TERMINATED(sessionId);
        outcome = await evaluateStep(deps, ctx, state, next.evaluation, signal);
        break;
      case "compact":
        if (!(await running(deps, sessionId, state))) return TERMINATED(sessionId);
        outcome = await compactStep(deps, ctx, state, executors, next.cut, signal);
        break;
      case "call_model": {
        // The running status (and any credential host errors) land with the request's first append
        // (its span start): one transaction less before every model request that starts a turn.
        const lead = [...runningDraft(state), ...(hostsChecked ? [] : await credentialHostDrafts(deps, ctx, state))];
        hostsChecked = true;
        outcome = await modelStep(deps, ctx, state, executors, signal, lead);
        break;
      }
    }
    if (outcome) return outcome;
  }
  return { type: "failed", error: `turn of session ${sessionId} exceeded ${MAX_STEPS} steps` };
}

/** True when the session's log has input the agent (or one of its threads) has not answered yet (used by the execution queue to decide whether a session needs a turn). */
export async function needsTurn(storage: Storage, sessionId: string): Promise<boolean> {
  return (await nextScope(storage, sessionId)) !== undefined;
}

async function scopeNeedsTurn(storage: Storage, sessionId: string, scope: Scope): Promise<boolean> {
  const ctx = await loadContext(storage, sessionId, scope);
  if (!ctx) return false;
  const events: LoggedEvent[] = [];
  await readNewEvents(storage, sessionId, events, scope);
  // Executors only decide *how* a tool use is settled, not *whether* there is work, so none are needed here.
  const next = plan(scanLog(events), ctx, []);
  return next.kind === "act" || next.kind === "call_model" || next.kind === "compact" || next.kind === "idle" || next.kind === "evaluate";
}
