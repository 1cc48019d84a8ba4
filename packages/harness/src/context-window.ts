/**
 * Per-model context windows, and the size at which a conversation is
 * compacted (compaction.ts). The conversation's size is what the model
 * itself reported for its last response (input, cache reads and writes,
 * and output tokens: everything the next request will carry again), never
 * an estimate.
 *
 * The table: every Claude model has a 200 000-token window by default; the
 * operator overrides or adds entries with `OPENMA_CONTEXT_WINDOWS`, a JSON
 * object of model id → tokens, where `"*"` sets the window of every model
 * not named (e.g. `{"claude-sonnet-4-6": 1000000, "*": 200000}`).
 */
import { z } from "zod";

/** Compaction starts when the last response reports this share of the window. */
export const COMPACT_AT_FRACTION = 0.8;
const DEFAULT_WINDOW = 200_000;

export interface ContextWindowTable {
  windows: ReadonlyMap<string, number>;
  fallback: number;
}

export const DEFAULT_CONTEXT_WINDOWS: ContextWindowTable = { windows: new Map(), fallback: DEFAULT_WINDOW };

const tableSchema = z.record(z.string().min(1).max(256), z.number().int().min(100).max(100_000_000));

/** The table with the operator's overrides (`OPENMA_CONTEXT_WINDOWS`); throws a message naming the variable when it is malformed. */
export function contextWindowsFromEnv(env: NodeJS.ProcessEnv): ContextWindowTable {
  const raw = env.OPENMA_CONTEXT_WINDOWS?.trim();
  if (!raw) return DEFAULT_CONTEXT_WINDOWS;
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch (err) {
    throw new Error(`OPENMA_CONTEXT_WINDOWS: not JSON: ${(err as Error).message}`);
  }
  const parsed = tableSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new Error(`OPENMA_CONTEXT_WINDOWS: ${issue?.path.join(".") || "(root)"}: ${issue?.message}`);
  }
  const { "*": fallback, ...models } = parsed.data;
  return { windows: new Map(Object.entries(models)), fallback: fallback ?? DEFAULT_WINDOW };
}

export function contextWindowOf(table: ContextWindowTable, model: string): number {
  return table.windows.get(model) ?? table.fallback;
}

/** Reported conversation size at which the next model call is preceded by a compaction. */
export function compactionThreshold(table: ContextWindowTable, model: string): number {
  return Math.floor(contextWindowOf(table, model) * COMPACT_AT_FRACTION);
}
