/**
 * Chaos on a cloud driver: one fault injected at the vendor's stand-in per
 * row (a 5xx, a 429 with Retry-After, a request that never answers, an exec
 * stream cut mid-output, a sandbox that vanishes), during create, exec,
 * file transfer or kill, under the Managed Runtime Host with the real SQL
 * fence and orphan store (SQLite) and the remote workspace and output
 * ports. (The file-transfer fault hits the provider's file API through a
 * harness read; the workspace ports move trees through exec.) Each row ends as the seed's failure matrix says, and with no
 * sandbox left at the stand-in (after the orphan reaper, where the row
 * leaves an orphan): before candidate creation the active pointers do not
 * move; a sandbox that disappears is replaced by a cold acquire that
 * restores the last publication; a failed or hung hard kill becomes a
 * token-free orphan the reaper removes at the provider.
 *
 * Shared by one test file per vendor, so the vendors run in parallel.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ExecResult } from "@openma/contract";
import type { RemoteSandboxDriver } from "@openma/driver-kit/remote";
import { eventually } from "@openma/driver-suite/eventually";
import {
  type HarnessRunInput,
  type HarnessRunner,
  type HarnessRunResult,
  type HostTimings,
  ManagedRuntimeHost,
  type RuntimeRunResult,
} from "@openma/host";
import { RemoteCheckpointWorkspace, RemoteSessionOutputs } from "@openma/remote-bindings";
import type { CloudStandIn, Fault } from "@openma/standin-kit";
import { FsBlobStore } from "@openma/storage/blobs";
import { SqlRuntimeResourceFence } from "@openma/storage/fence";
import { SqlRuntimeOrphanStore } from "@openma/storage/orphans";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { realScheduler } from "@openma/time";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { AMA_WORKER_PROFILE } from "../runtime/support.ts";
import { startVendorStandIn, type Vendor, vendorDriver } from "../support/cloud.ts";

/** Short but real: the host's bounds fire within seconds on the wall clock. */
const TIMINGS: HostTimings = {
  leaseTtlMs: 60_000,
  renewEveryMs: 20_000,
  safetyMarginMs: 10_000,
  renewTimeoutMs: 5_000,
  sandboxHeartbeatMs: 1_000,
  abortGraceMs: 2_000,
  drainTimeoutMs: 30_000,
  terminateTimeoutMs: 4_000,
  publishAttempts: 3,
  publishRetryDelayMs: 100,
  maxColdRestarts: 1,
  fallbackDepth: 10,
};
/** The driver's bound on one provider call: a hung create or kill fails within it. */
const CALL_TIMEOUT_MS = 8_000;
const never = () => new AbortController().signal;

interface Tools {
  exec(command: string): Promise<ExecResult>;
  read(path: string): Promise<string | null>;
}

type Script = (context: {
  attempt: number;
  tools: Tools;
  input: HarnessRunInput;
  standIn: CloudStandIn;
  driver: RemoteSandboxDriver;
}) => Promise<HarnessRunResult>;

/** A harness outside the sandbox, driving it through the driver's tool port as the script says. */
class ScriptedHarness implements HarnessRunner {
  placements = 0;
  constructor(
    private readonly driver: RemoteSandboxDriver,
    private readonly standIn: CloudStandIn,
    private readonly script: Script,
  ) {}

  async run(input: HarnessRunInput): Promise<HarnessRunResult> {
    const port = this.driver.toolSandbox(input.sandbox);
    const tools: Tools = {
      exec: (command) => port.exec({ command: ["/bin/sh", "-c", command], timeoutMs: 60_000, signal: input.signal }),
      read: async (path) => {
        const read = await port.readFile({ path, maxBytes: 1 << 20, signal: input.signal });
        return read.type === "ok" ? Buffer.from(read.content).toString("utf8") : null;
      },
    };
    return this.script({ attempt: ++this.placements, tools, input, standIn: this.standIn, driver: this.driver });
  }

  async drain(): Promise<{ type: "drained" }> {
    return { type: "drained" };
  }
}

