/**
 * RuntimeResourceFencePort over SQL (SQLite and Postgres, one query set).
 *
 * Each transition is ONE conditional statement whose WHERE clause is the
 * whole correctness decision, so it is atomic on both engines without locks
 * or a prior SELECT: acquire is an upsert that only overwrites an expired or
 * released holder; renew, release and publish match scope + generation +
 * owner + token hash (+ unexpired). Follow-up SELECTs only explain a refusal.
 *
 * Unlike the reference implementation, every successful acquire gets a new
 * generation and a new token, even for an owner id seen before: owner ids are
 * per attempt, and two attempts never share a fence. Only a SHA-256 of the
 * token is stored. See docs/adr/0002-runtime-fence.md.
 */
import {
  type ActivePublication,
  canonicalJson,
  type FenceAcquireResult,
  type FencePublishResult,
  type FenceReleaseResult,
  type FenceRenewResult,
  type FenceStaleReason,
  isRuntimeIdentifier,
  isRuntimeResourceScope,
  type PublicationPointers,
  type PublicationRecord,
  publicationPointerIssues,
  type RuntimeResourceFence,
  type RuntimeResourceFencePort,
  type RuntimeResourceScope,
  runtimeScopeKey,
} from "@openma/contract";
import { type ExpressionBuilder, type Kysely, sql } from "kysely";
import { sha256Hex } from "./blobs.ts";
import type { Clock } from "./clock.ts";
import { hashSecret, newSecret } from "./ids.ts";
import type { Database, RuntimeFenceRow, RuntimePublicationRow } from "./schema.ts";

/** A fence lease longer than a day is a configuration mistake. */
export const MAX_FENCE_TTL_MS = 86_400_000;
const MAX_TOKEN_LENGTH = 512;
const MAX_HISTORY_PAGE = 1000;

export interface SqlRuntimeResourceFenceOptions {
  clock: Clock;
  /** Opaque token factory (tests inject a deterministic one). */
  newToken?: () => string;
}

type PointerColumns = Pick<RuntimeFenceRow, "workspace_ref" | "outputs_ref" | "runtime_checkpoint_ref">;

export class SqlRuntimeResourceFence implements RuntimeResourceFencePort {
  readonly #db: Kysely<Database>;
  readonly #clock: Clock;
  readonly #newToken: () => string;

  constructor(db: Kysely<Database>, options: SqlRuntimeResourceFenceOptions) {
    this.#db = db;
    this.#clock = options.clock;
    this.#newToken = options.newToken ?? (() => newSecret("rtf_"));
  }

  async acquire(input: { scope: RuntimeResourceScope; ownerId: string; ttlMs: number; signal: AbortSignal }): Promise<FenceAcquireResult> {
    const { scope, ownerId, ttlMs, signal } = input;
    assertScope(scope);
    if (!isRuntimeIdentifier(ownerId)) throw new TypeError("ownerId: must be a non-empty identifier");
    assertTtl(ttlMs);
    signal.throwIfAborted();
    const now = this.#clock.now();
    const token = this.#newToken();
    if (token.length === 0 || token.length > MAX_TOKEN_LENGTH) throw new TypeError("token factory returned an invalid token");
    const scopeKey = runtimeScopeKey(scope);
    const row = await this.#db
      .insertInto("runtime_fences")
      .values({
        scope_key: scopeKey,
        environment_id: scope.environmentId,
        session_id: scope.sessionId,
        generation: 1,
        owner_id: ownerId,
        token_hash: hashSecret(token),
        acquired_at_ms: now,
        expires_at_ms: now + ttlMs,
        released_at_ms: null,
        revision: 0,
        published_generation: null,
        published_at_ms: null,
        workspace_ref: null,
        outputs_ref: null,
        runtime_checkpoint_ref: null,
      })
      .onConflict((oc) =>
        oc
          .column("scope_key")
          .doUpdateSet((eb) => ({
            // Every takeover is a new generation: the previous holder's token can never match again.
            generation: sql<number>`runtime_fences.generation + 1`,
            owner_id: eb.ref("excluded.owner_id"),
            token_hash: eb.ref("excluded.token_hash"),
            acquired_at_ms: eb.ref("excluded.acquired_at_ms"),
            expires_at_ms: eb.ref("excluded.expires_at_ms"),
            released_at_ms: null,
          }))
          // The whole decision: only an expired (or released, expiry 0) holder can be replaced.
          .where("runtime_fences.expires_at_ms", "<=", now),
      )
      .returningAll()
      .executeTakeFirst();
    if (!row) {
      const holder = await this.#db
        .selectFrom("runtime_fences")
        .select("expires_at_ms")
        .where("scope_key", "=", scopeKey)
        .executeTakeFirst();
      return { type: "conflict", holderExpiresAt: holder?.expires_at_ms ?? now };
    }
    return {
      type: "acquired",
      fence: { scope: { ...scope }, ownerId, generation: row.generation, token, expiresAt: row.expires_at_ms },
      active: activeFrom(row),
    };
  }

