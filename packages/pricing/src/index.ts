/**
 * List prices and the session's `list_cost`: one job, so the harness (which
 * records `session.usage` and enforces budgets) and the server's
 * configuration agree on a single table.
 *
 * Prices are USD per million tokens (and per thousand server-tool requests),
 * written as decimal strings and held as integers of micro-dollars, so every
 * cost is computed exactly with bigint arithmetic: no float rounding, and the
 * cost of a cumulative usage is the same however the usage was split into
 * requests. `list_cost.amount` is that exact cost rounded **up** to the whole
 * cent, so a budget cap fires at or before the real list charge.
 *
 * Operators override or extend the defaults with a JSON file named by
 * `OPENMA_PRICE_TABLE` (see `priceTableFromEnv` and docs/api.md).
 */
import { readFileSync } from "node:fs";
import { z } from "zod";

/** A price in USD, e.g. "3" or "0.30": up to six decimals (micro-dollar precision). */
const usd = z.string().regex(/^(0|[1-9]\d{0,6})(\.\d{1,6})?$/, "a price is a decimal string of USD with at most six decimals");

export const modelPriceSchema = z.object({
  /** USD per million uncached input tokens. */
  input: usd,
  /** USD per million output tokens. */
  output: usd,
  /** USD per million tokens written to the 5-minute cache (default 1.25 × input). */
  cache_write_5m: usd.optional(),
  /** USD per million tokens written to the 1-hour cache (default 2 × input). */
  cache_write_1h: usd.optional(),
  /** USD per million tokens read from the cache (default 0.1 × input). */
  cache_read: usd.optional(),
});
export type ModelPriceInput = z.infer<typeof modelPriceSchema>;

export const priceTableSchema = z
  .object({
    /** Model id (or id family: a dated snapshot `<id>-YYYYMMDD` is priced as `<id>`) → prices. */
    models: z.record(z.string().min(1).max(256), modelPriceSchema).optional(),
    /** USD per thousand `web_search` requests. */
    web_search_per_1000: usd.optional(),
    /** USD per thousand `web_fetch` requests. */
    web_fetch_per_1000: usd.optional(),
  })
  .strict();
export type PriceTableInput = z.infer<typeof priceTableSchema>;

/** Micro-dollars per million tokens (or per thousand requests). */
interface ModelPrice {
  input: bigint;
  output: bigint;
  cacheWrite5m: bigint;
  cacheWrite1h: bigint;
  cacheRead: bigint;
}

export interface PriceTable {
  readonly models: ReadonlyMap<string, ModelPrice>;
  readonly webSearchPer1000: bigint;
  readonly webFetchPer1000: bigint;
}

/**
 * Public list prices (USD per million tokens) of the Claude models, from the
 * vendor's pricing page. Cache prices follow the published multipliers of the
 * input price unless given. Models left out (tiered or not yet listed) are
 * unpriced until an operator adds them.
 */
export const DEFAULT_PRICES: PriceTableInput = {
  models: {
    "claude-fable-5-1": { input: "10", output: "50", cache_read: "0.25" },
    "claude-mythos-5-1": { input: "10", output: "50", cache_read: "0.25" },
    "claude-fable-5": { input: "10", output: "50", cache_read: "1" },
    "claude-mythos-5": { input: "10", output: "50", cache_read: "1" },
    "claude-opus-5": { input: "5", output: "25" },
    "claude-opus-4-8": { input: "5", output: "25" },
    "claude-opus-4-7": { input: "5", output: "25" },
    "claude-opus-4-6": { input: "5", output: "25" },
    "claude-sonnet-4-6": { input: "3", output: "15" },
    "claude-opus-4-5": { input: "5", output: "25" },
    "claude-opus-4-1": { input: "15", output: "75" },
    "claude-opus-4-0": { input: "15", output: "75" },
    "claude-opus-4": { input: "15", output: "75" },
    "claude-sonnet-4-5": { input: "3", output: "15" },
    "claude-sonnet-4-0": { input: "3", output: "15" },
    "claude-sonnet-4": { input: "3", output: "15" },
    "claude-3-7-sonnet": { input: "3", output: "15" },
    "claude-haiku-4-5": { input: "1", output: "5" },
    "claude-3-5-haiku": { input: "0.8", output: "4" },
    "claude-3-haiku": { input: "0.25", output: "1.25", cache_write_5m: "0.3", cache_write_1h: "0.5", cache_read: "0.03" },
  },
  web_search_per_1000: "10",
  web_fetch_per_1000: "0",
};

