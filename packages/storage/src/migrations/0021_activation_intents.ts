/**
 * Activation intents (docs/activation.md, docs/adr/0026-activation-intents.md):
 * one row per "a VM must be launched for this session" event, claimed under a
 * lease that renews while the launch is pending. `idempotency_key` is the
 * launcher's idempotency token for the whole life of the intent (not per
 * claim), so a launch retried after a crash finds the VM the first attempt
 * made instead of making a second. Times are epoch ms.
 */
import type { Kysely, Migration } from "kysely";

export const activationIntents: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable("activation_intents")
      .addColumn("event_id", "text", (c) => c.primaryKey())
      .addColumn("idempotency_key", "text", (c) => c.notNull().unique())
      .addColumn("environment_id", "text", (c) => c.notNull())
      .addColumn("workspace_id", "text", (c) => c.notNull())
      .addColumn("session_id", "text", (c) => c.notNull())
      // pending | completed | exhausted | cancelled
      .addColumn("state", "text", (c) => c.notNull())
      .addColumn("attempt_count", "integer", (c) => c.notNull())
      .addColumn("max_attempts", "integer", (c) => c.notNull())
      .addColumn("deadline_at_ms", "bigint", (c) => c.notNull())
      .addColumn("next_attempt_at_ms", "bigint", (c) => c.notNull())
      .addColumn("lease_owner_id", "text")
      // Bumped by every claim: the fence a stale holder's writes are checked against.
      .addColumn("lease_generation", "integer", (c) => c.notNull())
      .addColumn("lease_token", "text")
      .addColumn("lease_expires_at_ms", "bigint", (c) => c.notNull())
      .addColumn("runtime_id", "text")
      .addColumn("last_error", "text")
      .addColumn("created_at_ms", "bigint", (c) => c.notNull())
      .addColumn("updated_at_ms", "bigint", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("activation_intents_due").on("activation_intents").columns(["state", "next_attempt_at_ms"]).execute();
  },
};
