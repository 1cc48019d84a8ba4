/**
 * The one migration set, written with Kysely's schema builder so the same
 * statements run on SQLite and Postgres. `bigint` maps to INTEGER affinity on
 * SQLite and to int8 on Postgres (event sequences can grow past 2^31).
 */
import { type Kysely, type Migration, sql } from "kysely";

export const initial: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable("api_keys")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("key_hash", "text", (c) => c.notNull().unique())
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("created_at", "text", (c) => c.notNull())
      .addColumn("revoked_at", "text")
      .execute();

    await db.schema
      .createTable("agents")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("version", "integer", (c) => c.notNull())
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("body", "text", (c) => c.notNull())
      .addColumn("created_at", "text", (c) => c.notNull())
      .addColumn("updated_at", "text", (c) => c.notNull())
      .addColumn("archived_at", "text")
      .execute();
    await db.schema
      .createTable("agent_versions")
      .addColumn("agent_id", "text", (c) => c.notNull())
      .addColumn("version", "integer", (c) => c.notNull())
      .addColumn("body", "text", (c) => c.notNull())
      .addColumn("created_at", "text", (c) => c.notNull())
      .addPrimaryKeyConstraint("agent_versions_pk", ["agent_id", "version"])
      .execute();

    await db.schema
      .createTable("environments")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("config_type", "text", (c) => c.notNull())
      .addColumn("body", "text", (c) => c.notNull())
      .addColumn("created_at", "text", (c) => c.notNull())
      .addColumn("updated_at", "text", (c) => c.notNull())
      .addColumn("archived_at", "text")
      .execute();
    await db.schema
      .createTable("environment_keys")
      .addColumn("key_hash", "text", (c) => c.primaryKey())
      .addColumn("environment_id", "text", (c) => c.notNull())
      .addColumn("created_at", "text", (c) => c.notNull())
      .addColumn("revoked_at", "text")
      .execute();
    await db.schema.createIndex("environment_keys_env").on("environment_keys").column("environment_id").execute();

    await db.schema
      .createTable("sessions")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("agent_id", "text", (c) => c.notNull())
      .addColumn("agent_version", "integer", (c) => c.notNull())
      .addColumn("environment_id", "text", (c) => c.notNull())
      .addColumn("status", "text", (c) => c.notNull())
      .addColumn("body", "text", (c) => c.notNull())
      .addColumn("last_seq", "bigint", (c) => c.notNull().defaultTo(0))
      .addColumn("created_at", "text", (c) => c.notNull())
      .addColumn("updated_at", "text", (c) => c.notNull())
      .addColumn("archived_at", "text")
      .execute();
    await db.schema.createIndex("sessions_agent").on("sessions").column("agent_id").execute();

    await db.schema
      .createTable("session_events")
      .addColumn("session_id", "text", (c) => c.notNull())
      .addColumn("seq", "bigint", (c) => c.notNull())
      .addColumn("id", "text", (c) => c.notNull().unique())
      .addColumn("type", "text", (c) => c.notNull())
      .addColumn("processed_at", "text", (c) => c.notNull())
      .addColumn("body", "text", (c) => c.notNull())
      .addColumn("dedupe_key", "text")
      .addPrimaryKeyConstraint("session_events_pk", ["session_id", "seq"])
      .addUniqueConstraint("session_events_dedupe", ["session_id", "dedupe_key"])
      .execute();

    await db.schema
      .createTable("session_resources")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("session_id", "text", (c) => c.notNull())
      .addColumn("type", "text", (c) => c.notNull())
      .addColumn("body", "text", (c) => c.notNull())
      .addColumn("created_at", "text", (c) => c.notNull())
      .addColumn("updated_at", "text", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("session_resources_session").on("session_resources").column("session_id").execute();

    await db.schema
      .createTable("work_items")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("environment_id", "text", (c) => c.notNull())
      .addColumn("session_id", "text")
      .addColumn("data", "text", (c) => c.notNull())
      .addColumn("state", "text", (c) => c.notNull())
      .addColumn("metadata", "text", (c) => c.notNull())
      .addColumn("created_at", "text", (c) => c.notNull())
      .addColumn("acknowledged_at", "text")
      .addColumn("started_at", "text")
      .addColumn("latest_heartbeat_at", "text")
      .addColumn("last_heartbeat", "text")
      .addColumn("stop_requested_at", "text")
      .addColumn("stopped_at", "text")
      .addColumn("polled_at", "text")
      .addColumn("polled_by", "text")
      .addColumn("lease_expires_at", "text")
      .addColumn("ttl_seconds", "integer", (c) => c.notNull())
      .addColumn("token_hash", "text")
      .execute();
    await db.schema.createIndex("work_items_env_state").on("work_items").columns(["environment_id", "state", "created_at"]).execute();
    await db.schema.createIndex("work_items_session").on("work_items").column("session_id").execute();
    await db.schema.createIndex("work_items_token").on("work_items").column("token_hash").execute();

    await db.schema
      .createTable("vaults")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("body", "text", (c) => c.notNull())
      .addColumn("created_at", "text", (c) => c.notNull())
      .addColumn("updated_at", "text", (c) => c.notNull())
      .addColumn("archived_at", "text")
      .execute();
    await db.schema
      .createTable("vault_credentials")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("vault_id", "text", (c) => c.notNull())
      .addColumn("body", "text", (c) => c.notNull())
      .addColumn("secret", "text", (c) => c.notNull())
      .addColumn("created_at", "text", (c) => c.notNull())
      .addColumn("updated_at", "text", (c) => c.notNull())
      .addColumn("archived_at", "text")
      .execute();
    await db.schema.createIndex("vault_credentials_vault").on("vault_credentials").column("vault_id").execute();

    await db.schema
      .createTable("files")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("filename", "text", (c) => c.notNull())
      .addColumn("mime_type", "text", (c) => c.notNull())
      .addColumn("size_bytes", "bigint", (c) => c.notNull())
      .addColumn("sha256", "text", (c) => c.notNull())
      .addColumn("blob_key", "text", (c) => c.notNull())
      .addColumn("scope", "text")
      .addColumn("downloadable", "integer", (c) => c.notNull())
      .addColumn("expires_at", "text")
      .addColumn("created_at", "text", (c) => c.notNull())
      .execute();

    await db.schema
      .createTable("skills")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("display_name", "text", (c) => c.notNull())
      .addColumn("source", "text", (c) => c.notNull())
      .addColumn("latest_version_id", "text")
      .addColumn("created_at", "text", (c) => c.notNull())
      .addColumn("updated_at", "text", (c) => c.notNull())
      .execute();
    await db.schema
      .createTable("skill_versions")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("skill_id", "text", (c) => c.notNull())
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("description", "text", (c) => c.notNull())
      .addColumn("blob_key", "text", (c) => c.notNull())
      .addColumn("created_at", "text", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("skill_versions_skill").on("skill_versions").column("skill_id").execute();

    await db.schema
      .createTable("memory_stores")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("body", "text", (c) => c.notNull())
      .addColumn("created_at", "text", (c) => c.notNull())
      .addColumn("updated_at", "text", (c) => c.notNull())
      .addColumn("archived_at", "text")
      .execute();
    await db.schema
      .createTable("memories")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("memory_store_id", "text", (c) => c.notNull())
      .addColumn("path", "text", (c) => c.notNull())
      .addColumn("content", "text", (c) => c.notNull())
      .addColumn("content_sha256", "text", (c) => c.notNull())
      .addColumn("content_size_bytes", "integer", (c) => c.notNull())
      .addColumn("memory_version_id", "text", (c) => c.notNull())
      .addColumn("created_at", "text", (c) => c.notNull())
      .addColumn("updated_at", "text", (c) => c.notNull())
      .addUniqueConstraint("memories_store_path", ["memory_store_id", "path"])
      .execute();
    await db.schema
      .createTable("memory_versions")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("memory_id", "text", (c) => c.notNull())
      .addColumn("memory_store_id", "text", (c) => c.notNull())
      .addColumn("operation", "text", (c) => c.notNull())
      .addColumn("path", "text")
      .addColumn("content", "text")
      .addColumn("content_sha256", "text")
      .addColumn("content_size_bytes", "integer")
      .addColumn("created_by", "text")
      .addColumn("created_at", "text", (c) => c.notNull())
      .addColumn("redacted_at", "text")
      .execute();
    await db.schema.createIndex("memory_versions_store").on("memory_versions").columns(["memory_store_id", "id"]).execute();
  },
  async down(db: Kysely<unknown>) {
    for (const table of [
      "memory_versions",
      "memories",
      "memory_stores",
      "skill_versions",
      "skills",
      "files",
      "vault_credentials",
      "vaults",
      "work_items",
      "session_resources",
      "session_events",
      "sessions",
      "environment_keys",
      "environments",
      "agent_versions",
      "agents",
      "api_keys",
    ]) {
      await sql`drop table if exists ${sql.table(table)}`.execute(db);
    }
  },
};
