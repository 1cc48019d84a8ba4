/**
 * Runtime resource fences, their publication history and orphaned compute
 * (see docs/adr/0002-runtime-fence.md). Times are epoch milliseconds in
 * bigint columns: the fence compares them arithmetically in SQL, which fixed
 * width ISO strings could not do on both engines.
 */
import type { Kysely, Migration } from "kysely";

export const runtimeFence: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable("runtime_fences")
      .addColumn("scope_key", "text", (c) => c.primaryKey())
      .addColumn("environment_id", "text", (c) => c.notNull())
      .addColumn("session_id", "text", (c) => c.notNull())
      .addColumn("generation", "bigint", (c) => c.notNull())
      .addColumn("owner_id", "text", (c) => c.notNull())
      // SHA-256 of the opaque fence token; the token itself is never stored.
      .addColumn("token_hash", "text", (c) => c.notNull())
      .addColumn("acquired_at_ms", "bigint", (c) => c.notNull())
      // 0 after release, so the next acquire never waits.
      .addColumn("expires_at_ms", "bigint", (c) => c.notNull())
      .addColumn("released_at_ms", "bigint")
      .addColumn("revision", "bigint", (c) => c.notNull())
      .addColumn("published_generation", "bigint")
      .addColumn("published_at_ms", "bigint")
      .addColumn("workspace_ref", "text")
      .addColumn("outputs_ref", "text")
      .addColumn("runtime_checkpoint_ref", "text")
      .execute();
    await db.schema.createIndex("runtime_fences_session").on("runtime_fences").column("session_id").execute();

    await db.schema
      .createTable("runtime_publications")
      .addColumn("scope_key", "text", (c) => c.notNull())
      .addColumn("revision", "bigint", (c) => c.notNull())
      .addColumn("generation", "bigint", (c) => c.notNull())
      .addColumn("owner_id", "text", (c) => c.notNull())
      .addColumn("idempotency_key", "text", (c) => c.notNull())
      // Digest of the requested pointers: a replay must match it byte for byte.
      .addColumn("request_digest", "text", (c) => c.notNull())
      // The active pointers after this revision (GC finds superseded candidates here).
      .addColumn("workspace_ref", "text")
      .addColumn("outputs_ref", "text")
      .addColumn("runtime_checkpoint_ref", "text")
      .addColumn("published_at_ms", "bigint", (c) => c.notNull())
      .addPrimaryKeyConstraint("runtime_publications_pk", ["scope_key", "revision"])
      .addUniqueConstraint("runtime_publications_key", ["scope_key", "idempotency_key"])
      .execute();

    await db.schema
      .createTable("runtime_orphans")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("scope_key", "text", (c) => c.notNull())
      .addColumn("environment_id", "text", (c) => c.notNull())
      .addColumn("session_id", "text", (c) => c.notNull())
      .addColumn("generation", "bigint", (c) => c.notNull())
      .addColumn("provider", "text", (c) => c.notNull())
      .addColumn("runtime_id", "text", (c) => c.notNull())
      .addColumn("lease", "text", (c) => c.notNull())
      .addColumn("reason", "text", (c) => c.notNull())
      .addColumn("state", "text", (c) => c.notNull())
      .addColumn("attempts", "integer", (c) => c.notNull())
      .addColumn("next_attempt_at_ms", "bigint", (c) => c.notNull())
      .addColumn("last_error", "text")
      .addColumn("created_at_ms", "bigint", (c) => c.notNull())
      .addColumn("updated_at_ms", "bigint", (c) => c.notNull())
      .addColumn("resolved_at_ms", "bigint")
      .execute();
    await db.schema.createIndex("runtime_orphans_due").on("runtime_orphans").columns(["state", "next_attempt_at_ms"]).execute();
  },
};
