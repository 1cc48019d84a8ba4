/**
 * `session_compactions`: the summary each `agent.thread_context_compacted`
 * event stands for, and the log position the conversation keeps from
 * (`kept_from_seq`: content events at or after it stay verbatim). Written in
 * the same transaction as the event, so the log and its summaries never
 * disagree; kept beside the log rather than on the event because the API's
 * event has no such fields (docs/adr/0022-context-compaction.md).
 */
import { type Kysely, type Migration, sql } from "kysely";

export const sessionCompactions: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable("session_compactions")
      .addColumn("session_id", "text", (c) => c.notNull())
      .addColumn("event_id", "text", (c) => c.notNull())
      .addColumn("kept_from_seq", "bigint", (c) => c.notNull())
      .addColumn("summary", "text", (c) => c.notNull())
      .addPrimaryKeyConstraint("session_compactions_pk", ["session_id", "event_id"])
      .execute();
  },
  async down(db: Kysely<unknown>) {
    await sql`drop table if exists session_compactions`.execute(db);
  },
};
