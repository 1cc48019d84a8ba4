/**
 * `session_executions.traceparent` and `work_items.traceparent`: the W3C
 * trace context of the API request that queued a turn (docs/operations.md,
 * "Traces"), so the brain's `openma.turn` and the runtime host's
 * `openma.host.run` continue that request's trace. Null when tracing is off
 * where the request was served: nothing is stored then.
 */
import type { Kysely, Migration } from "kysely";

export const turnTraceparent: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable("session_executions").addColumn("traceparent", "text").execute();
    await db.schema.alterTable("work_items").addColumn("traceparent", "text").execute();
  },
  async down(db: Kysely<unknown>) {
    await db.schema.alterTable("work_items").dropColumn("traceparent").execute();
    await db.schema.alterTable("session_executions").dropColumn("traceparent").execute();
  },
};
