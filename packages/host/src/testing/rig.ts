/**
 * A complete host composition for tests: every port a fake that fails on
 * demand, the real SQL fence and orphan store (SQLite or Postgres) behind a
 * `FaultyFence`, and a ManualScheduler that is also the fence's clock, so
 * time only moves when a test says so.
 */
import { HARNESS_SUPERVISOR_PROTOCOL, type HarnessDriver, type ManagedRuntimeProfile, type RuntimeResourceScope } from "@openma/contract";
import { SqlRuntimeResourceFence } from "@openma/storage/fence";
import { SqlRuntimeOrphanStore } from "@openma/storage/orphans";
import type { TestStorage } from "@openma/storage/testing";
import { ManualScheduler } from "@openma/time";
import { ManagedRuntimeHost } from "../host.ts";
import type { HostTimings, ManagedRuntimeHostDeps, RuntimeRunResult, StepName } from "../types.ts";
import { FakeOutputs, FakeRuntimeCheckpoint, FakeSandbox, FakeWorkspace, ScriptedHarness } from "./fakes.ts";
import { Faults } from "./faults.ts";
import { FaultyFence } from "./fence.ts";

/** Short, distinct timings: each pending sleep's duration says which loop it belongs to. */
export const TEST_TIMINGS: HostTimings = {
  leaseTtlMs: 90_000,
  renewEveryMs: 30_000,
  safetyMarginMs: 10_000,
  renewTimeoutMs: 5_000,
  sandboxHeartbeatMs: 20_000,
  abortGraceMs: 7_000,
  drainTimeoutMs: 60_000,
  terminateTimeoutMs: 11_000,
  publishAttempts: 3,
  publishRetryDelayMs: 1_500,
  maxColdRestarts: 1,
  fallbackDepth: 50,
};

export const AMA_WORKER_PROFILE: ManagedRuntimeProfile = {
  workspace: { requirement: "durable" },
  outputs: { requirement: "durable" },
  runtimeCheckpoint: "disabled",
  driver: { type: "ama_worker", process: { command: "ant-worker", args: ["--once"] } },
};

export const SUPERVISED_DRIVER: Extract<HarnessDriver, { type: "openma_supervised" }> = {
  type: "openma_supervised",
  protocol: HARNESS_SUPERVISOR_PROTOCOL,
  supervisor: { command: "openma-supervisor" },
  harness: { id: "pi", version: "1.0.0" },
  readyTimeoutMs: 30_000,
  heartbeatTimeoutMs: 15_000,
  drainTimeoutMs: 45_000,
};

export interface Rig {
  readonly storage: TestStorage;
  readonly scheduler: ManualScheduler;
  readonly faults: Faults;
  readonly sqlFence: SqlRuntimeResourceFence;
  readonly fences: FaultyFence;
  readonly orphans: SqlRuntimeOrphanStore;
  readonly sandbox: FakeSandbox;
  readonly workspace: FakeWorkspace;
  readonly outputs: FakeOutputs;
  readonly checkpoints: FakeRuntimeCheckpoint;
  readonly harness: ScriptedHarness;
  readonly scope: RuntimeResourceScope;
  deps(overrides?: Partial<ManagedRuntimeHostDeps>): ManagedRuntimeHostDeps;
  host(overrides?: Partial<ManagedRuntimeHostDeps>): ManagedRuntimeHost;
  run(profile?: ManagedRuntimeProfile, overrides?: Partial<ManagedRuntimeHostDeps>): Promise<RuntimeRunResult>;
}

let rigs = 0;

/**
 * A fresh rig over shared storage: each rig has its own session scope, so
 * tests sharing one database (one Postgres schema per file keeps the suite
 * fast) never see each other's fences, publications or orphans.
 */
export function openRig(storage: TestStorage): Rig {
  const scheduler = new ManualScheduler(Date.parse("2026-03-01T00:00:00.000Z"));
  const faults = new Faults();
  const sqlFence = new SqlRuntimeResourceFence(storage.storage.db, { clock: scheduler });
  const sandbox = new FakeSandbox(faults);
  let owners = 0;
  const rig: Rig = {
    storage,
    scheduler,
    faults,
    sqlFence,
    fences: new FaultyFence(sqlFence, faults),
    orphans: new SqlRuntimeOrphanStore(storage.storage.db, { clock: scheduler }),
    sandbox,
    workspace: new FakeWorkspace(faults),
    outputs: new FakeOutputs(faults),
    checkpoints: new FakeRuntimeCheckpoint(faults, sandbox),
    harness: new ScriptedHarness(faults),
    scope: { environmentId: "env_test", sessionId: `sesn_${++rigs}_${process.pid}` },
    deps: (overrides) => ({
      fences: rig.fences,
      orphans: rig.orphans,
      sandbox: rig.sandbox,
      workspace: rig.workspace,
      outputs: rig.outputs,
      runtimeCheckpoint: rig.checkpoints,
      harness: rig.harness,
      lanes: ["ama_worker", "openma_supervised"],
      scheduler,
      newOwnerId: () => `host-test#${++owners}`,
      timings: TEST_TIMINGS,
      ...overrides,
    }),
    host: (overrides) => new ManagedRuntimeHost(rig.deps(overrides)),
    run: (profile = AMA_WORKER_PROFILE, overrides) => rig.host(overrides).run({ scope: rig.scope, profile }),
  };
  return rig;
}

/** `step:status` strings, the shape trace assertions compare. */
export function steps(result: { trace: ReadonlyArray<{ step: string; status: string }> }): string[] {
  return result.trace.map((entry) => `${entry.step}:${entry.status}`);
}

/** The detail of the first trace entry of `step`. */
export function traceDetail(result: { trace: ReadonlyArray<{ step: string; detail?: string }> }, step: StepName): string | undefined {
  return result.trace.find((entry) => entry.step === step)?.detail;
}

/** Lets pending I/O and promise chains run (never advances virtual time). */
export async function settle(rounds = 20): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** Yields to the event loop until `predicate` holds; fails loudly instead of hanging. */
export async function until(predicate: () => boolean, what = "condition", rounds = 1_000_000): Promise<void> {
  for (let i = 0; i < rounds; i++) {
    if (predicate()) return;
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/**
 * Waits for `work`, advancing virtual time only to wake sleeps of the given
 * durations (a publish retry, a grace period) once the host is blocked on
 * one. Renewal sleeps keep their own durations, so they are never woken
 * early by accident.
 */
export async function drive<T>(scheduler: ManualScheduler, work: Promise<T>, durations: readonly number[], rounds = 500_000): Promise<T> {
  let done = false;
  const settled = work.finally(() => {
    done = true;
  });
  for (let i = 0; i < rounds && !done; i++) {
    await settle(2);
    const due = scheduler.pending.find((ms) => durations.includes(ms));
    if (!done && due !== undefined) scheduler.advance(due);
  }
  if (!done) throw new Error("work did not finish while driving virtual time");
  return settled;
}
