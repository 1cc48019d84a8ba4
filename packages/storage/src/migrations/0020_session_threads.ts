/**
 * Multi-agent threads (docs/adr/0024-session-threads.md).
 *
 * `session_threads`: one row per thread of a session, the primary thread
 * (`parent_thread_id` null, the coordinator) included once the session has
 * a second thread. `body` is the thread resource without its live parts
 * (status, usage, stats are folded from the log on read).
 *
 * `session_events.thread_id`: which thread an event belongs to; null for the
 * primary thread, so every log written before threads existed is a
 * single-thread log as it stands. All threads share the session's one log,
 * its `seq`, its row lock and its dedupe keys.
 */
import { type Kysely, type Migration, sql } from "kysely";

export const sessionThreads: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable("session_threads")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("session_id", "text", (c) => c.notNull())
      .addColumn("parent_thread_id", "text")
      .addColumn("agent_name", "text", (c) => c.notNull())
      .addColumn("body", "text", (c) => c.notNull())
      .addColumn("created_at", "text", (c) => c.notNull())
      .addColumn("archived_at", "text")
      .execute();
    await db.schema.createIndex("session_threads_by_session").on("session_threads").columns(["session_id", "created_at", "id"]).execute();
    await db.schema.alterTable("session_events").addColumn("thread_id", "text").execute();
    await db.schema.createIndex("session_events_by_thread").on("session_events").columns(["session_id", "thread_id", "seq"]).execute();
  },
  async down(db: Kysely<unknown>) {
    await sql`drop index if exists session_events_by_thread`.execute(db);
    await db.schema.alterTable("session_events").dropColumn("thread_id").execute();
    await sql`drop table if exists session_threads`.execute(db);
  },
};
