/**
 * Chaos lane, end to end on real parts: the filesystem workspace and output
 * adapters over `@openma/persistence`, the real SQL fence on both backends,
 * a fake sandbox. A host "crashes" (its process freezes mid-turn), a second
 * host takes over after the lease expires and restores exactly what was
 * published; the frozen host wakes up and its late publication is refused.
 * A corrupt newest candidate falls back to the previous verified revision.
 */
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { FlatMetadata } from "@openma/contract";
import { loadCheckpointManifest, packKey } from "@openma/persistence";
import { FsBlobStore } from "@openma/storage/blobs";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { ManualScheduler } from "@openma/time";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { FsSessionOutputs } from "./adapters/fs-outputs.ts";
import { FsCheckpointWorkspace } from "./adapters/fs-workspace.ts";
import { gate } from "./testing/faults.ts";
import { AMA_WORKER_PROFILE, openRig, type Rig, TEST_TIMINGS, until } from "./testing/rig.ts";
import type { HarnessRunInput, HarnessRunResult, TurnCommitResult } from "./types.ts";

const signal = new AbortController().signal;

function hostPath(binding: { metadata?: FlatMetadata } | null): string {
  return binding!.metadata!.hostPath as string;
}

async function readTree(input: HarnessRunInput, names: string[]): Promise<Record<string, string | null>> {
  const out: Record<string, string | null> = {};
  for (const name of names) out[name] = await readFile(join(hostPath(input.workspace), name), "utf8").catch(() => null);
  return out;
}