  async renew(input: { fence: RuntimeResourceFence; ttlMs: number; signal: AbortSignal }): Promise<FenceRenewResult> {
    const { fence, ttlMs, signal } = input;
    assertFence(fence);
    assertTtl(ttlMs);
    signal.throwIfAborted();
    const now = this.#clock.now();
    const row = await this.#db
      .updateTable("runtime_fences")
      .set({ expires_at_ms: now + ttlMs })
      .where(currentFence(fence))
      .where("expires_at_ms", ">", now)
      .returning("expires_at_ms")
      .executeTakeFirst();
    if (row) return { type: "renewed", fence: { ...fence, expiresAt: row.expires_at_ms } };
    return { type: "stale", reason: (await this.#staleReason(fence, now)) ?? "expired" };
  }

  async isCurrent(input: { fence: RuntimeResourceFence; signal: AbortSignal }): Promise<boolean> {
    assertFence(input.fence);
    input.signal.throwIfAborted();
    return (await this.#staleReason(input.fence, this.#clock.now())) === null;
  }

  async publish(input: {
    fence: RuntimeResourceFence;
    pointers: PublicationPointers;
    idempotencyKey: string;
    signal: AbortSignal;
  }): Promise<FencePublishResult> {
    const { fence, pointers, idempotencyKey, signal } = input;
    assertFence(fence);
    if (!isRuntimeIdentifier(idempotencyKey)) throw new TypeError("idempotencyKey: must be a non-empty identifier");
    const issues = publicationPointerIssues(pointers);
    if (issues.length > 0) throw new TypeError(`invalid publication: ${issues.join("; ")}`);
    const digest = sha256Hex(canonicalJson(pointers));
    signal.throwIfAborted();
    const now = this.#clock.now();
    const published = await this.#compareAndPublish(fence, pointers, idempotencyKey, digest, now);
    if (published) return { type: "published", publication: published, replayed: false };
    return this.#explainRefusedPublish(fence, idempotencyKey, digest, now);
  }

  async release(input: { fence: RuntimeResourceFence; signal: AbortSignal }): Promise<FenceReleaseResult> {
    const { fence, signal } = input;
    assertFence(fence);
    signal.throwIfAborted();
    const now = this.#clock.now();
    // No expiry condition: releasing an expired but not yet replaced generation is harmless and lets
    // the next owner start at once. Matching the generation keeps a late release off a newer holder.
    const row = await this.#db
      .updateTable("runtime_fences")
      .set({ expires_at_ms: 0, released_at_ms: sql<number>`coalesce(released_at_ms, ${now})` })
      .where(currentFence(fence))
      .returning("generation")
      .executeTakeFirst();
    if (row) return { type: "released" };
    return { type: "stale", reason: (await this.#staleReason(fence, now)) ?? "token_mismatch" };
  }

  async active(input: { scope: RuntimeResourceScope; signal: AbortSignal }): Promise<ActivePublication | null> {
    assertScope(input.scope);
    input.signal.throwIfAborted();
    const row = await this.#db
      .selectFrom("runtime_fences")
      .selectAll()
      .where("scope_key", "=", runtimeScopeKey(input.scope))
      .executeTakeFirst();
    return row ? activeFrom(row) : null;
  }

  async history(input: {
    scope: RuntimeResourceScope;
    beforeRevision?: number;
    limit: number;
    signal: AbortSignal;
  }): Promise<PublicationRecord[]> {
    const { scope, beforeRevision, limit, signal } = input;
    assertScope(scope);
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_HISTORY_PAGE)
      throw new TypeError(`limit: must be an integer between 1 and ${MAX_HISTORY_PAGE}`);
    if (beforeRevision !== undefined && !Number.isSafeInteger(beforeRevision)) throw new TypeError("beforeRevision: must be an integer");
    signal.throwIfAborted();
    let query = this.#db.selectFrom("runtime_publications").selectAll().where("scope_key", "=", runtimeScopeKey(scope));
    if (beforeRevision !== undefined) query = query.where("revision", "<", beforeRevision);
    const rows = await query.orderBy("revision", "desc").limit(limit).execute();
    return rows.map(recordFrom);
  }

  /**
   * The single compare-and-set: the UPDATE's WHERE checks the fence (scope,
   * generation, owner, token hash, unexpired) and that the key was never
   * used; the history row is written in the same transaction. A unique
   * violation on the key means a concurrent twin won; the caller explains.
   */
  async #compareAndPublish(
    fence: RuntimeResourceFence,
    pointers: PublicationPointers,
    idempotencyKey: string,
    digest: string,
    now: number,
  ): Promise<ActivePublication | null> {
    const scopeKey = runtimeScopeKey(fence.scope);
    try {
      return await this.#db.transaction().execute(async (trx) => {
        const row = await trx
          .updateTable("runtime_fences")
          .set({
            ...pointerColumns(pointers),
            revision: sql<number>`revision + 1`,
            published_generation: fence.generation,
            published_at_ms: now,
          })
          .where(currentFence(fence))
          .where("expires_at_ms", ">", now)
          .where(({ not, exists, selectFrom }) =>
            not(
              exists(
                selectFrom("runtime_publications")
                  .select("runtime_publications.revision")
                  .where("runtime_publications.scope_key", "=", scopeKey)
                  .where("runtime_publications.idempotency_key", "=", idempotencyKey),
              ),
            ),
          )
          .returningAll()
          .executeTakeFirst();
        if (!row) return null;
        await trx
          .insertInto("runtime_publications")
          .values({
            scope_key: scopeKey,
            revision: row.revision,
            generation: fence.generation,
            owner_id: fence.ownerId,
            idempotency_key: idempotencyKey,
            request_digest: digest,
            workspace_ref: row.workspace_ref,
            outputs_ref: row.outputs_ref,
            runtime_checkpoint_ref: row.runtime_checkpoint_ref,
            published_at_ms: now,
          })
          .execute();
        return activeFrom(row);
      });
    } catch (err) {
      if (isUniqueViolation(err)) return null;
      throw err;
    }
  }

  /** One read explains a refusal: the fence state and the key's history row in one snapshot. */
  async #explainRefusedPublish(
    fence: RuntimeResourceFence,
    idempotencyKey: string,
    digest: string,
    now: number,
  ): Promise<FencePublishResult> {
    const scopeKey = runtimeScopeKey(fence.scope);
    const row = await this.#db
      .selectFrom("runtime_fences as f")
      .leftJoin("runtime_publications as p", (join) =>
        join.onRef("p.scope_key", "=", "f.scope_key").on("p.idempotency_key", "=", idempotencyKey),
      )
      .select([
        "f.generation",
        "f.owner_id",
        "f.token_hash",
        "f.expires_at_ms",
        "f.released_at_ms",
        "p.revision as p_revision",
        "p.generation as p_generation",
        "p.owner_id as p_owner_id",
        "p.request_digest as p_digest",
        "p.workspace_ref as p_workspace_ref",
        "p.outputs_ref as p_outputs_ref",
        "p.runtime_checkpoint_ref as p_runtime_checkpoint_ref",
        "p.published_at_ms as p_published_at_ms",
      ])
      .where("f.scope_key", "=", scopeKey)
      .executeTakeFirst();
    // A replay is honoured only while the fence is still current: a stale owner learns nothing but "stale".
    const stale = staleReasonOf(row, fence, now);
    if (stale !== null) return { type: "stale", reason: stale };
    const history = row as NonNullable<typeof row>;
    if (history.p_revision === null) {
      // Current fence, unused key, yet the CAS matched nothing: a concurrent transition raced us. Fail closed.
      return { type: "stale", reason: "expired" };
    }
    if (history.p_generation !== fence.generation || history.p_digest !== digest)
      return { type: "conflict", reason: "idempotency_key_reused" };
    return {
      type: "published",
      replayed: true,
      publication: {
        revision: history.p_revision,
        generation: history.p_generation,
        publishedAt: history.p_published_at_ms as number,
        ...pointersFrom({
          workspace_ref: history.p_workspace_ref,
          outputs_ref: history.p_outputs_ref,
          runtime_checkpoint_ref: history.p_runtime_checkpoint_ref,
        }),
      },
    };
  }