const ok = (result: ExecResult) => result.type === "exited" && result.exitCode === 0;

/** Turn 1: a file in the workspace and a deliverable, published at the turn boundary. */
async function firstTurn(tools: Tools, input: HarnessRunInput): Promise<void> {
  if (!ok(await tools.exec("echo turn-1 > /workspace/notes.txt && echo report > /mnt/session/outputs/report.md")))
    throw new Error("turn 1 failed");
  const committed = await input.commitTurn("turn_1");
  if (committed.type !== "committed") throw new Error(`turn 1 was not published: ${JSON.stringify(committed)}`);
}

interface Row {
  name: string;
  script: Script;
  /** Queued before the run starts (create faults), for this many requests. */
  before?: Fault;
  beforeTimes?: number;
  expect(result: RuntimeRunResult, harness: ScriptedHarness): void;
  /** The run leaves an orphan record the reaper must resolve. */
  orphan?: boolean;
  /** The publication the run must leave active (null: none). */
  revision: number | null;
  /** The fault fired and the vendor's SDK absorbed it (its own retries): the row checks that it fired. */
  absorbed?: Fault["op"];
}

const completedSimply: Script = async ({ tools, input }) => {
  await firstTurn(tools, input);
  return { type: "completed" };
};

const failedAt = (stage: string) => (result: RuntimeRunResult) => {
  expect(result).toMatchObject({ type: "failed", stage });
};

/**
 * Modal's SDK retries transient statuses (UNAVAILABLE, INTERNAL, ...) of every unary call itself (three
 * times on the control plane, ten on the command router, where the exec id is the client's), honours the
 * server's retry policy on a rate limit, and reopens a cut stdio stream at the byte offset it reached: one
 * such fault ends in a completed run, and the row checks that the fault really fired.
 */
function sdkAbsorbed(row: Row, op: Fault["op"], compute: "terminated" = "terminated"): Row {
  return {
    ...row,
    expect: (result) => expect(result).toMatchObject({ type: "completed", cleanup: { compute } }),
    orphan: false,
    revision: 2,
    absorbed: op,
  };
}

function rows(vendor: Vendor): Row[] {
  const listed = baseRows(vendor);
  // BoxLite's client reattaches a dropped attach (the execution outlives it) and receives the output the server kept.
  if (vendor === "boxrun") return listed.map((row) => (row.name === "the exec stream is cut mid-output" ? sdkAbsorbed(row, "exec") : row));
  if (vendor !== "modal") return listed;
  const absorbedOps: Record<string, Fault["op"]> = {
    "create answers 503": "create",
    "create answers 429 with Retry-After": "create",
    "exec answers 500 mid-turn": "exec",
    "the exec stream is cut mid-output": "exec",
    "a file read answers 500 mid-turn": "files",
    "the hard kill answers 500": "kill",
  };
  return listed.map((row) => {
    const op = absorbedOps[row.name];
    return op === undefined ? row : sdkAbsorbed(row, op);
  });
}

