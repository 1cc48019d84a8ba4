/**
 * Opens the storage backend: SQLite (embedded default, a file under the data
 * dir) or PostgreSQL (`DATABASE_URL`). Both run the same migrations and the
 * same Kysely queries; only the change bus differs (see bus.ts).
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import SqliteDatabase from "better-sqlite3";
import { Kysely, PostgresDialect, SqliteDialect } from "kysely";
import pg from "pg";
import { type BlobStore, FsBlobStore } from "./blobs.ts";
import { type ChangeBus, InProcessBus, PostgresBus } from "./bus.ts";
import { migrateToLatest } from "./migrations.ts";
import type { Database } from "./schema.ts";

export type Dialect = "sqlite" | "postgres";

export interface Storage {
  readonly dialect: Dialect;
  readonly db: Kysely<Database>;
  readonly bus: ChangeBus;
  readonly blobs: BlobStore;
  close(): Promise<void>;
}

export interface StorageOptions {
  /** `postgres://…` selects Postgres; absent selects SQLite under `dataDir`. */
  databaseUrl?: string | undefined;
  dataDir: string;
  /** Postgres only: a schema to create and use (test isolation). */
  pgSchema?: string | undefined;
  /** Overrides the blob store (default: `<dataDir>/blobs`). */
  blobs?: BlobStore | undefined;
  /** Stream buffer of the default local blob store's transfers (see transfers.ts). */
  transferBufferBytes?: number | undefined;
  onBackgroundError?: (err: Error) => void;
}

// int8 (bigint) columns come back as strings by default; our values fit in a double.
const pgTypes = {
  getTypeParser(oid: number, format?: "text" | "binary") {
    if (oid === 20) return (value: string) => Number(value);
    return pg.types.getTypeParser(oid, format as "text");
  },
};

export function isPostgresUrl(url: string | undefined): url is string {
  return !!url && /^postgres(ql)?:\/\//.test(url);
}

export async function openStorage(opts: StorageOptions): Promise<Storage> {
  mkdirSync(opts.dataDir, { recursive: true });
  const blobs = opts.blobs ?? new FsBlobStore(join(opts.dataDir, "blobs"), { bufferBytes: opts.transferBufferBytes });
  if (isPostgresUrl(opts.databaseUrl)) return openPostgres(opts.databaseUrl, opts, blobs);
  if (opts.databaseUrl) throw new Error("DATABASE_URL must start with postgres:// or postgresql://");
  return openSqlite(join(opts.dataDir, "openma.db"), blobs);
}

async function openSqlite(file: string, blobs: BlobStore): Promise<Storage> {
  const sqlite = new SqliteDatabase(file);
  sqlite.pragma("journal_mode = WAL");
  sqlite.pragma("synchronous = NORMAL");
  sqlite.pragma("busy_timeout = 5000");
  const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: sqlite }) });
  await migrateToLatest(db as Kysely<unknown>);
  const bus = new InProcessBus();
  return {
    dialect: "sqlite",
    db,
    bus,
    blobs,
    async close() {
      await bus.close();
      await db.destroy();
    },
  };
}

async function openPostgres(url: string, opts: StorageOptions, blobs: BlobStore): Promise<Storage> {
  const clientConfig: pg.ClientConfig = { connectionString: url, types: pgTypes };
  if (opts.pgSchema) {
    if (!/^[a-z_][a-z0-9_]*$/.test(opts.pgSchema)) throw new Error("invalid Postgres schema name");
    const admin = new pg.Client(clientConfig);
    await admin.connect();
    // `if not exists` still races with a concurrent creator on Postgres: the loser's error is harmless.
    await admin.query(`create schema if not exists ${opts.pgSchema}`).catch((err: { code?: string }) => {
      if (err.code !== "23505" && err.code !== "42P06") throw err;
    });
    await admin.end();
    clientConfig.options = `-c search_path=${opts.pgSchema}`;
  }
  const pool = new pg.Pool({ ...clientConfig, max: 10 });
  pool.on("error", (err) => opts.onBackgroundError?.(err));
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  await migrateToLatest(db as Kysely<unknown>);
  const bus = new PostgresBus(pool, clientConfig, opts.onBackgroundError, opts.pgSchema);
  await bus.start();
  return {
    dialect: "postgres",
    db,
    bus,
    blobs,
    async close() {
      await bus.close();
      await db.destroy();
    },
  };
}
