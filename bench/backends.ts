import type { Dialect } from "@openma/storage";
import { BACKENDS } from "@openma/storage/testing";

/** The storage backends a bench runs on: all, or those named in BENCH_BACKENDS (e.g. "sqlite"), to compare one side by side. */
export function backends(): readonly Dialect[] {
  const named = process.env.BENCH_BACKENDS?.split(",").map((s) => s.trim());
  return named ? BACKENDS.filter((b) => named.includes(b)) : BACKENDS;
}
