/**
 * The durable activation-intent queue over SQL (one query set, SQLite and
 * Postgres; table made by storage migration 0021). An intent says "a VM must
 * be launched for this session"; a worker claims it under a lease, launches,
 * and completes it with the VM's runtime id.
 *
 * Every transition a stale holder and a new one can race on is one
 * conditional UPDATE fenced on the lease token (`… WHERE lease_token = ? AND
 * state = 'pending' …`), so the database decides who wins on both engines.
 * The idempotency key is fixed at enqueue and shared by every claim of the
 * intent: a launch retried after a crash asks the provider with the same key
 * and gets the VM the first attempt made (docs/adr/0026-activation-intents.md).
 */
import { createHash, randomBytes } from "node:crypto";
import { isRuntimeIdentifier } from "@openma/contract";
import type { Clock, Database } from "@openma/storage";
import type { Kysely } from "kysely";

export type IntentState = "pending" | "completed" | "exhausted" | "cancelled";

export interface ActivationIntentRow {
  event_id: string;
  idempotency_key: string;
  environment_id: string;
  workspace_id: string;
  session_id: string;
  state: IntentState;
  attempt_count: number;
  max_attempts: number;
  deadline_at_ms: number;
  next_attempt_at_ms: number;
  lease_owner_id: string | null;
  lease_generation: number;
  lease_token: string | null;
  lease_expires_at_ms: number;
  runtime_id: string | null;
  last_error: string | null;
  created_at_ms: number;
  updated_at_ms: number;
}

export type ActivationTables = {
  activation_intents: ActivationIntentRow;
};

export interface ActivationInput {
  /** The stable id of the event that asked for the VM (one intent per event). */
  eventId: string;
  environmentId: string;
  workspaceId: string;
  sessionId: string;
}

export interface ActivationIntent extends ActivationInput {
  idempotencyKey: string;
  state: IntentState;
  attemptCount: number;
  maxAttempts: number;
  deadlineAtMs: number;
  nextAttemptAtMs: number;
  leaseGeneration: number;
  runtimeId: string | null;
  lastError: string | null;
}

export interface ActivationClaim {
  intent: ActivationIntent;
  ownerId: string;
  generation: number;
  /** Secret to the holder: every write of this claim is fenced on it. */
  token: string;
  expiresAtMs: number;
}

export type EnqueueResult = { type: "inserted" | "existing"; intent: ActivationIntent };
export type ClaimResult = { type: "claimed"; claim: ActivationClaim } | { type: "empty" };
export type RenewResult = { type: "renewed"; expiresAtMs: number } | { type: "lost" };
export type CompleteResult = { type: "completed" } | { type: "lost" };
export type RetryResult = { type: "released" } | { type: "exhausted" } | { type: "lost" };

/** How many due intents one claim call looks at before giving up to concurrent claimers. */
const CLAIM_CANDIDATES = 8;

function assertId(name: string, value: string): void {
  if (!isRuntimeIdentifier(value)) throw new TypeError(`${name}: must be a non-empty identifier without control characters`);
}

function assertPositive(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 1) throw new TypeError(`${name}: must be a positive integer`);
}

/**
 * The launcher's idempotency token for an event: a digest, so any event id
 * fits the provider's 1–128 character limit and reveals nothing about it.
 */
export function idempotencyKeyFor(eventId: string): string {
  return `act-${createHash("sha256").update(eventId).digest("hex").slice(0, 48)}`;
}

export class SqlActivationIntentStore {
  readonly #db: Kysely<Database & ActivationTables>;
  readonly #clock: Clock;

  /** `db` is the storage's handle; the table is storage migration 0021's. */
  constructor(db: Kysely<Database>, options: { clock: Clock }) {
    this.#db = db.withTables<ActivationTables>();
    this.#clock = options.clock;
  }

