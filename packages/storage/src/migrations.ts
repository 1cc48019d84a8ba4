/** Runs the migration set (one file per migration under ./migrations). */
import { type Kysely, type Migration, PostgresAdapter, sql } from "kysely";
import { initial } from "./migrations/0001_initial.ts";
import { work } from "./migrations/0002_work.ts";
import { sessions } from "./migrations/0003_sessions.ts";
import { resources } from "./migrations/0004_resources.ts";
import { runtimeFence } from "./migrations/0005_runtime_fence.ts";
import { sessionExecution } from "./migrations/0006_session_execution.ts";
import { sandboxOwners } from "./migrations/0007_sandbox_owners.ts";
import { sessionActivity } from "./migrations/0015_session_activity.ts";
import { deployments } from "./migrations/0016_deployments.ts";
import { webhooks } from "./migrations/0017_webhooks.ts";
import { dreamsProfilesTunnels } from "./migrations/0018_dreams_profiles_tunnels.ts";
import { sessionCompactions } from "./migrations/0019_session_compactions.ts";
import { sessionThreads } from "./migrations/0020_session_threads.ts";
import { activationIntents } from "./migrations/0021_activation_intents.ts";
import { sessionAcpRelease } from "./migrations/0022_session_acp_release.ts";
import { turnTraceparent } from "./migrations/0023_turn_traceparent.ts";

/** Ordered by name; a new migration is a new file plus one line here. */
export const migrations: Record<string, Migration> = {
  "0001_initial": initial,
  "0002_work": work,
  "0003_sessions": sessions,
  "0004_resources": resources,
  "0005_runtime_fence": runtimeFence,
  "0006_session_execution": sessionExecution,
  "0007_sandbox_owners": sandboxOwners,
  "0015_session_activity": sessionActivity,
  "0016_deployments": deployments,
  "0017_webhooks": webhooks,
  "0018_dreams_profiles_tunnels": dreamsProfilesTunnels,
  "0019_session_compactions": sessionCompactions,
  "0020_session_threads": sessionThreads,
  "0021_activation_intents": activationIntents,
  "0022_session_acp_release": sessionAcpRelease,
  "0023_turn_traceparent": turnTraceparent,
};

/**
 * Applies pending migrations in one transaction. Not Kysely's Migrator: it
 * checks for its tables by introspecting every schema of the database, which
 * is slow with many schemas and fails when another schema is dropped at the
 * same moment (parallel test schemas, other tenants). This runner only ever
 * looks at its own table in the current schema. On Postgres an advisory lock
 * keyed on the schema serialises concurrent starts (several `openma serve`
 * processes); SQLite serialises writers anyway. DDL is transactional on both,
 * so a failed migration leaves nothing behind.
 */
export async function migrateToLatest(db: Kysely<unknown>): Promise<void> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  try {
    await db.transaction().execute(async (trx) => {
      if (postgres) await sql`select pg_advisory_xact_lock(hashtext(current_schema() || '.openma_migrations'))`.execute(trx);
      await sql`create table if not exists openma_migrations (name text primary key, applied_at text not null)`.execute(trx);
      const applied = await sql<{ name: string }>`select name from openma_migrations`.execute(trx);
      const done = new Set(applied.rows.map((r) => r.name));
      for (const name of Object.keys(migrations).sort()) {
        if (done.has(name)) continue;
        await migrations[name]!.up(trx);
        await sql`insert into openma_migrations (name, applied_at) values (${name}, ${new Date().toISOString()})`.execute(trx);
      }
    });
  } catch (err) {
    throw new Error(`database migration failed: ${err instanceof Error ? err.message : String(err)}`);
  }
}
