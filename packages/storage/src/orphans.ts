/**
 * RuntimeOrphanPort over SQL: token-free records of compute whose hard kill
 * failed, reaped by a reconciler with exponential backoff, an attempt cap
 * and a dead-letter state for operators.
 *
 * Improvements over the reference reconciler (which retried in id order
 * forever): due records are taken oldest-due first, so a failing record moves
 * behind the others instead of starving them; an attempt is counted when it
 * is claimed (a conditional UPDATE), so concurrent reconcilers never reap the
 * same record at once and a reconciler that crashes mid-reap still converges
 * on the cap; every later transition is conditional on that claim.
 */
import {
  canonicalJson,
  DEFAULT_ORPHAN_RETRY_POLICY,
  isRuntimeResourceScope,
  type ManagedSandboxLease,
  ORPHAN_REASONS,
  type OrphanEnqueueInput,
  type OrphanReaper,
  type OrphanReapResult,
  type OrphanReason,
  type OrphanReconcileReport,
  type OrphanRecord,
  type OrphanRequeueResult,
  type OrphanRetryPolicy,
  type OrphanState,
  orphanRetryDelayMs,
  orphanRetryPolicyIssues,
  type RuntimeOrphanPort,
  type RuntimeResourceScope,
  redactSecrets,
  runtimeScopeKey,
  sandboxLeaseIssues,
} from "@openma/contract";
import type { Kysely } from "kysely";
import { sha256Hex } from "./blobs.ts";
import type { Clock } from "./clock.ts";
import type { Database, RuntimeOrphanRow } from "./schema.ts";

const DEFAULT_RECONCILE_LIMIT = 50;
const MAX_PAGE = 1000;

export interface SqlRuntimeOrphanStoreOptions {
  clock: Clock;
  policy?: OrphanRetryPolicy;
}

/** Deterministic, so enqueueing the same runtime twice (a retried cleanup) is a no-op. */
export function runtimeOrphanId(scope: RuntimeResourceScope, generation: number, lease: ManagedSandboxLease): string {
  return `orph_${sha256Hex(canonicalJson([runtimeScopeKey(scope), generation, lease.provider, lease.runtimeId])).slice(0, 40)}`;
}

type Outcome = "reaped" | "retried" | "deadLettered" | "skipped";

export class SqlRuntimeOrphanStore implements RuntimeOrphanPort {
  readonly #db: Kysely<Database>;
  readonly #clock: Clock;
  readonly #policy: OrphanRetryPolicy;

  constructor(db: Kysely<Database>, options: SqlRuntimeOrphanStoreOptions) {
    const policy = options.policy ?? DEFAULT_ORPHAN_RETRY_POLICY;
    const issues = orphanRetryPolicyIssues(policy);
    if (issues.length > 0) throw new TypeError(`invalid orphan retry policy: ${issues.join("; ")}`);
    this.#db = db;
    this.#clock = options.clock;
    this.#policy = policy;
  }

  async enqueue(input: OrphanEnqueueInput): Promise<OrphanRecord> {
    const { scope, generation, lease, reason, error, redact, signal } = input;
    if (!isRuntimeResourceScope(scope)) throw new TypeError("scope: environmentId and sessionId must be non-empty identifiers");
    if (!Number.isSafeInteger(generation) || generation < 1) throw new TypeError("generation: must be a positive integer");
    const leaseIssues = sandboxLeaseIssues(lease);
    if (leaseIssues.length > 0) throw new TypeError(`invalid lease: ${leaseIssues.join("; ")}`);
    if (!ORPHAN_REASONS.includes(reason)) throw new TypeError(`reason: must be one of ${ORPHAN_REASONS.join(", ")}`);
    const leaseJson = canonicalJson(lease);
    // A lease is persisted verbatim, so it must not carry anything secret; refuse rather than store it.
    if (redact.some((secret) => secret.length > 0 && leaseJson.includes(secret))) {
      throw new TypeError("lease contains a value that must never be persisted (fence token or credential)");
    }
    signal.throwIfAborted();
    const now = this.#clock.now();
    const id = runtimeOrphanId(scope, generation, lease);
    await this.#db
      .insertInto("runtime_orphans")
      .values({
        id,
        scope_key: runtimeScopeKey(scope),
        environment_id: scope.environmentId,
        session_id: scope.sessionId,
        generation,
        provider: lease.provider,
        runtime_id: lease.runtimeId,
        lease: leaseJson,
        reason,
        state: "pending",
        attempts: 0,
        next_attempt_at_ms: now,
        last_error: error === null ? null : redactSecrets(error, redact),
        created_at_ms: now,
        updated_at_ms: now,
        resolved_at_ms: null,
      })
      // Already known (a retried cleanup): keep the original record and its retry state.
      .onConflict((oc) => oc.column("id").doNothing())
      .execute();
    const row = await this.#db.selectFrom("runtime_orphans").selectAll().where("id", "=", id).executeTakeFirstOrThrow();
    return recordFrom(row);
  }

