/**
 * Test support: every storage-touching test runs once per backend. Postgres is
 * isolated per test by a fresh schema that is dropped afterwards. There is no
 * skip: an unreachable Postgres fails the run.
 */

import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { type Dialect, openStorage, type Storage } from "./storage.ts";

export const BACKENDS: readonly Dialect[] = ["sqlite", "postgres"];

export const TEST_DATABASE_URL = process.env.OPENMA_TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";

export interface TestStorage {
  storage: Storage;
  dataDir: string;
  /** The DATABASE_URL and schema a second process would use to share this storage. */
  databaseUrl: string | undefined;
  pgSchema: string | undefined;
  cleanup(): Promise<void>;
}

export async function openTestStorage(dialect: Dialect): Promise<TestStorage> {
  const dataDir = mkdtempSync(join(tmpdir(), "openma-test-"));
  const pgSchema = dialect === "postgres" ? `t_${randomBytes(6).toString("hex")}` : undefined;
  const databaseUrl = dialect === "postgres" ? TEST_DATABASE_URL : undefined;
  const storage = await openStorage({ dataDir, databaseUrl, pgSchema });
  return {
    storage,
    dataDir,
    databaseUrl,
    pgSchema,
    async cleanup() {
      await storage.close();
      if (pgSchema) {
        const client = new pg.Client({ connectionString: TEST_DATABASE_URL });
        await client.connect();
        await client.query(`drop schema if exists ${pgSchema} cascade`);
        await client.end();
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
