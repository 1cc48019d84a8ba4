/**
 * SandboxOwnershipPort over SQL (one query set, SQLite and Postgres). Every
 * transition a reaper and an owner can race on is one conditional statement:
 * `renew` and `touch` only move a record that is still live, `takeOver` only
 * deletes one that is not, so exactly one of them wins.
 */
import {
  canonicalJson,
  isRuntimeIdentifier,
  isRuntimeResourceScope,
  type ManagedSandboxLease,
  type RuntimeResourceScope,
  type SandboxDriverStats,
  type SandboxOwnerClaimInput,
  type SandboxOwnerRecord,
  type SandboxOwnerRenewResult,
  type SandboxOwnershipPort,
  sandboxLeaseIssues,
  WARM_POOL_SESSION_PREFIX,
} from "@openma/contract";
import { type Kysely, sql } from "kysely";
import type { Clock } from "./clock.ts";
import type { Database, SandboxOwnerRow } from "./schema.ts";

const MAX_TTL_MS = 7 * 86_400_000;

/** This database's deployment id (made by migration 0007). */
export async function deploymentId(db: Kysely<Database>): Promise<string> {
  const row = await db.selectFrom("openma_deployment").select("id").orderBy("id").executeTakeFirstOrThrow();
  return row.id;
}

function assertMs(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 1 || value > MAX_TTL_MS)
    throw new TypeError(`${name}: must be an integer between 1 and ${MAX_TTL_MS}`);
}

function assertLimit(limit: number): void {
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > 1000) throw new TypeError("limit: must be between 1 and 1000");
}

function assertId(id: string): void {
  if (!isRuntimeIdentifier(id)) throw new TypeError("id: must be a non-empty identifier");
}

export class SqlSandboxOwnership implements SandboxOwnershipPort {
  readonly #db: Kysely<Database>;
  readonly #clock: Clock;

  constructor(db: Kysely<Database>, options: { clock: Clock }) {
    this.#db = db;
    this.#clock = options.clock;
  }

  async claim(input: SandboxOwnerClaimInput): Promise<SandboxOwnerRecord> {
    const { id, scope, driver, deployment, leaseTtlMs, idleMs, signal } = input;
    assertId(id);
    if (!isRuntimeResourceScope(scope)) throw new TypeError("scope: environmentId and sessionId must be non-empty identifiers");
    if (!isRuntimeIdentifier(driver) || !isRuntimeIdentifier(deployment)) throw new TypeError("driver and deployment must be identifiers");
    assertMs("leaseTtlMs", leaseTtlMs);
    assertMs("idleMs", idleMs);
    signal.throwIfAborted();
    const now = this.#clock.now();
    const row: SandboxOwnerRow = {
      id,
      deployment,
      driver,
      environment_id: scope.environmentId,
      session_id: scope.sessionId,
      provider_id: null,
      lease: null,
      created_at_ms: now,
      last_used_at_ms: now,
      idle_deadline_at_ms: now + idleMs,
      lease_expires_at_ms: now + leaseTtlMs,
    };
    await this.#db.insertInto("sandbox_owners").values(row).execute();
    return recordFrom(row);
  }

  async attach(input: { id: string; lease: ManagedSandboxLease; signal: AbortSignal }): Promise<boolean> {
    const issues = sandboxLeaseIssues(input.lease);
    if (issues.length > 0) throw new TypeError(`invalid lease: ${issues.join("; ")}`);
    input.signal.throwIfAborted();
    const result = await this.#db
      .updateTable("sandbox_owners")
      .set({ provider_id: input.lease.runtimeId, lease: canonicalJson(input.lease) })
      .where("id", "=", input.id)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  }