function baseRows(vendor: Vendor): Row[] {
  // E2B's SDK honours Retry-After on its control plane and retries the create itself.
  const retriesOn429 = vendor === "e2b";
  // Vercel's SDK retries a 5xx or 429 twice itself: an outage there lasts for all three attempts.
  const attempts = vendor === "vercel" ? 3 : 1;
  // Superserve's SDK answers a refused exec socket by re-activating the sandbox and dialling once more.
  const execAttempts = vendor === "superserve" ? 2 : attempts;
  return [
    {
      name: "create answers 503",
      before: { op: "create", kind: "status", status: 503 },
      beforeTimes: attempts,
      script: completedSimply,
      expect: (result) => {
        failedAt("acquire_compute")(result);
        expect(result).toMatchObject({ cleanup: { compute: "none" } });
      },
      revision: null,
    },
    {
      name: "create answers 429 with Retry-After",
      before: { op: "create", kind: "rate_limited", retryAfterSeconds: 1 },
      beforeTimes: attempts,
      script: completedSimply,
      expect: (result) => (retriesOn429 ? expect(result).toMatchObject({ type: "completed" }) : failedAt("acquire_compute")(result)),
      revision: retriesOn429 ? 2 : null,
    },
    {
      name: "create never answers",
      before: { op: "create", kind: "hang" },
      script: completedSimply,
      expect: (result) => {
        failedAt("acquire_compute")(result);
        expect(result.trace.find((t) => t.step === "acquire_compute")?.detail).toContain("no answer within");
      },
      revision: null,
    },
    {
      name: "exec answers 500 mid-turn",
      script: async ({ tools, input, standIn }) => {
        await firstTurn(tools, input);
        void standIn.inject({ op: "exec", kind: "status", status: 500 }, execAttempts);
        const second = await tools.exec("echo turn-2 > /workspace/notes.txt");
        return ok(second) ? { type: "completed" } : { type: "failed", error: `turn 2: ${second.type}` };
      },
      expect: (result) => {
        failedAt("run_harness")(result);
        expect(result).toMatchObject({ cleanup: { compute: "terminated" } });
      },
      revision: 1,
    },
    {
      name: "the exec stream is cut mid-output",
      script: async ({ tools, input, standIn }) => {
        await firstTurn(tools, input);
        void standIn.inject({ op: "exec", kind: "cut", afterBytes: 4 });
        const second = await tools.exec("echo 0123456789; sleep 1; echo turn-2 > /workspace/notes.txt");
        return ok(second) ? { type: "completed" } : { type: "failed", error: `turn 2: ${second.type}` };
      },
      expect: (result) => {
        failedAt("run_harness")(result);
        expect(result).toMatchObject({ cleanup: { compute: "terminated" } });
      },
      revision: 1,
    },
    {
      name: "the sandbox vanishes mid-turn",
      script: async ({ attempt, tools, input, standIn, driver }) => {
        if (attempt === 2) {
          // The cold acquire restored the last publication.
          if ((await tools.read("/workspace/notes.txt")) !== "turn-1\n") return { type: "failed", error: "turn 1 was not restored" };
          return ok(await tools.exec("echo turn-2 >> /workspace/notes.txt")) ? { type: "completed" } : { type: "failed", error: "turn 2" };
        }
        await firstTurn(tools, input);
        void standIn.inject({ op: "exec", kind: "vanish" });
        await tools.exec("echo never");
        const beat = await driver.heartbeat({ scope: input.scope, fence: input.fence, lease: input.sandbox, signal: never() });
        return beat.type === "lost"
          ? { type: "sandbox_lost", reason: beat.reason }
          : { type: "failed", error: "the sandbox did not vanish" };
      },
      expect: (result, harness) => {
        expect(result).toMatchObject({ type: "completed", cleanup: { compute: "terminated" } });
        expect(harness.placements).toBe(2);
        expect(result.trace.filter((t) => t.step === "acquire_compute" && t.status === "ok")).toHaveLength(2);
      },
      revision: 2,
    },
    {
      name: "a file read answers 500 mid-turn",
      script: async ({ tools, input, standIn }) => {
        await firstTurn(tools, input);
        void standIn.inject({ op: "files", kind: "status", status: 500 }, attempts);
        const read = await tools.read("/workspace/notes.txt");
        return read === null ? { type: "failed", error: "reading notes.txt failed" } : { type: "completed" };
      },
      expect: (result) => {
        failedAt("run_harness")(result);
        expect(result).toMatchObject({ cleanup: { compute: "terminated" } });
      },
      revision: 1,
    },
    {
      name: "the hard kill answers 500",
      script: async ({ tools, input, standIn }) => {
        await firstTurn(tools, input);
        void standIn.inject({ op: "kill", kind: "status", status: 500 }, attempts);
        return { type: "completed" };
      },
      expect: (result) => expect(result).toMatchObject({ type: "completed", cleanup: { compute: "orphaned" } }),
      orphan: true,
      revision: 2,
    },
    {
      name: "the hard kill never answers",
      script: async ({ tools, input, standIn }) => {
        await firstTurn(tools, input);
        void standIn.inject({ op: "kill", kind: "hang" });
        return { type: "completed" };
      },
      expect: (result) => expect(result).toMatchObject({ type: "completed", cleanup: { compute: "orphaned" } }),
      orphan: true,
      revision: 2,
    },
  ];
}

