/**
 * The session execution queue over SQL (SQLite and Postgres, one query set):
 * which server process runs a session's next brain turn.
 *
 * A row per session; `state` is `idle`, `pending` (needs a turn) or `running`
 * (claimed: a lease). Every transition is ONE conditional statement whose
 * WHERE clause is the whole decision, so two processes can never both win:
 *  - request: an upsert in the transaction that appends the user event; it
 *    bumps `requested_version`, and moves idle → pending; it keeps the W3C
 *    trace context of the first request since the last claim (the turn that
 *    serves several coalesced requests continues the first one's trace);
 *  - claim: an UPDATE of one claimable row (pending and due, or running with
 *    an expired lease) to running, with a new owner id, a new token (stored
 *    hashed) and an expiry; the previous holder's token can never match again;
 *  - renew: an UPDATE matching owner + token hash + unexpired;
 *  - release: an UPDATE matching owner + token hash, back to idle, or straight
 *    back to pending when input arrived during the turn (`requested_version`
 *    moved past `claimed_version`) or the caller asks for it.
 * Only this module writes the table; the API calls `requestTurn` in its
 * transactions, the worker everything else.
 */
import { type Database, hashSecret, newId, newSecret, type SessionExecutionRow } from "@openma/storage";
import { type ExpressionBuilder, type Kysely, sql, type Transaction, type UpdateObject } from "kysely";

/** Bus topic published after a session became pending (wakes every worker). */
export const EXECUTION_TOPIC = "execution:pending";

/** Keep stored error texts bounded: they come from arbitrary exceptions. */
const MAX_ERROR_LENGTH = 1000;

type Db = Kysely<Database> | Transaction<Database>;

/** A held execution lease. The token is the only proof of ownership; only its hash is stored. */
export interface ExecutionClaim {
  sessionId: string;
  ownerId: string;
  token: string;
  generation: number;
  /** Epoch ms (the claimer's clock). */
  expiresAt: number;
  /** Claims of this row since it last settled, this one included. */
  attempts: number;
  /** W3C trace context of the request that queued the turn (null when tracing was off there). */
  traceparent: string | null;
}

/**
 * Marks the session as needing a turn, inside the transaction that appends
 * the user event (so the event and the request commit together or not at
 * all). Publish `EXECUTION_TOPIC` after the commit. `traceparent` is the
 * requesting span's W3C trace context, when tracing is on.
 */
export async function requestTurn(
  trx: Transaction<Database>,
  sessionId: string,
  nowMs: number,
  traceparent: string | null = null,
): Promise<void> {
  await trx
    .insertInto("session_executions")
    .values({
      session_id: sessionId,
      state: "pending",
      requested_version: 1,
      claimed_version: 0,
      requested_at_ms: nowMs,
      available_at_ms: 0,
      generation: 0,
      owner_id: null,
      token_hash: null,
      expires_at_ms: 0,
      claimed_at_ms: null,
      attempts: 0,
      last_error: null,
      traceparent,
    })
    .onConflict((oc) =>
      oc.column("session_id").doUpdateSet({
        requested_version: sql<number>`session_executions.requested_version + 1`,
        // A running row stays running: its release sees the new version and goes back to pending.
        state: sql<string>`case when session_executions.state = 'idle' then 'pending' else session_executions.state end`,
        requested_at_ms: sql<number>`case when session_executions.state = 'idle' then ${nowMs} else session_executions.requested_at_ms end`,
        // New input is a new chance: a backoff from an earlier failure no longer applies.
        available_at_ms: 0,
        attempts: sql<number>`case when session_executions.state = 'idle' then 0 else session_executions.attempts end`,
        // The first request since the last claim names the next turn's trace: an idle row, or a running one
        // no request reached since its claim. A pending row (or a running one already asked again) keeps its own.
        traceparent: sql<string | null>`case when session_executions.state = 'idle'
          or (session_executions.state = 'running' and session_executions.requested_version = session_executions.claimed_version)
          then excluded.traceparent else session_executions.traceparent end`,
      }),
    )
    .execute();
}

/** Removes the session's row (session deletion); a running holder then loses its lease at the next renewal. */
export async function forgetSession(trx: Transaction<Database>, sessionId: string): Promise<void> {
  await trx.deleteFrom("session_executions").where("session_id", "=", sessionId).execute();
}

function claimable(eb: ExpressionBuilder<Database, "session_executions">, nowMs: number) {
  return eb.or([
    eb.and([eb("state", "=", "pending"), eb("available_at_ms", "<=", nowMs)]),
    // A crashed or partitioned holder: its lease ran out, the turn is re-run from the log.
    eb.and([eb("state", "=", "running"), eb("expires_at_ms", "<=", nowMs)]),
  ]);
}

export interface ClaimOptions {
  nowMs: number;
  ttlMs: number;
  /** Owner id prefix (e.g. the process); a unique suffix makes it per attempt. */
  ownerPrefix?: string;
  /** Opaque token factory (tests may inject one). */
  newToken?: () => string;
}

/**
 * Claims the oldest claimable session with one conditional UPDATE, or returns
 * null when there is none (or a concurrent claimer took the candidate: the
 * caller simply tries again on its next wake-up). On Postgres the candidate is
 * picked with SKIP LOCKED so concurrent claimers spread over different rows.
 */