  async enqueue(input: ActivationInput & { maxAttempts: number; deadlineAtMs: number }): Promise<EnqueueResult> {
    for (const name of ["eventId", "environmentId", "workspaceId", "sessionId"] as const) assertId(name, input[name]);
    assertPositive("maxAttempts", input.maxAttempts);
    assertPositive("deadlineAtMs", input.deadlineAtMs);
    const now = this.#clock.now();
    const row: ActivationIntentRow = {
      event_id: input.eventId,
      idempotency_key: idempotencyKeyFor(input.eventId),
      environment_id: input.environmentId,
      workspace_id: input.workspaceId,
      session_id: input.sessionId,
      state: "pending",
      attempt_count: 0,
      max_attempts: input.maxAttempts,
      deadline_at_ms: input.deadlineAtMs,
      next_attempt_at_ms: now,
      lease_owner_id: null,
      lease_generation: 0,
      lease_token: null,
      lease_expires_at_ms: 0,
      runtime_id: null,
      last_error: null,
      created_at_ms: now,
      updated_at_ms: now,
    };
    const inserted = await this.#db
      .insertInto("activation_intents")
      .values(row)
      .onConflict((oc) => oc.column("event_id").doNothing())
      .returningAll()
      .executeTakeFirst();
    if (inserted) return { type: "inserted", intent: intentFrom(inserted) };
    const existing = await this.get(input.eventId);
    if (!existing) throw new Error(`activation intent ${input.eventId} vanished during enqueue`);
    return { type: "existing", intent: existing };
  }

  async get(eventId: string): Promise<ActivationIntent | undefined> {
    const row = await this.#db.selectFrom("activation_intents").selectAll().where("event_id", "=", eventId).executeTakeFirst();
    return row ? intentFrom(row) : undefined;
  }

  /**
   * Claims one due intent (the named one when `eventId` is given): pending,
   * not leased, its retry time reached. Intents past their deadline or out of
   * attempts are marked exhausted first, so they are never launched. Each
   * candidate is taken by a CAS on its generation; losing a race moves on.
   */
  async claim(input: { ownerId: string; leaseTtlMs: number; eventId?: string; environmentId?: string }): Promise<ClaimResult> {
    assertId("ownerId", input.ownerId);
    assertPositive("leaseTtlMs", input.leaseTtlMs);
    const now = this.#clock.now();
    await this.#db
      .updateTable("activation_intents")
      .set({ state: "exhausted", lease_token: null, lease_owner_id: null, lease_expires_at_ms: 0, updated_at_ms: now })
      .where("state", "=", "pending")
      .where("lease_expires_at_ms", "<=", now)
      .where((eb) => eb.or([eb("deadline_at_ms", "<=", now), eb("attempt_count", ">=", eb.ref("max_attempts"))]))
      .execute();
    let candidates = this.#db
      .selectFrom("activation_intents")
      .select(["event_id", "lease_generation"])
      .where("state", "=", "pending")
      .where("lease_expires_at_ms", "<=", now)
      .where("next_attempt_at_ms", "<=", now)
      .orderBy("next_attempt_at_ms")
      .orderBy("event_id")
      .limit(CLAIM_CANDIDATES);
    if (input.eventId !== undefined) candidates = candidates.where("event_id", "=", input.eventId);
    if (input.environmentId !== undefined) candidates = candidates.where("environment_id", "=", input.environmentId);
    for (const candidate of await candidates.execute()) {
      const token = randomBytes(18).toString("base64url");
      const expiresAtMs = now + input.leaseTtlMs;
      const row = await this.#db
        .updateTable("activation_intents")
        .set((eb) => ({
          lease_owner_id: input.ownerId,
          lease_token: token,
          lease_generation: eb("lease_generation", "+", 1),
          lease_expires_at_ms: expiresAtMs,
          attempt_count: eb("attempt_count", "+", 1),
          updated_at_ms: now,
        }))
        .where("event_id", "=", candidate.event_id)
        .where("lease_generation", "=", candidate.lease_generation)
        .where("state", "=", "pending")
        .where("lease_expires_at_ms", "<=", now)
        .returningAll()
        .executeTakeFirst();
      if (row) {
        const intent = intentFrom(row);
        return { type: "claimed", claim: { intent, ownerId: input.ownerId, generation: intent.leaseGeneration, token, expiresAtMs } };
      }
    }
    return { type: "empty" };
  }

  async renew(claim: ActivationClaim, leaseTtlMs: number): Promise<RenewResult> {
    assertPositive("leaseTtlMs", leaseTtlMs);
    const now = this.#clock.now();
    const expiresAtMs = now + leaseTtlMs;
    const result = await this.#fenced(claim, now).set({ lease_expires_at_ms: expiresAtMs, updated_at_ms: now }).executeTakeFirst();
    return Number(result.numUpdatedRows) > 0 ? { type: "renewed", expiresAtMs } : { type: "lost" };
  }

