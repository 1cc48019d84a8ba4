/** Runs the migration set (one file per migration under ./migrations). */
import { type Kysely, type Migration, type MigrationProvider, Migrator } from "kysely";
import { initial } from "./migrations/0001_initial.ts";

/** Ordered by name; a new migration is a new file plus one line here. */
export const migrations: Record<string, Migration> = {
  "0001_initial": initial,
};
const provider: MigrationProvider = { getMigrations: async () => migrations };

export async function migrateToLatest(db: Kysely<unknown>): Promise<void> {
  const migrator = new Migrator({ db, provider });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === "Error");
  if (error || failed) {
    const cause = error instanceof Error ? error.message : String(error ?? failed?.migrationName);
    throw new Error(`database migration failed: ${cause}`);
  }
}
