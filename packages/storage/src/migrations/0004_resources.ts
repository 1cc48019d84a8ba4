/**
 * Vaults, files, skills and memory stores:
 *  - `memory_versions.redacted_by`: the actor (JSON) who redacted a version.
 *  - indexes on the blob keys, which deletes consult to release shared
 *    content-addressed blobs.
 */
import { type Kysely, type Migration, sql } from "kysely";

export const resources: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable("memory_versions").addColumn("redacted_by", "text").execute();
    await db.schema.createIndex("files_blob_key").on("files").column("blob_key").execute();
    await db.schema.createIndex("skill_versions_blob_key").on("skill_versions").column("blob_key").execute();
  },
  async down(db: Kysely<unknown>) {
    await sql`drop index if exists skill_versions_blob_key`.execute(db);
    await sql`drop index if exists files_blob_key`.execute(db);
    await db.schema.alterTable("memory_versions").dropColumn("redacted_by").execute();
  },
};
