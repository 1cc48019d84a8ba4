/**
 * `deployments` and `deployment_runs` (see docs/deployments.md). A
 * deployment's `body` is the API document; the columns beside it are what the
 * scheduler scans and updates: `status` (active | paused), the cron schedule,
 * `schedule_anchor_ms` (occurrences at or before it never fire: creation,
 * unpause or a schedule change) and `last_scheduled_ms` (the newest
 * occurrence fired). A run is written once: the unique index on
 * (deployment_id, scheduled_at) is the per-tick claim, so any number of
 * scheduler processes on one database fire each occurrence at most once
 * (manual runs have a null `scheduled_at`, which never conflicts).
 */
import { type Kysely, type Migration, sql } from "kysely";

export const deployments: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable("deployments")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("agent_id", "text", (c) => c.notNull())
      .addColumn("status", "text", (c) => c.notNull())
      .addColumn("body", "text", (c) => c.notNull())
      .addColumn("schedule_expression", "text")
      .addColumn("schedule_timezone", "text")
      .addColumn("schedule_anchor_ms", "bigint")
      .addColumn("last_scheduled_ms", "bigint")
      .addColumn("created_at", "text", (c) => c.notNull())
      .addColumn("updated_at", "text", (c) => c.notNull())
      .addColumn("archived_at", "text")
      .execute();
    await db.schema.createIndex("deployments_scheduled").on("deployments").columns(["archived_at", "status"]).execute();
    await db.schema
      .createTable("deployment_runs")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("deployment_id", "text", (c) => c.notNull())
      .addColumn("trigger_type", "text", (c) => c.notNull())
      .addColumn("scheduled_at", "text")
      .addColumn("has_error", "integer", (c) => c.notNull())
      .addColumn("body", "text", (c) => c.notNull())
      .addColumn("created_at", "text", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("deployment_runs_tick").on("deployment_runs").columns(["deployment_id", "scheduled_at"]).unique().execute();
  },
  async down(db: Kysely<unknown>) {
    await sql`drop table if exists deployment_runs`.execute(db);
    await sql`drop table if exists deployments`.execute(db);
  },
};
