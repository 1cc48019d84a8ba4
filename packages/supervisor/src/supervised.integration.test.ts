/**
 * The openma_supervised lane end to end on real parts: the reference
 * supervisor (bin/openma-supervisor.mjs, bound read-only into the sandbox)
 * under the real bubblewrap and Docker drivers, composed into a
 * ManagedRuntimeHost with the real SQL fence and orphan store (SQLite), the
 * filesystem workspace and output adapters over a real blob store.
 *
 * The harness is a shell command the supervisor runs once per turn; each
 * turn writes into /workspace and /mnt/session/outputs and asks for a
 * checkpoint, which the host publishes under its fence. The tests then read
 * the publication history, the stored manifests and blobs, restore the
 * workspace in a second run, and check that no sandbox is left behind.
 * Missing bwrap, dockerd or sandbox images fail the tests (never skip).
 */
import { createHash, randomBytes } from "node:crypto";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import type {
  FenceIdentity,
  ManagedRuntimeProfile,
  ManagedSandboxLease,
  ManagedSandboxPort,
  RuntimeResourceScope,
  SandboxProcessPort,
} from "@openma/contract";
import { BubblewrapSandbox, bubblewrapProcesses } from "@openma/driver-bubblewrap";
import { assertBwrapInstalled, scratch } from "@openma/driver-bubblewrap/test-support";
import { dockerProcesses, readImageManifest } from "@openma/driver-node-docker";
import { type DockerTestEnv, removeRunContainers, requireDocker, TEST_LABEL } from "@openma/driver-node-docker/testing";
import { hostProcesses } from "@openma/driver-suite/host-processes";
import { FsCheckpointWorkspace, FsSessionOutputs, ManagedRuntimeHost, type RuntimeRunResult } from "@openma/host";
import { loadCheckpointManifest, type OutputEntry, outputManifestKey, parseOutputManifest } from "@openma/persistence";
import { FsBlobStore } from "@openma/storage/blobs";
import { SqlRuntimeResourceFence } from "@openma/storage/fence";
import { SqlRuntimeOrphanStore } from "@openma/storage/orphans";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { realScheduler } from "@openma/time";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { SupervisorLogEntry } from "./channel.ts";
import { PROTOCOL } from "./protocol.ts";
import { referenceSupervisorBind, referenceSupervisorCommand } from "./reference.ts";
import { SupervisedHarnessRunner } from "./runner.ts";

const never = () => new AbortController().signal;
const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

/** One real sandbox driver, its process port, and how to see what it left behind. */
interface RealDriver {
  sandbox: ManagedSandboxPort;
  processes: SandboxProcessPort;
  /** Containers or sandbox processes of this test still present (empty when clean). */
  leftovers(): Promise<string[]>;
  close(): Promise<void>;
}

async function bubblewrapDriver(root: string): Promise<RealDriver> {
  assertBwrapInstalled();
  const images = await readImageManifest();
  if (!images.ok) throw new Error(images.message);
  const stateRoot = join(root, "bwrap-state");
  const sandbox = new BubblewrapSandbox({ stateRoot, rootfs: images.manifest.base.rootfs, binds: [referenceSupervisorBind()] });
  return {
    sandbox,
    processes: bubblewrapProcesses(sandbox),
    // Every bwrap process of a runtime carries its state directory in its argv (the private /tmp bind).
    leftovers: async () => (await hostProcesses()).filter((p) => p.argv.includes(stateRoot)).map((p) => `pid ${p.pid}: ${p.argv}`),
    close: () => sandbox.shutdown(),
  };
}

async function dockerDriver(): Promise<RealDriver> {
  const env: DockerTestEnv = await requireDocker();
  const sandbox = env.driver({ image: env.images.base.image, binds: [referenceSupervisorBind()] });
  return {
    sandbox,
    processes: dockerProcesses(sandbox),
    leftovers: async () =>
      (await env.docker.listContainers({ all: true, filters: { label: [`${TEST_LABEL}=${env.runId}`] } })).map(
        (c) => `container ${c.Names.join(",")} (${c.State})`,
      ),
    close: () => removeRunContainers(env),
  };
}

const DRIVERS = [
  ["bubblewrap", bubblewrapDriver],
  ["docker", (_root: string) => dockerDriver()],
] as const;

