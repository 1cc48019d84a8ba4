/**
 * Dreams, user profiles and MCP tunnels (docs/api.md, ADR 0021).
 *  - `dreams`: `body` is the API document; `status` and `output_store_id`
 *    are beside it so the create of an `update_existing` dream can find
 *    another unfinished dream writing into the same store (the 409), and
 *    `owner_key_id` records whose credential the dream's memory versions are
 *    attributed to. The job itself is queued in `session_executions` under
 *    the dream's id (see packages/api/src/dream-job.ts).
 *  - `user_profiles`, `tunnels`: one JSON document per row under the shared
 *    document columns (id, body, created_at, archived_at), so the generic
 *    list helper pages them; a profile is deleted, never archived.
 *  - `tunnel_certificates`: the CA certificates a tunnel trusts; `tunnel_id`
 *    scopes lookups, `fingerprint` (SHA-256 of the DER) is unique per tunnel.
 */
import { type Kysely, type Migration, sql } from "kysely";

export const dreamsProfilesTunnels: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable("dreams")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("body", "text", (c) => c.notNull())
      .addColumn("status", "text", (c) => c.notNull())
      .addColumn("output_store_id", "text")
      .addColumn("owner_key_id", "text", (c) => c.notNull())
      .addColumn("created_at", "text", (c) => c.notNull())
      .addColumn("archived_at", "text")
      .execute();
    await db.schema.createIndex("dreams_output_store").on("dreams").columns(["output_store_id", "status"]).execute();
    for (const table of ["user_profiles", "tunnels"]) {
      await db.schema
        .createTable(table)
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("body", "text", (c) => c.notNull())
        .addColumn("created_at", "text", (c) => c.notNull())
        .addColumn("archived_at", "text")
        .execute();
    }
    await db.schema
      .createTable("tunnel_certificates")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("tunnel_id", "text", (c) => c.notNull())
      .addColumn("fingerprint", "text", (c) => c.notNull())
      .addColumn("body", "text", (c) => c.notNull())
      .addColumn("created_at", "text", (c) => c.notNull())
      .addColumn("archived_at", "text")
      .execute();
    await db.schema.createIndex("tunnel_certificates_tunnel").on("tunnel_certificates").columns(["tunnel_id", "id"]).execute();
  },
  async down(db: Kysely<unknown>) {
    for (const table of ["tunnel_certificates", "tunnels", "user_profiles", "dreams"]) {
      await sql`drop table if exists ${sql.table(table)}`.execute(db);
    }
  },
};