  async reconcile(input: { reaper: OrphanReaper; limit?: number; signal: AbortSignal }): Promise<OrphanReconcileReport> {
    const { reaper, signal } = input;
    const limit = input.limit ?? DEFAULT_RECONCILE_LIMIT;
    assertLimit(limit);
    signal.throwIfAborted();
    const now = this.#clock.now();
    const due = await this.#db
      .selectFrom("runtime_orphans")
      .selectAll()
      .where("state", "=", "pending")
      .where("next_attempt_at_ms", "<=", now)
      .orderBy("next_attempt_at_ms")
      .orderBy("id")
      .limit(limit)
      .execute();
    const report: OrphanReconcileReport = { due: due.length, reaped: 0, retried: 0, deadLettered: 0, skipped: 0 };
    for (const row of due) {
      signal.throwIfAborted();
      report[await this.#attempt(row, reaper, signal)] += 1;
    }
    return report;
  }

  async get(input: { id: string; signal: AbortSignal }): Promise<OrphanRecord | null> {
    input.signal.throwIfAborted();
    const row = await this.#db.selectFrom("runtime_orphans").selectAll().where("id", "=", input.id).executeTakeFirst();
    return row ? recordFrom(row) : null;
  }

  async listDeadLetters(input: { limit?: number; signal: AbortSignal }): Promise<OrphanRecord[]> {
    const limit = input.limit ?? 100;
    assertLimit(limit);
    input.signal.throwIfAborted();
    const rows = await this.#db
      .selectFrom("runtime_orphans")
      .selectAll()
      .where("state", "=", "dead_letter")
      .orderBy("resolved_at_ms")
      .orderBy("id")
      .limit(limit)
      .execute();
    return rows.map(recordFrom);
  }

  async requeue(input: { id: string; signal: AbortSignal }): Promise<OrphanRequeueResult> {
    input.signal.throwIfAborted();
    const now = this.#clock.now();
    const row = await this.#db
      .updateTable("runtime_orphans")
      .set({ state: "pending", attempts: 0, next_attempt_at_ms: now, updated_at_ms: now, resolved_at_ms: null })
      .where("id", "=", input.id)
      .where("state", "=", "dead_letter")
      .returningAll()
      .executeTakeFirst();
    if (row) return { type: "requeued", record: recordFrom(row) };
    const existing = await this.get(input);
    return existing ? { type: "not_dead_letter", state: existing.state } : { type: "not_found" };
  }

  /** One reap attempt: claim (counting the attempt), reap, then settle under the same claim. */
  async #attempt(row: RuntimeOrphanRow, reaper: OrphanReaper, signal: AbortSignal): Promise<Outcome> {
    const claimedAt = this.#clock.now();
    const claim = await this.#db
      .updateTable("runtime_orphans")
      .set({ attempts: row.attempts + 1, next_attempt_at_ms: claimedAt + this.#policy.claimTtlMs, updated_at_ms: claimedAt })
      .where("id", "=", row.id)
      .where("state", "=", "pending")
      .where("attempts", "=", row.attempts)
      .where("next_attempt_at_ms", "<=", claimedAt)
      .returning("attempts")
      .executeTakeFirst();
    if (!claim) return "skipped";

    const record = recordFrom(row);
    let result: OrphanReapResult;
    try {
      result = await reaper.reap({ scope: record.scope, lease: record.lease, reason: record.reason, signal });
    } catch (err) {
      result = { type: "failed", error: err instanceof Error ? `${err.name}: ${err.message}` : String(err) };
    }
    const outcome = await this.#settle(row.id, claim.attempts, result);
    // An abort mid-reap is recorded as a failed attempt first, so the record is retried later, then surfaces.
    signal.throwIfAborted();
    return outcome;
  }

  async #settle(id: string, attempts: number, result: OrphanReapResult): Promise<Outcome> {
    const now = this.#clock.now();
    let outcome: Outcome;
    let set: Partial<RuntimeOrphanRow>;
    if (result.type !== "failed") {
      outcome = "reaped";
      set = { state: "reaped", last_error: null, resolved_at_ms: now };
    } else if (attempts >= this.#policy.maxAttempts) {
      outcome = "deadLettered";
      set = { state: "dead_letter", last_error: redactSecrets(result.error, []), resolved_at_ms: now };
    } else {
      outcome = "retried";
      set = { next_attempt_at_ms: now + orphanRetryDelayMs(attempts, this.#policy), last_error: redactSecrets(result.error, []) };
    }
    const settled = await this.#db
      .updateTable("runtime_orphans")
      .set({ ...set, updated_at_ms: now })
      // Only under our claim: if it expired and another reconciler took the record, its result wins.
      .where("id", "=", id)
      .where("state", "=", "pending")
      .where("attempts", "=", attempts)
      .returning("id")
      .executeTakeFirst();
    return settled ? outcome : "skipped";
  }
}

function recordFrom(row: RuntimeOrphanRow): OrphanRecord {
  return {
    id: row.id,
    scope: { environmentId: row.environment_id, sessionId: row.session_id },
    generation: row.generation,
    lease: JSON.parse(row.lease) as ManagedSandboxLease,
    reason: row.reason as OrphanReason,
    state: row.state as OrphanState,
    attempts: row.attempts,
    nextAttemptAt: row.next_attempt_at_ms,
    lastError: row.last_error,
    createdAt: row.created_at_ms,
    updatedAt: row.updated_at_ms,
    resolvedAt: row.resolved_at_ms,
  };
}

function assertLimit(limit: number): void {
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE) throw new TypeError(`limit: must be an integer between 1 and ${MAX_PAGE}`);
}
