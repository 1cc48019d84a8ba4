/**
 * A scheduler in its own process, driven over IPC: `{tick: ms}` sets its
 * clock and runs one tick against the Postgres schema named by
 * SCHEDULER_PG_SCHEMA, then answers `{done: ms, fired, taken}`. What a killed
 * `openma serve` process's scheduler leaves behind is what this leaves
 * behind when the test sends it SIGKILL mid-tick.
 */
import { openStorage } from "@openma/storage";
import { TEST_DATABASE_URL } from "@openma/storage/testing";
import { automationDeps, testScheduler } from "./automation.ts";

const schema = process.env.SCHEDULER_PG_SCHEMA;
const dataDir = process.env.SCHEDULER_DATA_DIR;
if (!schema || !dataDir || !process.send)
  throw new Error("scheduler-child needs SCHEDULER_PG_SCHEMA, SCHEDULER_DATA_DIR and an IPC channel");
const storage = await openStorage({ dataDir, databaseUrl: TEST_DATABASE_URL, pgSchema: schema });
let now = 0;
const scheduler = testScheduler(automationDeps(storage, { now: () => now }));
process.on("message", async (msg: { tick?: number; stop?: boolean }) => {
  if (msg.stop) {
    await storage.close();
    process.exit(0);
  }
  if (typeof msg.tick !== "number") return;
  now = msg.tick;
  const report = await scheduler.tick();
  process.send?.({ done: msg.tick, ...report });
});
process.send({ ready: true });