  async complete(claim: ActivationClaim, runtimeId: string): Promise<CompleteResult> {
    assertId("runtimeId", runtimeId);
    const now = this.#clock.now();
    const result = await this.#fenced(claim, now)
      .set({
        state: "completed",
        runtime_id: runtimeId,
        lease_token: null,
        lease_owner_id: null,
        lease_expires_at_ms: 0,
        last_error: null,
        updated_at_ms: now,
      })
      .executeTakeFirst();
    return Number(result.numUpdatedRows) > 0 ? { type: "completed" } : { type: "lost" };
  }

  /** Gives the intent back after a failed launch: due again at `nextAttemptAtMs`, or exhausted when out of attempts or time. */
  async retry(claim: ActivationClaim, input: { nextAttemptAtMs: number; error: string }): Promise<RetryResult> {
    const now = this.#clock.now();
    const error = input.error.slice(0, 2000);
    const exhausted = claim.intent.attemptCount >= claim.intent.maxAttempts || input.nextAttemptAtMs >= claim.intent.deadlineAtMs;
    const result = await this.#fenced(claim, now)
      .set({
        state: exhausted ? "exhausted" : "pending",
        next_attempt_at_ms: input.nextAttemptAtMs,
        lease_token: null,
        lease_owner_id: null,
        lease_expires_at_ms: 0,
        last_error: error,
        updated_at_ms: now,
      })
      .executeTakeFirst();
    if (Number(result.numUpdatedRows) === 0) return { type: "lost" };
    return { type: exhausted ? "exhausted" : "released" };
  }

  /** Lets go of a claim without spending a retry delay (a graceful stop); a no-op once the claim was lost or settled. */
  async release(claim: ActivationClaim): Promise<void> {
    const now = this.#clock.now();
    await this.#fenced(claim, now).set({ lease_token: null, lease_owner_id: null, lease_expires_at_ms: 0, updated_at_ms: now }).execute();
  }

  /** The session no longer needs a VM (it ended first): a pending intent is never launched, a held one's holder loses it. */
  async cancel(eventId: string): Promise<boolean> {
    const now = this.#clock.now();
    const result = await this.#db
      .updateTable("activation_intents")
      .set({ state: "cancelled", lease_token: null, lease_owner_id: null, lease_expires_at_ms: 0, updated_at_ms: now })
      .where("event_id", "=", eventId)
      .where("state", "=", "pending")
      .executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  }

  /** Counts by state (for stats and tests). */
  async counts(): Promise<Record<IntentState, number>> {
    const rows = await this.#db
      .selectFrom("activation_intents")
      .select((eb) => ["state", eb.fn.countAll<number>().as("n")])
      .groupBy("state")
      .execute();
    const counts: Record<IntentState, number> = { pending: 0, completed: 0, exhausted: 0, cancelled: 0 };
    for (const row of rows) counts[row.state] = Number(row.n);
    return counts;
  }

  /** An UPDATE that only touches the claim's row while the claim is still the live lease on a pending intent. */
  #fenced(claim: ActivationClaim, now: number) {
    return this.#db
      .updateTable("activation_intents")
      .where("event_id", "=", claim.intent.eventId)
      .where("lease_token", "=", claim.token)
      .where("lease_generation", "=", claim.generation)
      .where("state", "=", "pending")
      .where("lease_expires_at_ms", ">", now);
  }
}

function intentFrom(row: ActivationIntentRow): ActivationIntent {
  return {
    eventId: row.event_id,
    idempotencyKey: row.idempotency_key,
    environmentId: row.environment_id,
    workspaceId: row.workspace_id,
    sessionId: row.session_id,
    state: row.state,
    attemptCount: Number(row.attempt_count),
    maxAttempts: Number(row.max_attempts),
    deadlineAtMs: Number(row.deadline_at_ms),
    nextAttemptAtMs: Number(row.next_attempt_at_ms),
    leaseGeneration: Number(row.lease_generation),
    runtimeId: row.runtime_id,
    lastError: row.last_error,
  };
}
