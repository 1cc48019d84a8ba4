import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { type BillableUsage, buildPriceTable, isPriced, listCost, mixedListCost, priceTableFromEnv, reached } from "./index.ts";

function usage(over: Partial<BillableUsage> = {}): BillableUsage {
  return {
    input_tokens: 0,
    output_tokens: 0,
    cache_read_input_tokens: 0,
    cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
    server_tool_use: { web_search_requests: 0, web_fetch_requests: 0 },
    ...over,
  };
}

describe("list prices", () => {
  const table = buildPriceTable();

  it("prices every token class of a Sonnet snapshot exactly, rounded up to the cent", () => {
    // 1M input ($3) + 100k output ($1.50) + 200k cache reads ($0.06) + 100k 5m writes ($0.375) + 100k 1h writes ($0.60) = $5.535
    const u = usage({
      input_tokens: 1_000_000,
      output_tokens: 100_000,
      cache_read_input_tokens: 200_000,
      cache_creation: { ephemeral_5m_input_tokens: 100_000, ephemeral_1h_input_tokens: 100_000 },
    });
    expect(listCost(table, "claude-sonnet-4-5-20250929", u)).toEqual({ amount: "554", currency: "USD" });
    expect(listCost(table, "claude-sonnet-4-5", u)).toEqual({ amount: "554", currency: "USD" });
  });

  it("charges a single token a whole cent and nothing for nothing", () => {
    expect(listCost(table, "claude-haiku-4-5", usage({ input_tokens: 1 }))?.amount).toBe("1");
    expect(listCost(table, "claude-haiku-4-5", usage())?.amount).toBe("0");
  });

  it("counts web searches at $10 per thousand", () => {
    const u = usage({ server_tool_use: { web_search_requests: 3, web_fetch_requests: 7 } });
    expect(listCost(table, "claude-opus-4-5", u)?.amount).toBe("3");
  });

  it("leaves unknown models (and undated look-alikes) unpriced", () => {
    expect(isPriced(table, "claude-test-1")).toBe(false);
    expect(isPriced(table, "claude-sonnet-4-5-preview")).toBe(false);
    expect(listCost(table, "claude-test-1", usage({ input_tokens: 10 }))).toBeNull();
  });

  it("sums usage on several models exactly and rounds once; one unpriced model leaves it unpriced", () => {
    // 1 token on Sonnet + 1 on Opus: $0.000008, one cent (rounding each part up would make it two).
    const parts = [
      { modelId: "claude-sonnet-4-6", usage: usage({ input_tokens: 1 }) },
      { modelId: "claude-opus-4-6", usage: usage({ input_tokens: 1 }) },
    ];
    expect(mixedListCost(table, parts)).toEqual({ amount: "1", currency: "USD" });
    // 100k in on Sonnet ($0.30) + 200k in on Opus ($1.00).
    expect(
      mixedListCost(table, [
        { modelId: "claude-sonnet-4-6", usage: usage({ input_tokens: 100_000 }) },
        { modelId: "claude-opus-4-6", usage: usage({ input_tokens: 200_000 }) },
      ]),
    ).toEqual({ amount: "130", currency: "USD" });
    expect(mixedListCost(table, [...parts, { modelId: "claude-test-1", usage: usage() }])).toBeNull();
  });

  it("compares spend with a limit in minor units", () => {
    expect(reached({ amount: "100", currency: "USD" }, { amount: "100", currency: "USD" })).toBe(true);
    expect(reached({ amount: "99", currency: "USD" }, { amount: "100", currency: "USD" })).toBe(false);
  });
});

describe("OPENMA_PRICE_TABLE", () => {
  const dir = mkdtempSync(join(tmpdir(), "openma-prices-"));

  it("lays an operator's file over the defaults", () => {
    const file = join(dir, "prices.json");
    writeFileSync(
      file,
      JSON.stringify({ models: { "claude-test-1": { input: "2", output: "8", cache_read: "0.5" } }, web_search_per_1000: "5" }),
    );
    const table = priceTableFromEnv({ OPENMA_PRICE_TABLE: file });
    // 500k input ($1) + 250k output ($2) + 1M cache reads ($0.50) + 2 searches ($0.01) + 100k 5m writes (1.25 × $2 → $0.25)
    const u = usage({
      input_tokens: 500_000,
      output_tokens: 250_000,
      cache_read_input_tokens: 1_000_000,
      cache_creation: { ephemeral_5m_input_tokens: 100_000, ephemeral_1h_input_tokens: 0 },
      server_tool_use: { web_search_requests: 2, web_fetch_requests: 0 },
    });
    expect(listCost(table, "claude-test-1", u)?.amount).toBe("376");
    expect(isPriced(table, "claude-sonnet-4-5")).toBe(true);
  });

  it("fails clearly on a malformed file", () => {
    const file = join(dir, "bad.json");
    writeFileSync(file, JSON.stringify({ models: { x: { input: "-1", output: "1" } } }));
    expect(() => priceTableFromEnv({ OPENMA_PRICE_TABLE: file })).toThrow(/OPENMA_PRICE_TABLE: .*models\.x\.input/);
    expect(() => priceTableFromEnv({ OPENMA_PRICE_TABLE: join(dir, "missing.json") })).toThrow(/cannot read/);
  });
});
