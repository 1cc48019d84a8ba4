/**
 * Child of s3-multipart-memory.test.ts, run under the memory probe: places a
 * staged file in S3 through `S3BlobStore.putFile` (multipart), after a
 * warm-up upload that loads the modules involved. Prints `baseline` once the
 * probe has been reset after the warm-up, then `done`.
 * Settings arrive as JSON in OPENMA_TEST_S3_PUT, credentials in the OPENMA_S3_* variables.
 */
import { readFileSync } from "node:fs";
import { S3BlobStore } from "@openma/storage/s3-blobs";
import type { StagedBlob } from "@openma/storage/transfers";

interface Settings {
  endpoint: string;
  region: string;
  bucket: string;
  partBytes: number;
  bufferBytes: number;
  warm: StagedBlob;
  staged: StagedBlob;
  probeFile: string;
}

const settings = JSON.parse(process.env.OPENMA_TEST_S3_PUT ?? "") as Settings;
const storeWith = (partBytes: number) =>
  new S3BlobStore({
    bucket: settings.bucket,
    endpoint: settings.endpoint,
    region: settings.region,
    forcePathStyle: true,
    credentials: { accessKeyId: process.env.OPENMA_S3_ACCESS_KEY_ID ?? "", secretAccessKey: process.env.OPENMA_S3_SECRET_ACCESS_KEY ?? "" },
    partBytes,
    bufferBytes: settings.bufferBytes,
    timeoutMs: 600_000,
  });

const resets = (): number => {
  try {
    return (JSON.parse(readFileSync(settings.probeFile, "utf8")) as { resets: number }).resets;
  } catch {
    return -1; // read while the probe was writing it
  }
};

// Small parts: the warm-up only has to take the multipart path once.
const warmStore = storeWith(5 * 1024 * 1024);
await warmStore.putFile("files/warm", settings.warm);
warmStore.close();
const store = storeWith(settings.partBytes);
const before = resets();
process.kill(process.pid, "SIGUSR2");
// Waits for the probe's reset (a state, not a duration).
while (resets() <= before) await new Promise((r) => setTimeout(r, 10));
console.log(`baseline ${readFileSync(settings.probeFile, "utf8")}`);
await store.putFile("files/big", settings.staged);
store.close();
console.log("done");
