/**
 * The session's cumulative usage as the loop records it (`session.usage`):
 * tokens with their cache breakdown, server-tool request counters, the list
 * cost priced by `@openma/pricing`, and the running time measured by the
 * server's clock. Each snapshot is the previous one (folded from the log)
 * plus what just happened, so a re-run after a crash rebuilds the same
 * numbers and the snapshot's dedupe key keeps it recorded once.
 *
 * Budgets: the planner stops the turn before a model call once the list cost
 * of the usage so far has reached the session's `max_list_cost`
 * (`budgetState`). A budget on a model the price table does not know cannot
 * be tracked, so it fails closed.
 */
import { activeMs, loadActivity, seconds } from "@openma/api";
import { buildPriceTable, listCost, type MonetaryAmount, type PriceTable, reached } from "@openma/pricing";
import type { Clock, Storage } from "@openma/storage";
import { modelIdOf, type SessionContext } from "./context.ts";
import type { CumulativeUsage } from "./log.ts";
import type { ModelUsage } from "./model.ts";

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

/** The fields of a `session.usage` event for `usage` (list cost omitted when the model is unpriced). */
export async function usageEventFields(deps: UsageDeps, ctx: SessionContext, usage: CumulativeUsage): Promise<Record<string, unknown>> {
  const activity = await loadActivity(deps.storage.db, ctx.sessionId);
  const cost = listCost(deps.prices ?? DEFAULT_PRICE_TABLE, modelIdOf(ctx.agent), usage);
  return {
    usage: { ...usage, ...(cost ? { list_cost: cost } : {}), active_seconds: seconds(activeMs(activity, deps.clock.now())) },
    budget: ctx.budget,
  };
}

/** `ok`, `reached` (list cost ≥ max_list_cost), or `unpriced` (a budget on a model without a list price). */
export type BudgetState = "ok" | "reached" | "unpriced";

export function budgetState(prices: PriceTable | undefined, ctx: SessionContext, usage: CumulativeUsage): BudgetState {
  if (!ctx.budget) return "ok";
  const cost = listCost(prices ?? DEFAULT_PRICE_TABLE, modelIdOf(ctx.agent), usage);
  if (!cost) return "unpriced";
  return reached(cost, ctx.budget.max_list_cost as MonetaryAmount) ? "reached" : "ok";
}
