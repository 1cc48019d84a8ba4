/**
 * `sessions.acp_release`: the ACP agent release a session pinned when it was
 * created (`{id, package, version, integrity}` as JSON; docs/acp.md
 * "Selecting an agent", ADR 0033), or null for the default harness. Written
 * once by the insert, never by an update: the session runs that release for
 * its whole life, whatever its agent or environment says later.
 */
import type { Kysely, Migration } from "kysely";

export const sessionAcpRelease: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable("sessions").addColumn("acp_release", "text").execute();
  },
  async down(db: Kysely<unknown>) {
    await db.schema.alterTable("sessions").dropColumn("acp_release").execute();
  },
};
