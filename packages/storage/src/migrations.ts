/** Runs the migration set (one file per migration under ./migrations). */
import { type Kysely, type Migration, type MigrationProvider, Migrator, PostgresAdapter, sql } from "kysely";
import { initial } from "./migrations/0001_initial.ts";
import { work } from "./migrations/0002_work.ts";
import { sessions } from "./migrations/0003_sessions.ts";
import { resources } from "./migrations/0004_resources.ts";
import { runtimeFence } from "./migrations/0005_runtime_fence.ts";

/** Ordered by name; a new migration is a new file plus one line here. */
export const migrations: Record<string, Migration> = {
  "0001_initial": initial,
  "0002_work": work,
  "0003_sessions": sessions,
  "0004_resources": resources,
  "0005_runtime_fence": runtimeFence,
};
const provider: MigrationProvider = { getMigrations: async () => migrations };

export async function migrateToLatest(db: Kysely<unknown>): Promise<void> {
  // On Postgres Kysely looks for its migration tables in every schema; pin them to the current one so another
  // schema's tables (parallel test schemas, other tenants) are never mistaken for ours.
  const migrationTableSchema =
    db.getExecutor().adapter instanceof PostgresAdapter
      ? (await sql<{ schema: string }>`select current_schema() as schema`.execute(db)).rows[0]?.schema
      : undefined;
  const migrator = new Migrator({ db, provider, migrationTableSchema });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === "Error");
  if (error || failed) {
    const cause = error instanceof Error ? error.message : String(error ?? failed?.migrationName);
    throw new Error(`database migration failed: ${cause}`);
  }
}
