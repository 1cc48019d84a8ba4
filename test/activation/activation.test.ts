/**
 * Evidence for acquire_then_session_poll (issue 15): activation worker
 * processes against the AWS Lambda MicroVMs stand-in through the official
 * client, the intent queue in our SQL store.
 *
 * - `kill -9` of the worker while its RunMicrovm hangs after the VM exists:
 *   a second worker reclaims the intent when the lease expires and launches
 *   it with the same clientToken, so the stand-in counts one launch.
 * - The claim is lost while the launch is pending (the session ended): the VM
 *   the launch made is terminated as an orphan.
 * - 100 intents, two worker processes on one Postgres: 100 launches, each
 *   intent one VM, both processes took part.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { ActivationWorker, AwsMicrovmLauncherPort, SqlActivationIntentStore } from "@openma/activation";
import { type MicrovmsStandIn, startMicrovmsStandIn } from "@openma/standin-aws-microvms";
import { systemClock } from "@openma/storage";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterEach, describe, expect, it } from "vitest";
import { until } from "../support/until.ts";

const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));
const MAIN = join(REPO_ROOT, "packages/activation/src/main.ts");
/** A run hook that takes its payload and idles until the VM is terminated. */
const IDLE_IMAGE = { command: ["sh", "-c", "read -r payload; exec sleep 3600"] };
const HOUR = 3_600_000;

interface WorkerProcess {
  child: ChildProcess;
  lines: Record<string, unknown>[];
  exited: Promise<void>;
}