  async renew(input: { id: string; leaseTtlMs: number; signal: AbortSignal }): Promise<SandboxOwnerRenewResult> {
    assertMs("leaseTtlMs", input.leaseTtlMs);
    input.signal.throwIfAborted();
    const now = this.#clock.now();
    const expiresAt = now + input.leaseTtlMs;
    const result = await this.#db
      .updateTable("sandbox_owners")
      .set({ lease_expires_at_ms: expiresAt })
      .where("id", "=", input.id)
      .where("lease_expires_at_ms", ">", now)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) > 0 ? { type: "renewed", expiresAt } : { type: "lost" };
  }

  async touch(input: { id: string; idleMs: number; signal: AbortSignal }): Promise<boolean> {
    assertMs("idleMs", input.idleMs);
    input.signal.throwIfAborted();
    const now = this.#clock.now();
    const result = await this.#db
      .updateTable("sandbox_owners")
      .set({ last_used_at_ms: now, idle_deadline_at_ms: now + input.idleMs })
      .where("id", "=", input.id)
      .where("lease_expires_at_ms", ">", now)
      .where("idle_deadline_at_ms", ">", now)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  }

  async rebind(input: { id: string; scope: RuntimeResourceScope; idleMs: number; signal: AbortSignal }): Promise<boolean> {
    if (!isRuntimeResourceScope(input.scope)) throw new TypeError("scope: environmentId and sessionId must be non-empty identifiers");
    assertMs("idleMs", input.idleMs);
    input.signal.throwIfAborted();
    const now = this.#clock.now();
    const result = await this.#db
      .updateTable("sandbox_owners")
      .set({
        environment_id: input.scope.environmentId,
        session_id: input.scope.sessionId,
        last_used_at_ms: now,
        idle_deadline_at_ms: now + input.idleMs,
      })
      .where("id", "=", input.id)
      .where("lease_expires_at_ms", ">", now)
      .where("idle_deadline_at_ms", ">", now)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) > 0;
  }

  async abandon(input: { id: string; signal: AbortSignal }): Promise<void> {
    input.signal.throwIfAborted();
    await this.#db.updateTable("sandbox_owners").set({ lease_expires_at_ms: 0 }).where("id", "=", input.id).execute();
  }

  async release(input: { id: string; signal: AbortSignal }): Promise<void> {
    input.signal.throwIfAborted();
    await this.#db.deleteFrom("sandbox_owners").where("id", "=", input.id).execute();
  }

  async get(input: { ids: readonly string[]; signal: AbortSignal }): Promise<SandboxOwnerRecord[]> {
    input.signal.throwIfAborted();
    if (input.ids.length === 0) return [];
    const rows = await this.#db
      .selectFrom("sandbox_owners")
      .selectAll()
      .where("id", "in", [...input.ids])
      .execute();
    return rows.map(recordFrom);
  }

  async takeOver(input: { id: string; signal: AbortSignal }): Promise<"taken" | "live" | "absent"> {
    input.signal.throwIfAborted();
    const now = this.#clock.now();
    const result = await this.#db
      .deleteFrom("sandbox_owners")
      .where("id", "=", input.id)
      .where((eb) => eb.or([eb("lease_expires_at_ms", "<=", now), eb("idle_deadline_at_ms", "<=", now)]))
      .executeTakeFirst();
    if (Number(result.numDeletedRows) > 0) return "taken";
    const still = await this.#db.selectFrom("sandbox_owners").select("id").where("id", "=", input.id).executeTakeFirst();
    return still ? "live" : "absent";
  }

  async listStale(input: { deployment: string; driver: string; limit: number; signal: AbortSignal }): Promise<SandboxOwnerRecord[]> {
    assertLimit(input.limit);
    input.signal.throwIfAborted();
    const now = this.#clock.now();
    const rows = await this.#db
      .selectFrom("sandbox_owners")
      .selectAll()
      .where("deployment", "=", input.deployment)
      .where("driver", "=", input.driver)
      .where((eb) => eb.or([eb("lease_expires_at_ms", "<=", now), eb("idle_deadline_at_ms", "<=", now)]))
      .orderBy("created_at_ms")
      .orderBy("id")
      .limit(input.limit)
      .execute();
    return rows.map(recordFrom);
  }

  /**
   * Every record of a deployment and driver, live or not, oldest first: for
   * an owner that judges its records itself (a runtime host's next process
   * reaps all of its predecessor's, ADR 0028).
   */
  async listAll(input: { deployment: string; driver: string; limit: number; signal: AbortSignal }): Promise<SandboxOwnerRecord[]> {
    assertLimit(input.limit);
    input.signal.throwIfAborted();
    const rows = await this.#db
      .selectFrom("sandbox_owners")
      .selectAll()
      .where("deployment", "=", input.deployment)
      .where("driver", "=", input.driver)
      .orderBy("created_at_ms")
      .orderBy("id")
      .limit(input.limit)
      .execute();
    return rows.map(recordFrom);
  }

  async stats(input: { deployment: string; environmentId?: string; signal: AbortSignal }): Promise<SandboxDriverStats[]> {
    input.signal.throwIfAborted();
    const now = this.#clock.now();
    let owned = this.#db
      .selectFrom("sandbox_owners")
      .select((eb) => [
        "driver",
        eb.fn.countAll<number>().as("owned"),
        eb.fn.sum<number>(sql<number>`case when ${eb.ref("idle_deadline_at_ms")} <= ${now} then 1 else 0 end`).as("idle"),
        // A prefix match on a bound parameter: `%` and `_` cannot occur in the constant prefix.
        eb.fn
          .sum<number>(sql<number>`case when ${eb.ref("session_id")} like ${`${WARM_POOL_SESSION_PREFIX}%`} then 1 else 0 end`)
          .as("pooled"),
      ])
      .where("deployment", "=", input.deployment)
      .where("lease_expires_at_ms", ">", now)
      .groupBy("driver");
    let orphaned = this.#db
      .selectFrom("runtime_orphans")
      .select((eb) => ["provider", eb.fn.countAll<number>().as("orphaned")])
      .where("state", "in", ["pending", "dead_letter"])
      .groupBy("provider");
    if (input.environmentId !== undefined) {
      owned = owned.where("environment_id", "=", input.environmentId);
      orphaned = orphaned.where("environment_id", "=", input.environmentId);
    }
    const byDriver = new Map<string, SandboxDriverStats>();
    for (const row of await owned.execute())
      byDriver.set(row.driver, {
        driver: row.driver,
        owned: Number(row.owned),
        idle: Number(row.idle ?? 0),
        orphaned: 0,
        pooled: Number(row.pooled ?? 0),
      });
    for (const row of await orphaned.execute()) {
      const entry = byDriver.get(row.provider) ?? { driver: row.provider, owned: 0, idle: 0, orphaned: 0, pooled: 0 };
      entry.orphaned = Number(row.orphaned);
      byDriver.set(row.provider, entry);
    }
    return [...byDriver.values()].sort((a, b) => a.driver.localeCompare(b.driver));
  }
}

function recordFrom(row: SandboxOwnerRow): SandboxOwnerRecord {
  return {
    id: row.id,
    scope: { environmentId: row.environment_id, sessionId: row.session_id },
    driver: row.driver,
    deployment: row.deployment,
    lease: row.lease === null ? null : (JSON.parse(row.lease) as ManagedSandboxLease),
    createdAt: Number(row.created_at_ms),
    lastUsedAt: Number(row.last_used_at_ms),
    idleDeadlineAt: Number(row.idle_deadline_at_ms),
    leaseExpiresAt: Number(row.lease_expires_at_ms),
  };
}
