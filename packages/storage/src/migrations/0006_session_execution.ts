/**
 * Session execution queue (the brain's scheduling authority, see
 * packages/execution) and the self-hosted "served" watermark:
 *  - `session_executions`: one row per session that ever needed a turn.
 *    `state` is idle | pending | running; a running row is a lease (owner id
 *    per attempt, SHA-256 of an opaque token, expiry in epoch ms as bigint so
 *    SQL compares it arithmetically on both engines). `requested_version` is
 *    bumped in the same transaction as every user event that asks for a turn;
 *    `claimed_version` records what the current/last claim saw, so input that
 *    arrives during a turn sends the row straight back to pending.
 *  - `work_items.served_seq`: the session log position a work item is known to
 *    have served, so stopping it can tell whether later input still needs a
 *    new item (the stopping-item gap of ensureSessionWork).
 */
import { type Kysely, type Migration, sql } from "kysely";

export const sessionExecution: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable("session_executions")
      .addColumn("session_id", "text", (c) => c.primaryKey())
      .addColumn("state", "text", (c) => c.notNull())
      .addColumn("requested_version", "bigint", (c) => c.notNull())
      .addColumn("claimed_version", "bigint", (c) => c.notNull())
      // Queue order: when the row last went from idle to pending.
      .addColumn("requested_at_ms", "bigint", (c) => c.notNull())
      // Retry backoff after a failed attempt; 0 = claimable at once.
      .addColumn("available_at_ms", "bigint", (c) => c.notNull())
      .addColumn("generation", "bigint", (c) => c.notNull())
      .addColumn("owner_id", "text")
      .addColumn("token_hash", "text")
      // 0 when not held.
      .addColumn("expires_at_ms", "bigint", (c) => c.notNull())
      .addColumn("claimed_at_ms", "bigint")
      // Consecutive claims that did not settle the session (crash loops, failing runs).
      .addColumn("attempts", "integer", (c) => c.notNull())
      .addColumn("last_error", "text")
      .execute();
    await db.schema.createIndex("session_executions_queue").on("session_executions").columns(["state", "requested_at_ms"]).execute();
    await db.schema
      .alterTable("work_items")
      .addColumn("served_seq", "bigint", (c) => c.notNull().defaultTo(0))
      .execute();
  },
  async down(db: Kysely<unknown>) {
    await db.schema.alterTable("work_items").dropColumn("served_seq").execute();
    await sql`drop table if exists session_executions`.execute(db);
  },
};