function startWorker(standIn: MicrovmsStandIn, t: TestStorage, dataDir: string, leaseMs: number): WorkerProcess {
  const child = spawn(process.execPath, ["--import", "tsx", MAIN], {
    cwd: REPO_ROOT,
    // Secrets through the environment, never argv; the SDK resolves region, credentials and endpoint from it.
    env: {
      ...process.env,
      ...standIn.env,
      DATABASE_URL: t.databaseUrl ?? "",
      OPENMA_PG_SCHEMA: t.pgSchema ?? "",
      OPENMA_DATA_DIR: dataDir,
      OPENMA_ACTIVATION_IMAGE: "idle",
      OPENMA_ACTIVATION_API_URL: "http://127.0.0.1:9/",
      OPENMA_ACTIVATION_LEASE_MS: String(leaseMs),
      OPENMA_ACTIVATION_INTERVAL_MS: "100",
    },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines: Record<string, unknown>[] = [];
  let partial = "";
  child.stdout?.on("data", (chunk: Buffer) => {
    partial += chunk.toString("utf8");
    const parts = partial.split("\n");
    partial = parts.pop() ?? "";
    for (const line of parts) if (line.trim()) lines.push(JSON.parse(line) as Record<string, unknown>);
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  return { child, lines, exited };
}

const enqueue = (store: SqlActivationIntentStore, i: number) =>
  store.enqueue({
    eventId: `evt_${String(i).padStart(3, "0")}`,
    environmentId: "env_aws",
    workspaceId: "wrk_1",
    sessionId: `sesn_${i}`,
    maxAttempts: 5,
    deadlineAtMs: Date.now() + HOUR,
  });

/** Per test: storage, a stand-in and worker processes, torn down after it. */
function fixture(dialect: "sqlite" | "postgres") {
  let t: TestStorage | undefined;
  let standIn: MicrovmsStandIn | undefined;
  const workers: WorkerProcess[] = [];
  afterEach(async () => {
    for (const w of workers.splice(0)) {
      if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill("SIGKILL");
      await w.exited;
    }
    await standIn?.close();
    await t?.cleanup();
    standIn = t = undefined;
  });
  return async function open(options: { boxes: boolean }) {
    const storage = await openTestStorage(dialect);
    // A worker process opens the test's own storage (its SQLite file, or its Postgres schema).
    const dir = storage.dataDir;
    const standInNow = await startMicrovmsStandIn({ images: { idle: IDLE_IMAGE }, boxes: options.boxes });
    t = storage;
    standIn = standInNow;
    const worker = (leaseMs: number) => {
      const w = startWorker(standInNow, storage, dir, leaseMs);
      workers.push(w);
      return w;
    };
    return { standIn: standInNow, store: new SqlActivationIntentStore(storage.storage.db, { clock: systemClock }), worker };
  };
}

describe.each(BACKENDS)("AWS activation on %s", (dialect) => {
  const open = fixture(dialect);

  it("launches an intent exactly once when its worker is killed -9 mid-launch", async () => {
    const { standIn, store, worker } = await open({ boxes: true });
    // RunMicrovm makes the VM, then never answers: the worker dies not knowing the VM exists.
    const hung = standIn.inject({ op: "create", kind: "hang" });
    await enqueue(store, 1);
    const first = worker(1500);
    await hung;
    // The fault fires as the request arrives; the VM exists a few steps later.
    await until(async () => standIn.launches() === 1, "the hung RunMicrovm to make its VM");
    first.child.kill("SIGKILL");
    await first.exited;

    const second = worker(1500);
    await until(async () => (await store.get("evt_001"))?.state === "completed", "the intent to complete after the restart");
    const intent = await store.get("evt_001");
    const [vm] = standIn.table.all();
    expect(intent).toMatchObject({ state: "completed", attemptCount: 2, runtimeId: vm?.microvmId });
    // Two RunMicrovm calls reached the service (the first is still hung, so only the replay is in the record), one VM exists.
    expect(standIn.faults.fired).toEqual([{ op: "create", kind: "hang" }]);
    expect(standIn.requests.filter((r) => r.method === "POST" && r.path === "/2025-09-09/microvms" && r.authorized)).toHaveLength(1);
    expect(standIn.launches()).toBe(1);
    // The worker's outcome line may still be in the pipe when the store already says completed.
    await until(async () => second.lines.some((l) => l.type === "launched"), "the second worker to report its launch");
    expect(second.lines).toContainEqual(expect.objectContaining({ type: "launched", eventId: "evt_001", runtimeId: vm?.microvmId }));
  });

  it("terminates the VM as an orphan when the claim is lost while its launch is pending", async () => {
    const { standIn, store } = await open({ boxes: true });
    const launcher = new AwsMicrovmLauncherPort({
      imageIdentifier: "idle",
      apiUrl: "http://127.0.0.1:9/",
      client: { region: standIn.region, endpoint: standIn.url, credentials: standIn.credentials },
    });
    const activation = new ActivationWorker({ store, launcher, ownerId: "owner_a", leaseTtlMs: 1500, renewEveryMs: 300 });
    try {
      const hung = standIn.inject({ op: "create", kind: "hang" });
      const outcome = activation.activate({
        eventId: "evt_orphan",
        environmentId: "env_aws",
        workspaceId: "wrk_1",
        sessionId: "sesn_gone",
      });
      await hung;
      // The session ended while its VM was launching: the claim is gone at the next renewal.
      expect(await store.cancel("evt_orphan")).toBe(true);
      const [vm] = standIn.table.all();
      await vm?.started;
      standIn.releaseHangs();
      expect(await outcome).toEqual({ type: "orphan_destroyed", eventId: "evt_orphan", runtimeId: vm?.microvmId });
      expect(vm?.state).toBe("TERMINATED");
      expect(standIn.live()).toBe(0);
      expect(await standIn.boxes.containers()).toEqual([]);
    } finally {
      activation.stop();
      launcher.close();
    }
  });
});

describe("AWS activation at scale on postgres", () => {
  const open = fixture("postgres");

  it("launches 100 intents across two worker processes exactly once each", async () => {
    // Launches are counted, not run: the VMs are records here (100 containers would measure the engine, not the queue).
    const { standIn, store, worker } = await open({ boxes: false });
    for (let i = 0; i < 100; i++) await enqueue(store, i);
    const processes = [worker(5000), worker(5000)];
    await until(async () => (await store.counts()).completed === 100, "100 completed intents", 120_000);
    expect(standIn.launches()).toBe(100);
    const launchedLines = () => processes.flatMap((w) => w.lines.filter((l) => l.type === "launched"));
    // The last outcome lines may still be in the pipes when the store already says completed.
    await until(async () => launchedLines().length >= 100, "both processes to report their launches");
    const launched = launchedLines();
    expect(launched).toHaveLength(100);
    expect(new Set(launched.map((l) => l.runtimeId)).size).toBe(100);
    expect(new Set(launched.map((l) => l.eventId)).size).toBe(100);
    expect(processes.every((w) => w.lines.some((l) => l.type === "launched"))).toBe(true);
  });
});
