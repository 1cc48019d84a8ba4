/**
 * Sessions support:
 *  - `session_resources.secret`: a GitHub resource's `authorization_token`.
 *    The `body` column is the resource's response shape, which never carries
 *    the token, so the secret lives beside it and is never selected by reads.
 *  - an index for the sessions list, ordered by `(created_at, id)`.
 */
import { type Kysely, type Migration, sql } from "kysely";

export const sessions: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable("session_resources").addColumn("secret", "text").execute();
    await db.schema.createIndex("sessions_created").on("sessions").columns(["created_at", "id"]).execute();
  },
  async down(db: Kysely<unknown>) {
    await sql`drop index if exists sessions_created`.execute(db);
    await db.schema.alterTable("session_resources").dropColumn("secret").execute();
  },
};
