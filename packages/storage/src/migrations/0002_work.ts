/**
 * Work queue support:
 *  - a partial unique index so a session has at most one live (non-stopped)
 *    work item, enforced by the database on both engines (concurrent
 *    enqueues cannot both win);
 *  - `work_pollers`, the last time each `Anthropic-Worker-ID` polled an
 *    environment, for `workers_polling` in the queue stats.
 */
import { type Kysely, type Migration, sql } from "kysely";

export const work: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createIndex("work_items_live_session")
      .unique()
      .on("work_items")
      .column("session_id")
      .where(sql<boolean>`state <> 'stopped' and session_id is not null`)
      .execute();

    await db.schema
      .createTable("work_pollers")
      .addColumn("environment_id", "text", (c) => c.notNull())
      .addColumn("worker_id", "text", (c) => c.notNull())
      .addColumn("last_seen_at", "text", (c) => c.notNull())
      .addPrimaryKeyConstraint("work_pollers_pk", ["environment_id", "worker_id"])
      .execute();
  },
  async down(db: Kysely<unknown>) {
    await sql`drop table if exists work_pollers`.execute(db);
    await sql`drop index if exists work_items_live_session`.execute(db);
  },
};