const MICRO = 1_000_000n;

function micro(price: string): bigint {
  const [whole = "0", fraction = ""] = price.split(".");
  return BigInt(whole) * MICRO + BigInt(fraction.padEnd(6, "0"));
}

function modelPrice(p: ModelPriceInput): ModelPrice {
  const input = micro(p.input);
  return {
    input,
    output: micro(p.output),
    cacheWrite5m: p.cache_write_5m !== undefined ? micro(p.cache_write_5m) : (input * 125n) / 100n,
    cacheWrite1h: p.cache_write_1h !== undefined ? micro(p.cache_write_1h) : input * 2n,
    cacheRead: p.cache_read !== undefined ? micro(p.cache_read) : input / 10n,
  };
}

/** The defaults with `overrides` laid over them (a model named in both takes the override's prices). */
export function buildPriceTable(overrides: PriceTableInput = {}): PriceTable {
  const base = priceTableSchema.parse(DEFAULT_PRICES);
  const over = priceTableSchema.parse(overrides);
  const models = new Map<string, ModelPrice>();
  for (const [id, p] of Object.entries({ ...base.models, ...over.models })) models.set(id, modelPrice(p));
  return {
    models,
    webSearchPer1000: micro(over.web_search_per_1000 ?? base.web_search_per_1000 ?? "0"),
    webFetchPer1000: micro(over.web_fetch_per_1000 ?? base.web_fetch_per_1000 ?? "0"),
  };
}

/**
 * `OPENMA_PRICE_TABLE`: the path of a JSON file in `priceTableSchema`'s
 * shape, laid over the defaults. Throws with the file and the first problem
 * when it cannot be read or is malformed, so a typo fails the start, not a
 * budget later.
 */
export function priceTableFromEnv(env: Readonly<Record<string, string | undefined>> = process.env): PriceTable {
  const file = env.OPENMA_PRICE_TABLE;
  if (!file) return buildPriceTable();
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, "utf8"));
  } catch (err) {
    throw new Error(`OPENMA_PRICE_TABLE: cannot read ${file}: ${(err as Error).message}`);
  }
  const parsed = priceTableSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new Error(`OPENMA_PRICE_TABLE: ${file}: ${issue?.path.join(".") || "(root)"}: ${issue?.message}`);
  }
  return buildPriceTable(parsed.data);
}

const SNAPSHOT_SUFFIX = /^-\d{8}$/;

/** The prices of `modelId`: an exact entry, else the entry it is a dated snapshot of. Null when unpriced. */
function priceOf(table: PriceTable, modelId: string): ModelPrice | null {
  const exact = table.models.get(modelId);
  if (exact) return exact;
  for (const [id, price] of table.models) {
    if (modelId.startsWith(id) && SNAPSHOT_SUFFIX.test(modelId.slice(id.length))) return price;
  }
  return null;
}

export function isPriced(table: PriceTable, modelId: string): boolean {
  return priceOf(table, modelId) !== null;
}

/** Cumulative usage as the session reports it (the fields that cost money). */
export interface BillableUsage {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens: number;
  cache_creation: { ephemeral_5m_input_tokens: number; ephemeral_1h_input_tokens: number };
  /** Requests the server's own tools made. */
  server_tool_use: { web_fetch_requests: number; web_search_requests: number };
}