describe.each(DRIVERS)("openma_supervised on the real %s driver", (_name, makeDriver) => {
  let root: string;
  let storage: TestStorage;
  let driver: RealDriver;
  let store: FsBlobStore;
  let fences: SqlRuntimeResourceFence;
  let scope: RuntimeResourceScope;
  /** Unique per test: it appears in the supervisor's argv, so a surviving supervisor is found by it. */
  let harness: { id: string; version: string };
  let log: SupervisorLogEntry[];
  /** Sees every log entry as it happens (a test waits on one). */
  let watch: (entry: SupervisorLogEntry) => void;
  let leases: ManagedSandboxLease[];
  let host: ManagedRuntimeHost;

  beforeEach(async () => {
    root = await scratch("supervised");
    storage = await openTestStorage("sqlite");
    driver = await makeDriver(root);
    store = new FsBlobStore(join(root, "blobs"));
    fences = new SqlRuntimeResourceFence(storage.storage.db, { clock: realScheduler });
    scope = { environmentId: "env_supervised", sessionId: `sesn_${randomBytes(6).toString("hex")}` };
    harness = { id: `demo-${randomBytes(4).toString("hex")}`, version: "1.0.0" };
    log = [];
    watch = () => {};
    leases = [];
    // Records the lease of every spawn, so a test can pull the sandbox out from under a running supervisor.
    const processes: SandboxProcessPort = {
      spawn: (lease, input) => {
        leases.push(lease);
        return driver.processes.spawn(lease, input);
      },
    };
    host = new ManagedRuntimeHost({
      fences,
      orphans: new SqlRuntimeOrphanStore(storage.storage.db, { clock: realScheduler }),
      sandbox: driver.sandbox,
      workspace: new FsCheckpointWorkspace({ root: join(root, "workspaces"), store }),
      outputs: new FsSessionOutputs({ root: join(root, "outputs"), store, scheduler: realScheduler }),
      harness: new SupervisedHarnessRunner({
        processes,
        scheduler: realScheduler,
        sandbox: driver.sandbox,
        onLog: (_runtimeId, entry) => {
          log.push(entry);
          watch(entry);
        },
      }),
      lanes: ["openma_supervised"],
      scheduler: realScheduler,
      newOwnerId: () => `supervised-it:${randomBytes(6).toString("hex")}`,
    });
  });

  afterEach(async () => {
    await driver?.close();
    await storage?.cleanup();
    await rm(root, { recursive: true, force: true });
  });

  function profile(turns: number, script: string): ManagedRuntimeProfile {
    return {
      workspace: { requirement: "durable", preferredStrategies: ["checkpoint_restore"] },
      outputs: { requirement: "durable", preferredStrategies: ["final_collect"] },
      runtimeCheckpoint: "disabled",
      driver: {
        type: "openma_supervised",
        protocol: PROTOCOL,
        supervisor: referenceSupervisorCommand({ harness, turns, harnessCommand: ["sh", "-c", script] }),
        harness,
        readyTimeoutMs: 30_000,
        heartbeatTimeoutMs: 10_000,
        drainTimeoutMs: 30_000,
      },
    };
  }

  async function outputEntries(manifestId: string): Promise<OutputEntry[]> {
    const bytes = await store.get(outputManifestKey(manifestId));
    const parsed = parseOutputManifest(bytes!);
    if (!parsed.ok) throw new Error(parsed.message);
    return parsed.manifest.entries;
  }

  async function workspacePaths(candidateId: string): Promise<string[]> {
    const loaded = await loadCheckpointManifest(store, candidateId);
    if (!loaded.ok) throw new Error(`workspace manifest ${candidateId}: ${JSON.stringify(loaded)}`);
    return loaded.manifest.entries.map((entry) => entry.path);
  }

  async function blobText(entry: OutputEntry): Promise<string> {
    return Buffer.from((await store.get(entry.blobKey))!).toString("utf8");
  }

  function completed(result: RuntimeRunResult): Extract<RuntimeRunResult, { type: "completed" }> {
    if (result.type !== "completed")
      throw new Error(`the run did not complete: ${JSON.stringify(result, null, 2)}\n${JSON.stringify(log)}`);
    return result;
  }

  const checkpointResults = () =>
    log.flatMap((entry) => (entry.type === "sent" && entry.message.type === "checkpoint_result" ? [entry.message] : []));

  it("publishes a revision per turn, restores it in the next run, and leaves no sandbox behind", async () => {
    const turn = [
      "set -e",
      'echo "work of $OPENMA_TURN_ID" > "/workspace/$OPENMA_TURN_ID.txt"',
      'printf "# %s\\n" "$OPENMA_TURN_ID" > "/mnt/session/outputs/$OPENMA_TURN_ID.md"',
    ].join("\n");
    const first = completed(await host.run({ scope, profile: profile(2, turn) }));

    // Two turn commits and the final one, each its own revision under generation 1.
    expect(checkpointResults()).toEqual([
      { type: "checkpoint_result", turnId: "turn-1", result: { type: "committed", revision: 1, replayed: false } },
      { type: "checkpoint_result", turnId: "turn-2", result: { type: "committed", revision: 2, replayed: false } },
    ]);
    const history = await fences.history({ scope, limit: 10, signal: never() });
    expect(history.map((h) => [h.revision, h.idempotencyKey])).toEqual([
      [3, "1:final:publish"],
      [2, "1:turn:turn-2:publish"],
      [1, "1:turn:turn-1:publish"],
    ]);
    const [final, turn2, turn1] = history;
    expect(await workspacePaths(turn1!.workspace!.id)).toEqual(["turn-1.txt"]);
    expect(await workspacePaths(turn2!.workspace!.id)).toEqual(["turn-1.txt", "turn-2.txt"]);
    expect((await outputEntries(turn1!.outputs!.id)).map((e) => e.path)).toEqual(["turn-1.md"]);
    expect(first.publication).toMatchObject({ revision: 3, workspace: final!.workspace, outputs: { entryCount: 2 } });
    const deliverables = await outputEntries(first.publication!.outputs!.id);
    expect(deliverables.map(({ path, size, sha256 }) => ({ path, size, sha256 }))).toEqual([
      { path: "turn-1.md", size: 9, sha256: sha256("# turn-1\n") },
      { path: "turn-2.md", size: 9, sha256: sha256("# turn-2\n") },
    ]);
    expect(first.trace.map((t) => `${t.step}:${t.status}`)).toContain("drain:ok");
    expect(first.cleanup).toEqual({ compute: "terminated", orphanIds: [] });

    // A second generation restores the published workspace; its harness fails the run if a file is missing.
    const verify = [
      "set -e",
      '{ echo "restored=$OPENMA_RESTORED_CANDIDATE"; cat /workspace/turn-1.txt /workspace/turn-2.txt; } > /mnt/session/outputs/restored.txt',
    ].join("\n");
    const second = completed(await host.run({ scope, profile: profile(1, verify) }));
    expect(second).toMatchObject({ generation: 2, publication: { revision: 5, generation: 2 } });
    const [restoredTxt] = await outputEntries(second.publication!.outputs!.id);
    expect(restoredTxt!.path).toBe("restored.txt");
    expect(await blobText(restoredTxt!)).toBe(`restored=${final!.workspace!.id}\nwork of turn-1\nwork of turn-2\n`);

    expect(await driver.leftovers()).toEqual([]);
    const supervisors = (await hostProcesses()).filter((p) => p.argv.includes(harness.id));
    expect(supervisors).toEqual([]);
  });

  it("reads a sandbox pulled out from under the supervisor as sandbox loss and cold-restarts from the last turn commit", async () => {
    const turn = [
      "set -e",
      'seen=$(cat "/workspace/$OPENMA_TURN_ID.txt" 2>/dev/null || echo none)',
      'echo "$OPENMA_TURN_ID saw $seen" >> "/mnt/session/outputs/seen-by-attempt-$OPENMA_ATTEMPT.txt"',
      'echo "attempt $OPENMA_ATTEMPT" > "/workspace/$OPENMA_TURN_ID.txt"',
      // The first placement hangs in its second turn, until the test removes its sandbox.
      'if [ "$OPENMA_TURN_ID" = turn-2 ] && [ "$OPENMA_ATTEMPT" = 1 ]; then exec sleep 600; fi',
    ].join("\n");
    const committed = new Promise<void>((resolve) => {
      watch = (entry) => {
        if (entry.type === "sent" && entry.message.type === "checkpoint_result") resolve();
      };
    });
    const run = host.run({ scope, profile: profile(2, turn) });
    await committed;
    const lease = leases[0]!;
    const fence = { scope, ownerId: "test", generation: 1, expiresAt: Date.now() + 60_000 } satisfies FenceIdentity;
    expect(await driver.sandbox.terminate({ scope, fence, lease, reason: "cancelled", signal: never() })).toEqual({ type: "terminated" });

    const result = completed(await run);
    const steps = result.trace.map((t) => `${t.step}:${t.status}`);
    expect(steps).toContain("run_harness:lost");
    expect(result.trace.find((t) => t.step === "run_harness" && t.status === "lost")!.detail).toMatch(/before completing/);
    expect(leases).toHaveLength(2);
    expect(leases[1]!.runtimeId).not.toBe(lease.runtimeId);
    // Attempt 2 restored turn 1's publication (not the empty workspace, not the lost attempt's unpublished turn 2).
    const entries = await outputEntries(result.publication!.outputs!.id);
    const byPath = new Map(await Promise.all(entries.map(async (e) => [e.path, await blobText(e)] as const)));
    expect(byPath.get("seen-by-attempt-2.txt")).toBe("turn-1 saw attempt 1\nturn-2 saw none\n");
    // Attempt 1's outputs count only as far as they were published (the turn-1 commit), if outputs carry over at all.
    expect([undefined, "turn-1 saw none\n"]).toContain(byPath.get("seen-by-attempt-1.txt"));
    expect(await workspacePaths(result.publication!.workspace!.id)).toEqual(["turn-1.txt", "turn-2.txt"]);
    expect(await driver.leftovers()).toEqual([]);
    expect((await hostProcesses()).filter((p) => p.argv.includes(harness.id))).toEqual([]);
  });
});