  async #staleReason(fence: RuntimeResourceFence, now: number): Promise<FenceStaleReason | null> {
    const row = await this.#db
      .selectFrom("runtime_fences")
      .select(["generation", "owner_id", "token_hash", "expires_at_ms", "released_at_ms"])
      .where("scope_key", "=", runtimeScopeKey(fence.scope))
      .executeTakeFirst();
    return staleReasonOf(row, fence, now);
  }
}

type FenceState = Pick<RuntimeFenceRow, "generation" | "owner_id" | "token_hash" | "expires_at_ms" | "released_at_ms">;

/** `null` when the fence is current; otherwise why not. Pure, so every refusal is explained the same way. */
function staleReasonOf(row: FenceState | undefined, fence: RuntimeResourceFence, now: number): FenceStaleReason | null {
  if (!row) return "unknown_scope";
  // A generation from the future can only be forged.
  if (row.generation !== fence.generation) return row.generation > fence.generation ? "superseded" : "token_mismatch";
  if (row.owner_id !== fence.ownerId || row.token_hash !== hashSecret(fence.token)) return "token_mismatch";
  if (row.released_at_ms !== null) return "released";
  if (row.expires_at_ms <= now) return "expired";
  return null;
}

/** WHERE term identifying exactly this fence (the expiry term is added where it matters). */
function currentFence(fence: RuntimeResourceFence) {
  const tokenHash = hashSecret(fence.token);
  return (eb: ExpressionBuilder<Database, "runtime_fences">) =>
    eb.and([
      eb("scope_key", "=", runtimeScopeKey(fence.scope)),
      eb("generation", "=", fence.generation),
      eb("owner_id", "=", fence.ownerId),
      eb("token_hash", "=", tokenHash),
    ]);
}

