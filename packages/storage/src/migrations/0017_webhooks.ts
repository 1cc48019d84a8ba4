/**
 * Webhook endpoints and their durable outbox (see docs/webhooks.md). A change
 * worth reporting writes one `webhook_deliveries` row per subscribed, enabled
 * endpoint in the transaction of the change itself, so a delivery exists iff
 * the change committed. Rows of one (endpoint, order_key) — a session, a
 * deployment — are delivered in `order_seq` order: the worker only sends the
 * oldest undelivered one. `state`: pending | delivered | dead; times are
 * epoch ms from the injected clock.
 */
import { type Kysely, type Migration, sql } from "kysely";

export const webhooks: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable("webhook_endpoints")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("body", "text", (c) => c.notNull())
      .addColumn("secret", "text", (c) => c.notNull())
      .addColumn("state", "text", (c) => c.notNull())
      .addColumn("created_at", "text", (c) => c.notNull())
      .execute();
    await db.schema
      .createTable("webhook_deliveries")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("endpoint_id", "text", (c) => c.notNull())
      .addColumn("event_id", "text", (c) => c.notNull())
      .addColumn("event_type", "text", (c) => c.notNull())
      .addColumn("order_key", "text", (c) => c.notNull())
      .addColumn("order_seq", "bigint", (c) => c.notNull())
      .addColumn("payload", "text", (c) => c.notNull())
      .addColumn("state", "text", (c) => c.notNull())
      .addColumn("attempts", "integer", (c) => c.notNull())
      .addColumn("next_attempt_at_ms", "bigint", (c) => c.notNull())
      .addColumn("lease_until_ms", "bigint", (c) => c.notNull())
      .addColumn("last_error", "text")
      .addColumn("created_at_ms", "bigint", (c) => c.notNull())
      .addColumn("finished_at_ms", "bigint")
      .execute();
    await db.schema.createIndex("webhook_deliveries_due").on("webhook_deliveries").columns(["state", "next_attempt_at_ms"]).execute();
    await db.schema
      .createIndex("webhook_deliveries_order")
      .on("webhook_deliveries")
      .columns(["endpoint_id", "order_key", "order_seq"])
      .execute();
  },
  async down(db: Kysely<unknown>) {
    await sql`drop table if exists webhook_deliveries`.execute(db);
    await sql`drop table if exists webhook_endpoints`.execute(db);
  },
};