describe.each(BACKENDS)("crash recovery on real adapters and the %s fence", (dialect) => {
  let storage: TestStorage;
  let dir: string;
  let rig: Rig;
  let store: FsBlobStore;
  let workspace: FsCheckpointWorkspace;
  let outputs: FsSessionOutputs;

  beforeAll(async () => {
    storage = await openTestStorage(dialect);
  });
  afterAll(async () => storage?.cleanup());
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "openma-host-"));
    rig = openRig(storage);
    store = new FsBlobStore(join(dir, "blobs"));
    workspace = new FsCheckpointWorkspace({ root: join(dir, "workspaces"), store });
    outputs = new FsSessionOutputs({ root: join(dir, "outputs"), store, scheduler: rig.scheduler });
  });
  afterEach(async () => rm(dir, { recursive: true, force: true }));

  const real = () => ({ workspace, outputs });

  it("publishes a restorable workspace and an output manifest, then restores them byte for byte", async () => {
    const big = "x".repeat(300_000);
    rig.harness.script(
      async (input) => {
        await writeFile(join(hostPath(input.workspace), "main.ts"), "export {}\n");
        await writeFile(join(hostPath(input.workspace), "big.bin"), big);
        await writeFile(join(hostPath(input.outputs), "report.md"), "# report\n");
        return { type: "completed" };
      },
      async (input) => {
        expect(await readTree(input, ["main.ts", "big.bin"])).toEqual({ "main.ts": "export {}\n", "big.bin": big });
        return { type: "completed" };
      },
    );
    const first = await rig.run(undefined, real());
    expect(first).toMatchObject({ type: "completed", publication: { revision: 1, outputs: { entryCount: 1 } } });
    const published = first.type === "completed" ? first.publication! : null;
    expect(published!.workspace!.contentHash).toBe(`sha256:${published!.workspace!.id}`);
    const manifest = await loadCheckpointManifest(store, published!.workspace!.id);
    expect(manifest.ok && manifest.manifest.entries.map((e) => e.path)).toEqual(["big.bin", "main.ts"]);
    const second = await rig.run(undefined, real());
    expect(second.type).toBe("completed");
    expect(rig.harness.runs[1]!.restored).toEqual(published!.workspace);
  });

  it("survives a frozen host: the next owner restores the last publication and the zombie publishes nothing", async () => {
    // Host A runs on its own clock, which stops when its process freezes; the fence sees world time.
    const frozen = new ManualScheduler(rig.scheduler.now());
    const resume = gate();
    const turnCommitted = gate();
    let late: TurnCommitResult | undefined;
    rig.harness.script(async (input): Promise<HarnessRunResult> => {
      await writeFile(join(hostPath(input.workspace), "notes.md"), "published turn\n");
      expect(await input.commitTurn("turn_1")).toMatchObject({ type: "committed", revision: 1 });
      await writeFile(join(hostPath(input.workspace), "notes.md"), "unpublished edit\n");
      turnCommitted.open();
      await resume.promise;
      late = await input.commitTurn("turn_2");
      return { type: "completed" };
    });
    const zombie = rig.run(undefined, { ...real(), scheduler: frozen });
    await turnCommitted.promise;

    rig.scheduler.advance(TEST_TIMINGS.leaseTtlMs + 1);
    let seen: Record<string, string | null> = {};
    rig.harness.script(async (input) => {
      seen = await readTree(input, ["notes.md"]);
      await writeFile(join(hostPath(input.workspace), "notes.md"), "second owner\n");
      return { type: "completed" };
    });
    const successor = await rig.run(undefined, real());
    expect(successor).toMatchObject({ type: "completed", generation: 2, publication: { revision: 2, generation: 2 } });
    expect(seen).toEqual({ "notes.md": "published turn\n" });

    resume.open();
    const result = await zombie;
    expect(late).toEqual({ type: "rejected", reason: "lease_lost" });
    expect(result).toMatchObject({ type: "lease_lost", generation: 1 });
    const history = await rig.sqlFence.history({ scope: rig.scope, limit: 10, signal });
    expect(history.map((h) => [h.revision, h.generation, h.idempotencyKey])).toEqual([
      [2, 2, "2:final:publish"],
      [1, 1, "1:turn:turn_1:publish"],
    ]);
  });

  it("rejects a truncated chunk of the newest candidate and restores the previous verified revision", async () => {
    const contents = ["first version ".repeat(5_000), "second version ".repeat(5_000)];
    for (const content of contents) {
      rig.harness.script(async (input) => {
        await writeFile(join(hostPath(input.workspace), "file.txt"), content);
        return { type: "completed" };
      });
      await rig.run(undefined, real());
    }
    const newest = (await rig.sqlFence.active({ scope: rig.scope, signal }))!.workspace!;
    const loaded = await loadCheckpointManifest(store, newest.id);
    const entry = loaded.ok ? loaded.manifest.entries.find((e) => e.type === "file") : undefined;
    const chunk = entry?.type === "file" ? entry.chunks[0]! : null;
    // The chunk's pack, cut off inside the chunk.
    const bytes = await store.get(packKey(chunk!.pack!));
    await store.put(packKey(chunk!.pack!), bytes!.subarray(0, chunk!.offset! + 10));

    let restored: Record<string, string | null> = {};
    rig.harness.script(async (input) => {
      restored = await readTree(input, ["file.txt"]);
      return { type: "completed" };
    });
    const result = await rig.run(undefined, real());
    expect(result.type).toBe("completed");
    expect(result.trace[2]).toMatchObject({ step: "materialize_workspace", status: "rejected" });
    expect(result.trace[2]!.detail).toMatch(/chunk_corrupt/);
    expect(restored).toEqual({ "file.txt": contents[0] });
  });

  it("uploads outputs while the harness runs with watch_and_upload", async () => {
    const wrote = gate();
    const release = gate();
    rig.harness.script(async (input) => {
      await writeFile(join(hostPath(input.outputs), "progress.log"), "step 1\n");
      wrote.open();
      await release.promise;
      return { type: "completed" };
    });
    const profile = {
      ...AMA_WORKER_PROFILE,
      outputs: { requirement: "durable" as const, preferredStrategies: ["watch_and_upload" as const] },
    };
    const running = rig.run(profile, real());
    await wrote.promise;
    // Two scans: the first sees the file, the second finds it unchanged and uploads it.
    for (let scan = 0; scan < 2; scan++) {
      await until(() => rig.scheduler.pending.includes(5_000), "watch loop idle");
      rig.scheduler.advance(5_000);
    }
    await until(() => rig.scheduler.pending.includes(5_000), "second scan done");
    expect(await store.list("session-outputs/blobs")).toHaveLength(1);
    release.open();
    const result = await running;
    expect(result).toMatchObject({ type: "completed", publication: { outputs: { entryCount: 1 } } });
    expect((await store.list("session-outputs/blobs")).length).toBe(1);
  });
});