function pointerColumns(pointers: PublicationPointers): Partial<PointerColumns> {
  const columns: Partial<PointerColumns> = {};
  if (pointers.workspace !== undefined) columns.workspace_ref = encodeRef(pointers.workspace);
  if (pointers.outputs !== undefined) columns.outputs_ref = encodeRef(pointers.outputs);
  if (pointers.runtimeCheckpoint !== undefined) columns.runtime_checkpoint_ref = encodeRef(pointers.runtimeCheckpoint);
  return columns;
}

function encodeRef(value: object | null): string | null {
  return value === null ? null : canonicalJson(value);
}

function pointersFrom(row: PointerColumns): Pick<ActivePublication, "workspace" | "outputs" | "runtimeCheckpoint"> {
  return {
    workspace: row.workspace_ref === null ? null : JSON.parse(row.workspace_ref),
    outputs: row.outputs_ref === null ? null : JSON.parse(row.outputs_ref),
    runtimeCheckpoint: row.runtime_checkpoint_ref === null ? null : JSON.parse(row.runtime_checkpoint_ref),
  };
}

function activeFrom(row: RuntimeFenceRow): ActivePublication | null {
  if (row.revision === 0 || row.published_generation === null || row.published_at_ms === null) return null;
  return { revision: row.revision, generation: row.published_generation, publishedAt: row.published_at_ms, ...pointersFrom(row) };
}

function recordFrom(row: RuntimePublicationRow): PublicationRecord {
  return {
    revision: row.revision,
    generation: row.generation,
    publishedAt: row.published_at_ms,
    ownerId: row.owner_id,
    idempotencyKey: row.idempotency_key,
    ...pointersFrom(row),
  };
}

function assertScope(scope: RuntimeResourceScope): void {
  if (!isRuntimeResourceScope(scope)) throw new TypeError("scope: environmentId and sessionId must be non-empty identifiers");
}

function assertTtl(ttlMs: number): void {
  if (!Number.isInteger(ttlMs) || ttlMs < 1 || ttlMs > MAX_FENCE_TTL_MS)
    throw new TypeError(`ttlMs: must be an integer between 1 and ${MAX_FENCE_TTL_MS}`);
}

function assertFence(fence: RuntimeResourceFence): void {
  assertScope(fence.scope);
  if (!isRuntimeIdentifier(fence.ownerId)) throw new TypeError("fence.ownerId: must be a non-empty identifier");
  if (!Number.isSafeInteger(fence.generation) || fence.generation < 1) throw new TypeError("fence.generation: must be a positive integer");
  if (typeof fence.token !== "string" || fence.token.length === 0 || fence.token.length > MAX_TOKEN_LENGTH) {
    throw new TypeError("fence.token: must be a non-empty string");
  }
}

/** Postgres 23505, SQLite SQLITE_CONSTRAINT_UNIQUE / _PRIMARYKEY. */
function isUniqueViolation(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === "23505" || code === "SQLITE_CONSTRAINT_UNIQUE" || code === "SQLITE_CONSTRAINT_PRIMARYKEY";
}
