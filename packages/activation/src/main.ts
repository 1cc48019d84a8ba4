/**
 * The activation worker as a process of its own:
 * `node --import tsx packages/activation/src/main.ts`. Several may run
 * against one database; each claims intents under its own owner id.
 * Prints one JSON line per outcome (no secrets: ids and errors only).
 *
 *   DATABASE_URL / OPENMA_PG_SCHEMA / OPENMA_DATA_DIR   the store, as for `openma serve`
 *   OPENMA_ACTIVATION_IMAGE       the MicroVM image with the in-VM worker (required)
 *   OPENMA_ACTIVATION_API_URL     the control plane URL the VM polls (required)
 *   OPENMA_ACTIVATION_LEASE_MS    claim lease TTL (default 30000)
 *   OPENMA_ACTIVATION_INTERVAL_MS reconcile interval (default 1000)
 *   AWS_REGION, AWS credentials, AWS_ENDPOINT_URL_LAMBDA_MICROVMS: the SDK's usual resolution
 */
import { openStorage, systemClock } from "@openma/storage";
import { AwsMicrovmLauncherPort } from "./aws-launcher.ts";
import { SqlActivationIntentStore } from "./intents.ts";
import { ActivationWorker } from "./worker.ts";

function required(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is required`);
  return value;
}

function positive(name: string, fallback: number): number {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`${name} must be a positive integer`);
  return value;
}

const storage = await openStorage({
  dataDir: process.env.OPENMA_DATA_DIR ?? "./data",
  databaseUrl: process.env.DATABASE_URL || undefined,
  pgSchema: process.env.OPENMA_PG_SCHEMA || undefined,
});
const launcher = new AwsMicrovmLauncherPort({
  imageIdentifier: required("OPENMA_ACTIVATION_IMAGE"),
  apiUrl: required("OPENMA_ACTIVATION_API_URL"),
});
const worker = new ActivationWorker({
  store: new SqlActivationIntentStore(storage.db, { clock: systemClock }),
  launcher,
  ownerId: `activation-pid${process.pid}`,
  leaseTtlMs: positive("OPENMA_ACTIVATION_LEASE_MS", 30_000),
});
const shutdown = () => worker.stop();
process.once("SIGTERM", shutdown);
process.once("SIGINT", shutdown);
process.stdout.write(`${JSON.stringify({ type: "ready", pid: process.pid })}\n`);
await worker.run(positive("OPENMA_ACTIVATION_INTERVAL_MS", 1000), (outcome) => {
  process.stdout.write(`${JSON.stringify({ ...outcome, pid: process.pid })}\n`);
});
launcher.close();
await storage.close();
