/**
 * `session_activity`: how long each session has spent in `running`, kept by
 * the event log's projection (packages/api/src/event-log.ts) as status events
 * land: `active_ms` sums the closed running intervals, `running_since_ms` is
 * the start of the open one (null while not running). Both are epoch-ms
 * bigints from the server's injected clock. A table of its own rather than
 * columns on `sessions`, so writers of session rows need not know about it;
 * a session without a row has never run.
 */
import { type Kysely, type Migration, sql } from "kysely";

export const sessionActivity: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable("session_activity")
      .addColumn("session_id", "text", (c) => c.primaryKey())
      .addColumn("active_ms", "bigint", (c) => c.notNull())
      .addColumn("running_since_ms", "bigint")
      .execute();
  },
  async down(db: Kysely<unknown>) {
    await sql`drop table if exists session_activity`.execute(db);
  },
};