/** A usage snapshot as an event carries it, with absent, malformed or negative counters as 0. */
export function billableUsageOf(raw: unknown): BillableUsage {
  const count = (v: unknown) => (typeof v === "number" && Number.isFinite(v) && v > 0 ? v : 0);
  const u = (raw ?? {}) as Record<string, unknown>;
  const creation = (u.cache_creation ?? {}) as Record<string, unknown>;
  const tools = (u.server_tool_use ?? {}) as Record<string, unknown>;
  return {
    input_tokens: count(u.input_tokens),
    output_tokens: count(u.output_tokens),
    cache_read_input_tokens: count(u.cache_read_input_tokens),
    cache_creation: {
      ephemeral_5m_input_tokens: count(creation.ephemeral_5m_input_tokens),
      ephemeral_1h_input_tokens: count(creation.ephemeral_1h_input_tokens),
    },
    server_tool_use: { web_fetch_requests: count(tools.web_fetch_requests), web_search_requests: count(tools.web_search_requests) },
  };
}

export interface MonetaryAmount {
  /** Integer minor units (cents) as a string, no leading zeros. */
  amount: string;
  currency: "USD";
}

/** Exact cost in pico-dollars (micro-dollars per million). */
function picoDollars(p: ModelPrice, table: PriceTable, u: BillableUsage): bigint {
  const n = (v: number) => BigInt(Math.max(0, Math.trunc(v)));
  const tokens =
    n(u.input_tokens) * p.input +
    n(u.output_tokens) * p.output +
    n(u.cache_read_input_tokens) * p.cacheRead +
    n(u.cache_creation.ephemeral_5m_input_tokens) * p.cacheWrite5m +
    n(u.cache_creation.ephemeral_1h_input_tokens) * p.cacheWrite1h;
  // Per-thousand request prices scaled to the same unit (× 1e6 / 1e3).
  const requests =
    (n(u.server_tool_use.web_search_requests) * table.webSearchPer1000 + n(u.server_tool_use.web_fetch_requests) * table.webFetchPer1000) *
    1000n;
  return tokens + requests;
}

const PICO_PER_CENT = 10_000_000_000n;

/** The list cost of `usage` on `modelId`, rounded up to the cent; null when the model has no price. */
export function listCost(table: PriceTable, modelId: string, usage: BillableUsage): MonetaryAmount | null {
  return mixedListCost(table, [{ modelId, usage }]);
}

/**
 * The list cost of usage spread over several models (a multi-agent session:
 * each thread's usage on its own agent's model), summed exactly and rounded
 * up to the cent once, so one model's parts cost what their sum would. Null
 * when any part's model has no price: a partial sum would understate it.
 */
export function mixedListCost(table: PriceTable, parts: ReadonlyArray<{ modelId: string; usage: BillableUsage }>): MonetaryAmount | null {
  let pico = 0n;
  for (const { modelId, usage } of parts) {
    const price = priceOf(table, modelId);
    if (!price) return null;
    pico += picoDollars(price, table, usage);
  }
  const cents = (pico + PICO_PER_CENT - 1n) / PICO_PER_CENT;
  return { amount: cents.toString(), currency: "USD" };
}

/** `into += next - prev`, field by field: a running total's increase credited to whoever raised it. */
export function addUsageDelta(into: BillableUsage, next: BillableUsage, prev: BillableUsage): void {
  into.input_tokens += next.input_tokens - prev.input_tokens;
  into.output_tokens += next.output_tokens - prev.output_tokens;
  into.cache_read_input_tokens += next.cache_read_input_tokens - prev.cache_read_input_tokens;
  for (const k of ["ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"] as const)
    into.cache_creation[k] += next.cache_creation[k] - prev.cache_creation[k];
  for (const k of ["web_fetch_requests", "web_search_requests"] as const)
    into.server_tool_use[k] += next.server_tool_use[k] - prev.server_tool_use[k];
}

/** True when `spent` has reached `limit` (both integer minor-unit strings of one currency). */
export function reached(spent: MonetaryAmount, limit: MonetaryAmount): boolean {
  return spent.currency === limit.currency && BigInt(spent.amount) >= BigInt(limit.amount);
}
