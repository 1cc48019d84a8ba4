/**
 * Test support: every storage-touching test runs once per backend. Postgres is
 * isolated per test by a fresh schema that is dropped afterwards. There is no
 * skip: an unreachable Postgres fails the run.
 */

import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { S3StandIn } from "@openma/s3-standin";
import pg from "pg";
import type { ChangeBus } from "./bus.ts";
import { newId } from "./ids.ts";
import type { S3BlobStore } from "./s3-blobs.ts";
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
  const blobs = testBlobs();
  const dataDir = mkdtempSync(join(tmpdir(), "openma-test-"));
  const pgSchema = dialect === "postgres" ? `t_${randomBytes(6).toString("hex")}` : undefined;
  const databaseUrl = dialect === "postgres" ? TEST_DATABASE_URL : undefined;
  // OPENMA_TEST_BLOBS=s3 runs the same tests with blobs in an S3 stand-in (real HTTP, official client).
  const s3 = blobs === "s3" ? await openStandInBlobStore() : undefined;
  const storage = await openStorage({ dataDir, databaseUrl, pgSchema, blobs: s3?.store }).catch(async (err) => {
    await s3?.close();
    throw err;
  });
  return {
    storage,
    dataDir,
    databaseUrl,
    pgSchema,
    async cleanup() {
      await storage.close();
      await s3?.close();
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

function testBlobs(): "fs" | "s3" {
  const value = process.env.OPENMA_TEST_BLOBS ?? "fs";
  if (value !== "fs" && value !== "s3") throw new Error("OPENMA_TEST_BLOBS must be fs or s3");
  return value;
}

export interface StandInBlobStore {
  store: S3BlobStore;
  standIn: S3StandIn;
  close(): Promise<void>;
}

/** An S3BlobStore on its own fresh S3 stand-in, with throwaway credentials. Loaded lazily: most runs never need the SDK. */
export async function openStandInBlobStore(opts: { prefix?: string } = {}): Promise<StandInBlobStore> {
  const [{ startS3StandIn }, { S3BlobStore }] = await Promise.all([import("@openma/s3-standin"), import("./s3-blobs.ts")]);
  const credentials = {
    accessKeyId: `AKIA${randomBytes(8).toString("hex").toUpperCase()}`,
    secretAccessKey: randomBytes(30).toString("base64"),
  };
  const standIn = await startS3StandIn({ ...credentials, buckets: ["openma-test"] });
  const store = new S3BlobStore({
    bucket: "openma-test",
    prefix: opts.prefix ?? "blobs",
    endpoint: standIn.endpoint,
    region: standIn.region,
    forcePathStyle: true,
    credentials,
  });
  return {
    store,
    standIn,
    async close() {
      store.close();
      await standIn.close();
    },
  };
}

/** A bare session row for tests of the layers under the API (event log, queues, loop): idle unless told, no events. */
export async function insertTestSession(
  storage: Storage,
  opts: { status?: string; environmentId?: string; archived?: boolean; body?: Record<string, unknown> } = {},
): Promise<string> {
  const id = newId("sesn");
  const now = new Date().toISOString();
  const status = opts.status ?? "idle";
  await storage.db
    .insertInto("sessions")
    .values({
      id,
      agent_id: "agent_x",
      agent_version: 1,
      environment_id: opts.environmentId ?? "env_x",
      status,
      body: JSON.stringify(opts.body ?? { type: "session", id, status, outcome_evaluations: [], usage: {} }),
      last_seq: 0,
      created_at: now,
      updated_at: now,
      archived_at: opts.archived ? now : null,
    })
    .execute();
  return id;
}

/**
 * Publishes a marker and waits until `bus` sees it. Wake-ups reach a listener in the order they were
 * published (Postgres: commit order), so once it is seen, nothing published earlier is still on its way.
 */
export async function markerSeen(bus: ChangeBus): Promise<void> {
  const seen = new Promise<void>((resolve) => {
    const off = bus.subscribe("marker", () => {
      off();
      resolve();
    });
  });
  await bus.publish("marker");
  await seen;
}
