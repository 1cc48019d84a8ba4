/**
 * Host timing validation. Timings come from deployment configuration; a
 * renewal interval that cannot beat the safety margin would make every run
 * lose its fence, so such a configuration is refused when the host is built.
 */
import { DEFAULT_HOST_TIMINGS, type HostTimings } from "./types.ts";

const DAY_MS = 86_400_000;

/** [min, max] per field; all integers. */
const BOUNDS: Record<keyof HostTimings, readonly [number, number]> = {
  leaseTtlMs: [1_000, DAY_MS],
  renewEveryMs: [1, DAY_MS],
  safetyMarginMs: [0, DAY_MS],
  renewTimeoutMs: [1, DAY_MS],
  sandboxHeartbeatMs: [1, DAY_MS],
  abortGraceMs: [0, DAY_MS],
  drainTimeoutMs: [1, DAY_MS],
  terminateTimeoutMs: [1, DAY_MS],
  publishAttempts: [1, 20],
  publishRetryDelayMs: [0, 10 * 60_000],
  maxColdRestarts: [0, 10],
  fallbackDepth: [1, 1000],
};

export function timingIssues(timings: HostTimings): string[] {
  const issues: string[] = [];
  for (const [field, [min, max]] of Object.entries(BOUNDS) as Array<[keyof HostTimings, readonly [number, number]]>) {
    const value = timings[field];
    if (!Number.isInteger(value) || value < min || value > max) issues.push(`${field}: must be an integer between ${min} and ${max}`);
  }
  if (issues.length === 0 && timings.renewEveryMs >= timings.leaseTtlMs - timings.safetyMarginMs) {
    issues.push("renewEveryMs: must be shorter than leaseTtlMs - safetyMarginMs, or the fence expires between renewals");
  }
  return issues;
}

export function resolveTimings(overrides: Partial<HostTimings> | undefined): HostTimings {
  const timings = { ...DEFAULT_HOST_TIMINGS, ...overrides };
  const issues = timingIssues(timings);
  if (issues.length > 0) throw new TypeError(`invalid host timings: ${issues.join("; ")}`);
  return timings;
}
