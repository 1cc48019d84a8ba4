/**
 * Orphaned compute: a runtime whose hard kill failed. The record keeps the
 * serializable lease so any process can reap it later; it never contains a
 * fence token or API credential. Reaping is retried with exponential backoff,
 * capped, and parked in a dead-letter state an operator can list, so one
 * permanently failing runtime cannot starve the others.
 */
import type { ManagedSandboxLease } from "./sandbox.ts";
import type { RuntimeResourceScope } from "./scope.ts";

export type OrphanState = "pending" | "reaped" | "dead_letter";
export type OrphanReason = "terminate_failed" | "suspend_failed" | "lease_lost" | "host_recovery";
export const ORPHAN_REASONS: readonly OrphanReason[] = ["terminate_failed", "suspend_failed", "lease_lost", "host_recovery"];

export interface OrphanRecord {
  /** Deterministic from (scope, generation, provider, runtimeId): enqueueing twice is a no-op. */
  id: string;
  scope: RuntimeResourceScope;
  generation: number;
  lease: ManagedSandboxLease;
  reason: OrphanReason;
  state: OrphanState;
  /** Reap attempts started so far (an attempt counts when claimed, so a crashing reaper still converges). */
  attempts: number;
  /** Epoch ms; meaningful while `pending`. */
  nextAttemptAt: number;
  /** Redacted and truncated. */
  lastError: string | null;
  createdAt: number;
  updatedAt: number;
  /** When it became `reaped` or `dead_letter`. */
  resolvedAt: number | null;
}

export interface OrphanReapInput {
  scope: RuntimeResourceScope;
  lease: ManagedSandboxLease;
  reason: OrphanReason;
  signal: AbortSignal;
}

/** `not_found` is success: the runtime is already gone, which is all reaping wants. */
export type OrphanReapResult = { type: "reaped" } | { type: "not_found" } | { type: "failed"; error: string };

export interface OrphanReaper {
  reap(input: OrphanReapInput): Promise<OrphanReapResult>;
}

export interface OrphanRetryPolicy {
  /** Delay after the first failed attempt; doubles per further failure. */
  baseDelayMs: number;
  maxDelayMs: number;
  /** After this many failed attempts the record becomes `dead_letter`. */
  maxAttempts: number;
  /**
   * How long a claimed attempt hides the record from other reconcilers. If
   * the claiming process dies mid-reap, the record becomes due again after
   * this, with the attempt already counted.
   */
  claimTtlMs: number;
}

export const DEFAULT_ORPHAN_RETRY_POLICY: OrphanRetryPolicy = {
  baseDelayMs: 5_000,
  maxDelayMs: 15 * 60_000,
  maxAttempts: 10,
  claimTtlMs: 5 * 60_000,
};

/** Delay before the next attempt after `failedAttempts` failures (>= 1): base * 2^(n-1), capped. */
export function orphanRetryDelayMs(failedAttempts: number, policy: OrphanRetryPolicy): number {
  const exponent = Math.max(0, Math.min(failedAttempts - 1, 52));
  return Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** exponent);
}

/** Problems with a policy (empty when valid). Bounded so delays stay exact integers. */
export function orphanRetryPolicyIssues(policy: OrphanRetryPolicy): string[] {
  const issues: string[] = [];
  const day = 86_400_000;
  if (!isIntIn(policy.baseDelayMs, 1, day)) issues.push("baseDelayMs: must be an integer between 1 and 86400000");
  if (!isIntIn(policy.maxDelayMs, policy.baseDelayMs, 7 * day))
    issues.push("maxDelayMs: must be an integer between baseDelayMs and 604800000");
  if (!isIntIn(policy.maxAttempts, 1, 1000)) issues.push("maxAttempts: must be an integer between 1 and 1000");
  if (!isIntIn(policy.claimTtlMs, 1, day)) issues.push("claimTtlMs: must be an integer between 1 and 86400000");
  return issues;
}

function isIntIn(value: number, min: number, max: number): boolean {
  return Number.isInteger(value) && value >= min && value <= max;
}

/** Maximum stored error text; provider errors can embed whole HTTP bodies. */
export const MAX_ORPHAN_ERROR_LENGTH = 2048;

/**
 * Replaces every occurrence of each secret (tokens, keys) with `[redacted]`
 * and truncates, so an adapter that echoes a credential in its error message
 * cannot leak it into a persisted record or a log.
 */
export function redactSecrets(text: string, secrets: readonly string[], maxLength = MAX_ORPHAN_ERROR_LENGTH): string {
  let out = text;
  for (const secret of secrets) if (secret.length > 0) out = out.split(secret).join("[redacted]");
  return out.length > maxLength ? `${out.slice(0, maxLength - 1)}…` : out;
}

export interface OrphanEnqueueInput {
  scope: RuntimeResourceScope;
  generation: number;
  lease: ManagedSandboxLease;
  reason: OrphanReason;
  error: string | null;
  /** Values that must never be persisted (the fence token, credentials); scrubbed from `error`, refused in `lease`. */
  redact: readonly string[];
  signal: AbortSignal;
}

export interface OrphanReconcileReport {
  /** Due records seen. */
  due: number;
  reaped: number;
  /** Failed but will be tried again later. */
  retried: number;
  deadLettered: number;
  /** Claimed by another reconciler first. */
  skipped: number;
}

export type OrphanRequeueResult =
  | { type: "requeued"; record: OrphanRecord }
  | { type: "not_found" }
  | { type: "not_dead_letter"; state: OrphanState };

export interface RuntimeOrphanPort {
  enqueue(input: OrphanEnqueueInput): Promise<OrphanRecord>;
  /** Reaps due records once; call it on a schedule. */
  reconcile(input: { reaper: OrphanReaper; limit?: number; signal: AbortSignal }): Promise<OrphanReconcileReport>;
  get(input: { id: string; signal: AbortSignal }): Promise<OrphanRecord | null>;
  /** For operators: records that exhausted their attempts, oldest first. */
  listDeadLetters(input: { limit?: number; signal: AbortSignal }): Promise<OrphanRecord[]>;
  /** For operators, after fixing the cause: back to `pending` with a fresh attempt budget. */
  requeue(input: { id: string; signal: AbortSignal }): Promise<OrphanRequeueResult>;
}