export function describeChaos(vendor: Vendor): void {
  describe(`chaos on the ${vendor} driver`, () => {
    let standIn: CloudStandIn;
    let storage: TestStorage;
    let dir: string;

    beforeAll(async () => {
      standIn = await startVendorStandIn(vendor);
    });
    afterAll(async () => {
      await standIn?.close();
    });
    beforeEach(async () => {
      storage = await openTestStorage("sqlite");
      dir = await mkdtemp(join(tmpdir(), "openma-chaos-"));
    });
    afterEach(async () => {
      standIn.faults.clear();
      await storage?.cleanup();
      await rm(dir, { recursive: true, force: true });
    });

    it.each(rows(vendor).map((row) => [row.name, row] as const))("%s", async (_name, row) => {
      const { db } = storage.storage;
      const fences = new SqlRuntimeResourceFence(db, { clock: realScheduler });
      const orphans = new SqlRuntimeOrphanStore(db, { clock: realScheduler });
      const store = new FsBlobStore(join(dir, "blobs"));
      const driver = vendorDriver(vendor, standIn, { callTimeoutMs: CALL_TIMEOUT_MS });
      const tools = (lease: Parameters<RemoteSandboxDriver["toolSandbox"]>[0]) => driver.toolSandbox(lease);
      const harness = new ScriptedHarness(driver, standIn, row.script);
      const host = new ManagedRuntimeHost({
        fences,
        orphans,
        sandbox: driver,
        workspace: new RemoteCheckpointWorkspace({ root: join(dir, "workspaces"), store, tools }),
        outputs: new RemoteSessionOutputs({ root: join(dir, "outputs"), store, scheduler: realScheduler, tools }),
        harness,
        lanes: ["ama_worker"],
        scheduler: realScheduler,
        newOwnerId: () => `chaos-${randomBytes(4).toString("hex")}`,
        timings: TIMINGS,
      });
      const scope = { environmentId: "env_chaos", sessionId: `sesn_${randomBytes(6).toString("hex")}` };
      if (row.before) void standIn.inject(row.before, row.beforeTimes);
      const firedBefore = standIn.faults.fired.length;
      const result = await host.run({ scope, profile: AMA_WORKER_PROFILE });
      if (row.absorbed) expect(standIn.faults.fired.slice(firedBefore).map((f) => f.op)).toContain(row.absorbed);
      try {
        row.expect(result, harness);
      } catch (err) {
        throw new Error(`${err instanceof Error ? err.message : String(err)}\ntrace: ${JSON.stringify(result.trace, null, 1)}`);
      }
      const active = await fences.active({ scope, signal: never() });
      expect(active?.revision ?? null).toBe(row.revision);

      if (row.orphan) {
        // The reaper runs with a fresh driver instance, from the token-free record alone.
        const [orphanId] = "cleanup" in result ? result.cleanup.orphanIds : [];
        expect(orphanId).toBeDefined();
        const reaper = vendorDriver(vendor, standIn, { callTimeoutMs: CALL_TIMEOUT_MS });
        const report = await orphans.reconcile({ reaper, signal: never() });
        expect(report).toMatchObject({ reaped: 1 });
        expect(await orphans.get({ id: orphanId as string, signal: never() })).toMatchObject({ state: "reaped" });
      }
      // Nothing left at the provider: not in the stand-in's books, not on the engine. A create that
      // timed out may still have made a runtime: the driver looks for it afterwards and removes it.
      await eventually(async () => standIn.live() === 0, "no sandbox left at the stand-in", 45_000);
      expect(await standIn.boxes.containers()).toEqual([]);
    });
  });
}
