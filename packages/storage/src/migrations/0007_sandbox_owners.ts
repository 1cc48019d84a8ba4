/**
 * Owner records of serve-lane sandboxes (see docs/serve-sandboxes.md and
 * docs/adr/0005-serve-sandbox-reaping.md), and this database's deployment id,
 * written on every such sandbox so servers sharing one sandbox provider but
 * not one database never judge each other's sandboxes. Times are epoch ms.
 */
import { randomBytes } from "node:crypto";
import type { Kysely, Migration } from "kysely";

export const sandboxOwners: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable("sandbox_owners")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("deployment", "text", (c) => c.notNull())
      .addColumn("driver", "text", (c) => c.notNull())
      .addColumn("environment_id", "text", (c) => c.notNull())
      .addColumn("session_id", "text", (c) => c.notNull())
      // The driver's serialized lease (provider id inside); null until the acquire answered.
      .addColumn("provider_id", "text")
      .addColumn("lease", "text")
      .addColumn("created_at_ms", "bigint", (c) => c.notNull())
      .addColumn("last_used_at_ms", "bigint", (c) => c.notNull())
      .addColumn("idle_deadline_at_ms", "bigint", (c) => c.notNull())
      .addColumn("lease_expires_at_ms", "bigint", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("sandbox_owners_driver").on("sandbox_owners").columns(["deployment", "driver"]).execute();
    await db.schema.createIndex("sandbox_owners_session").on("sandbox_owners").column("session_id").execute();

    await db.schema
      .createTable("openma_deployment")
      .addColumn("id", "text", (c) => c.primaryKey())
      .execute();
    await (db as Kysely<{ openma_deployment: { id: string } }>)
      .insertInto("openma_deployment")
      .values({ id: `dep_${randomBytes(12).toString("hex")}` })
      .execute();
  },
};