export async function claimNext(db: Kysely<Database>, dialect: "sqlite" | "postgres", opts: ClaimOptions): Promise<ExecutionClaim | null> {
  const { nowMs, ttlMs } = opts;
  if (!(Number.isSafeInteger(ttlMs) && ttlMs > 0)) throw new RangeError("ttlMs must be a positive integer");
  const ownerId = `${opts.ownerPrefix ?? "exec"}:${newId("exo")}`;
  const token = (opts.newToken ?? (() => newSecret("sxt_")))();
  let candidate = db
    .selectFrom("session_executions")
    .select("session_id")
    .where((eb) => claimable(eb, nowMs))
    .orderBy("requested_at_ms")
    .orderBy("session_id")
    .limit(1);
  if (dialect === "postgres") candidate = candidate.forUpdate().skipLocked();
  const row = await db
    .updateTable("session_executions")
    .set({
      state: "running",
      owner_id: ownerId,
      token_hash: hashSecret(token),
      expires_at_ms: nowMs + ttlMs,
      claimed_at_ms: nowMs,
      generation: sql<number>`generation + 1`,
      claimed_version: sql<number>`requested_version`,
      attempts: sql<number>`attempts + 1`,
    })
    // A scalar subquery (an InitPlan on Postgres) runs once: with `in (…)` Postgres may re-run it per
    // scanned row and claim several rows in one statement.
    .where("session_id", "=", candidate)
    // Repeated outside the subquery: this is the condition the UPDATE itself re-checks on the locked row.
    .where((eb) => claimable(eb, nowMs))
    .returning(["session_id", "generation", "expires_at_ms", "attempts", "traceparent"])
    .executeTakeFirst();
  if (!row) return null;
  return {
    sessionId: row.session_id,
    ownerId,
    token,
    generation: row.generation,
    expiresAt: row.expires_at_ms,
    attempts: row.attempts,
    traceparent: row.traceparent ?? null,
  };
}

function heldBy(eb: ExpressionBuilder<Database, "session_executions">, claim: ExecutionClaim) {
  return eb.and([
    eb("session_id", "=", claim.sessionId),
    eb("owner_id", "=", claim.ownerId),
    eb("token_hash", "=", hashSecret(claim.token)),
    eb("state", "=", "running"),
  ]);
}

/** Extends the lease; null when it is no longer ours (reclaimed, expired, released or the session deleted). */
export async function renewClaim(db: Db, claim: ExecutionClaim, nowMs: number, ttlMs: number): Promise<number | null> {
  const row = await db
    .updateTable("session_executions")
    .set({ expires_at_ms: nowMs + ttlMs })
    .where((eb) => heldBy(eb, claim))
    .where("expires_at_ms", ">", nowMs)
    .returning("expires_at_ms")
    .executeTakeFirst();
  return row ? row.expires_at_ms : null;
}

/**
 * How a finished attempt leaves the row:
 *  - `settle`: the turn is done; idle, unless input arrived meanwhile (then pending);
 *  - `requeue`: pending again at once (interrupt, input the runner reports unanswered);
 *  - `hand_back`: pending again at once, and this attempt does not count (graceful shutdown);
 *  - `retry`: the attempt failed; pending again from `availableAtMs`, keeping the attempt count;
 *  - `give_up`: idle even though the session may still want a turn (too many failed attempts).
 */
export type ReleaseDisposition =
  | { type: "settle" }
  | { type: "requeue" }
  | { type: "hand_back" }
  | { type: "retry"; availableAtMs: number; error: string }
  | { type: "give_up"; error: string };

/** Ends the lease as `disposition` says. Returns the state written, or null when the lease was not ours any more. */
export async function releaseClaim(db: Db, claim: ExecutionClaim, disposition: ReleaseDisposition): Promise<"idle" | "pending" | null> {
  const newInput = sql<boolean>`requested_version > claimed_version`;
  // The owner id stays as a record of who ran the last attempt; without a token hash nothing can match it.
  const common = { token_hash: null, expires_at_ms: 0 } as const;
  let set: UpdateObject<Database, "session_executions">;
  switch (disposition.type) {
    case "settle":
      set = {
        ...common,
        state: sql<string>`case when ${newInput} then 'pending' else 'idle' end`,
        attempts: 0,
        available_at_ms: 0,
        last_error: null,
      };
      break;
    case "requeue":
      // Attempts are kept unless new input arrived: a runner that keeps asking for turns without progress is bounded.
      set = { ...common, state: "pending", attempts: sql<number>`case when ${newInput} then 0 else attempts end`, available_at_ms: 0 };
      break;
    case "hand_back":
      set = { ...common, state: "pending", attempts: sql<number>`case when attempts > 0 then attempts - 1 else 0 end`, available_at_ms: 0 };
      break;
    case "retry":
      set = { ...common, state: "pending", available_at_ms: disposition.availableAtMs, last_error: bounded(disposition.error) };
      break;
    case "give_up":
      set = { ...common, state: "idle", attempts: 0, available_at_ms: 0, last_error: bounded(disposition.error) };
      break;
  }
  const row = await db
    .updateTable("session_executions")
    .set(set)
    .where((eb) => heldBy(eb, claim))
    .returning("state")
    .executeTakeFirst();
  return row ? (row.state as "idle" | "pending") : null;
}

function bounded(text: string): string {
  return text.length > MAX_ERROR_LENGTH ? `${text.slice(0, MAX_ERROR_LENGTH - 1)}…` : text;
}

/** The row of a session, for tests and diagnostics (never exposes a token: only its hash is stored). */
export async function executionRow(db: Db, sessionId: string): Promise<SessionExecutionRow | undefined> {
  return db.selectFrom("session_executions").selectAll().where("session_id", "=", sessionId).executeTakeFirst();
}
