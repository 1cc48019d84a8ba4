/**
 * The session's cumulative usage as the loop records it (`session.usage`):
 * tokens with their cache breakdown, server-tool request counters, the list
 * cost priced by `@openma/pricing`, and the running time measured by the
 * server's clock. Each snapshot is the previous one (folded from the log)
 * plus what just happened, so a re-run after a crash rebuilds the same
 * numbers and the snapshot's dedupe key keeps it recorded once.
 *
 * In a multi-agent session each thread's share of the usage (folded from the
 * log, log.ts) is priced on its own agent's model, and the list cost is their
 * exact sum rounded up to the cent once.
 *
 * Budgets: the planner stops the turn before a model call once the list cost
 * of the usage so far has reached the session's `max_list_cost`
 * (`budgetState`). A budget on a model the price table does not know (any
 * thread's) cannot be tracked, so it fails closed.
 */
import { activeMs, loadActivity, seconds } from "@openma/api";
import {
  addUsageDelta,
  billableUsageOf,
  buildPriceTable,
  type MonetaryAmount,
  mixedListCost,
  type PriceTable,
  reached,
} from "@openma/pricing";
import type { Clock, Storage } from "@openma/storage";
import { modelIdOf, type SessionContext } from "./context.ts";
import type { CumulativeUsage, LogState } from "./log.ts";
import type { ModelUsage } from "./model.ts";
import type { SessionAgentView } from "./tools.ts";

export type ServerToolCounter = keyof CumulativeUsage["server_tool_use"];

/** The list prices a runner uses when its deps name none. */
export const DEFAULT_PRICE_TABLE: PriceTable = buildPriceTable();

export function addModelUsage(prev: CumulativeUsage, u: ModelUsage): CumulativeUsage {
  return {
    ...prev,
    input_tokens: prev.input_tokens + u.input_tokens,
    output_tokens: prev.output_tokens + u.output_tokens,
    cache_read_input_tokens: prev.cache_read_input_tokens + u.cache_read_input_tokens,
    cache_creation: {
      ephemeral_5m_input_tokens: prev.cache_creation.ephemeral_5m_input_tokens + u.cache_creation_5m,
      ephemeral_1h_input_tokens: prev.cache_creation.ephemeral_1h_input_tokens + u.cache_creation_1h,
    },
  };
}

export function addServerToolUse(prev: CumulativeUsage, counter: ServerToolCounter): CumulativeUsage {
  return { ...prev, server_tool_use: { ...prev.server_tool_use, [counter]: prev.server_tool_use[counter] + 1 } };
}

export interface UsageDeps {
  storage: Storage;
  clock: Clock;
  prices?: PriceTable | undefined;
}

/**
 * The list cost of the session's usage `total`, each thread's share priced on
 * its own agent's model: the other threads' shares as folded from the log,
 * the running thread's what they leave of `total` (its share so far plus
 * what it just used). Null when any of those models is unpriced.
 */
async function sessionListCost(
  deps: UsageDeps,
  ctx: SessionContext,
  shares: ReadonlyMap<string | null, CumulativeUsage>,
  total: CumulativeUsage,
): Promise<MonetaryAmount | null> {
  const mine = billableUsageOf(total);
  const parts: Array<{ modelId: string; usage: CumulativeUsage }> = [{ modelId: modelIdOf(ctx.agent), usage: mine }];
  const others = [...shares].filter(([thread]) => thread !== ctx.threadId);
  // A single-thread session (the usual case) needs no look-up.
  const models = others.length ? await threadModels(deps.storage, ctx.sessionId) : new Map<string | null, string>();
  for (const [thread, usage] of others) {
    addUsageDelta(mine, billableUsageOf(undefined), usage);
    parts.push({ modelId: models.get(thread) ?? "", usage });
  }
  return mixedListCost(deps.prices ?? DEFAULT_PRICE_TABLE, parts);
}

/** The model of every thread of a session (null: the primary thread, on the session's agent). */
async function threadModels(storage: Storage, sessionId: string): Promise<Map<string | null, string>> {
  const models = new Map<string | null, string>();
  const session = await storage.db.selectFrom("sessions").select("body").where("id", "=", sessionId).executeTakeFirst();
  if (session) models.set(null, modelIdOf((JSON.parse(session.body) as { agent?: SessionAgentView }).agent ?? {}));
  const threads = await storage.db
    .selectFrom("session_threads")
    .select(["id", "body"])
    .where("session_id", "=", sessionId)
    .where("parent_thread_id", "is not", null)
    .execute();
  for (const t of threads) models.set(t.id, modelIdOf((JSON.parse(t.body) as { agent?: SessionAgentView }).agent ?? {}));
  return models;
}

/** The fields of a `session.usage` event for the session's new total `usage` (list cost omitted when a model is unpriced). */
export async function usageEventFields(
  deps: UsageDeps,
  ctx: SessionContext,
  state: Pick<LogState, "threadUsage">,
  usage: CumulativeUsage,
): Promise<Record<string, unknown>> {
  const activity = await loadActivity(deps.storage.db, ctx.sessionId);
  const cost = await sessionListCost(deps, ctx, state.threadUsage, usage);
  return {
    usage: { ...usage, ...(cost ? { list_cost: cost } : {}), active_seconds: seconds(activeMs(activity, deps.clock.now())) },
    budget: ctx.budget,
  };
}

/** `ok`, `reached` (list cost ≥ max_list_cost), or `unpriced` (a budget on a model without a list price). */
export type BudgetState = "ok" | "reached" | "unpriced";

export async function budgetState(
  deps: UsageDeps,
  ctx: SessionContext,
  state: Pick<LogState, "usage" | "threadUsage">,
): Promise<BudgetState> {
  if (!ctx.budget) return "ok";
  const cost = await sessionListCost(deps, ctx, state.threadUsage, state.usage);
  if (!cost) return "unpriced";
  return reached(cost, ctx.budget.max_list_cost as MonetaryAmount) ? "reached" : "ok";
}
