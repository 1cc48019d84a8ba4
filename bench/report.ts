/**
 * One line per measured target, for `npm run bench` (bench/all.ts) to gather
 * into its table. Every bench still prints its own human-readable output; this
 * line is the machine-readable part, prefixed so it survives mixed stdout.
 *
 *   @@bench {"bench":"checkpoint","metric":"full checkpoint vs tar | sha256sum","target":"<= 1.5x","measured":3.6,"unit":"x","pass":false}
 */
export const BENCH_LINE_PREFIX = "@@bench ";

export interface BenchTargetResult {
  /** The bench's file name without extension, e.g. "checkpoint". */
  bench: string;
  /** What was measured, against what baseline, e.g. "full checkpoint vs tar | sha256sum (100 MiB, SQLite)". */
  metric: string;
  /** The target as a human reads it, e.g. "<= 1.5x" or "< 10 ms". */
  target: string;
  measured: number;
  /** "x" for a ratio, "ms", "MB", "turns/s", ... */
  unit: string;
  pass: boolean;
}

/** Prints the result line; returns it for benches that also keep it. */
export function reportTarget(result: BenchTargetResult): BenchTargetResult {
  process.stdout.write(`${BENCH_LINE_PREFIX}${JSON.stringify(result)}\n`);
  return result;
}

/** A ratio that passes at or below `max` (the common case: ours over the primitive's). */
export function reportRatioAtMost(bench: string, metric: string, measured: number, max: number): BenchTargetResult {
  return reportTarget({ bench, metric, target: `<= ${max}x`, measured, unit: "x", pass: measured <= max });
}

/** A ratio that passes at or above `min` (throughput against the primitive's). */
export function reportRatioAtLeast(bench: string, metric: string, measured: number, min: number): BenchTargetResult {
  return reportTarget({ bench, metric, target: `>= ${min}x`, measured, unit: "x", pass: measured >= min });
}

/** Parses the result lines out of a bench's stdout; other lines are ignored. */
export function parseBenchLines(stdout: string): BenchTargetResult[] {
  return stdout
    .split("\n")
    .filter((line) => line.startsWith(BENCH_LINE_PREFIX))
    .map((line) => JSON.parse(line.slice(BENCH_LINE_PREFIX.length)) as BenchTargetResult);
}
