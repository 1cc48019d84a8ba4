/**
 * The openma_supervised lane on the cloud drivers: the reference supervisor
 * (bin/openma-supervisor.mjs, written into each remote runtime before it
 * starts, as a template would ship it) speaks the supervisor protocol over
 * the driver's duplex process; the host publishes each turn it checkpoints
 * through the remote workspace and output ports. A second generation
 * restores the published workspace into a fresh remote sandbox, and nothing
 * is left at the provider.
 */
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ManagedRuntimeProfile } from "@openma/contract";
import { conformanceOf } from "@openma/contract/conformance";
import { ManagedRuntimeHost, type RuntimeRunResult } from "@openma/host";
import { type OutputEntry, outputManifestKey, parseOutputManifest } from "@openma/persistence";
import { RemoteCheckpointWorkspace, RemoteSessionOutputs } from "@openma/remote-bindings";
import { preparedProcesses } from "@openma/runtime-host";
import type { CloudStandIn } from "@openma/standin-kit";
import { FsBlobStore } from "@openma/storage/blobs";
import { SqlRuntimeResourceFence } from "@openma/storage/fence";
import { SqlRuntimeOrphanStore } from "@openma/storage/orphans";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { PROTOCOL, REFERENCE_SUPERVISOR, referenceSupervisorCommand, SupervisedHarnessRunner } from "@openma/supervisor";
import { realScheduler } from "@openma/time";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { startVendorStandIn, VENDORS, vendorDriver } from "../support/cloud.ts";

const never = () => new AbortController().signal;
const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

/** The vendors whose conformance row offers the lane (Vercel's commands take no streaming stdin: `ama_worker` only). */
const SUPERVISED = VENDORS.filter((vendor) => conformanceOf(vendor)?.capabilities.lanes.includes("openma_supervised"));

describe.each(SUPERVISED)("openma_supervised on the %s driver", (vendor) => {
  let standIn: CloudStandIn;
  let storage: TestStorage;
  let root: string;

  beforeEach(async () => {
    standIn = await startVendorStandIn(vendor);
    storage = await openTestStorage("sqlite");
    root = await mkdtemp(join(tmpdir(), "openma-supervised-cloud-"));
  });
  afterEach(async () => {
    await standIn?.close();
    await storage?.cleanup();
    await rm(root, { recursive: true, force: true });
  });

  it("publishes a revision per turn, restores it in a fresh remote sandbox, and leaves nothing at the provider", async () => {
    const driver = vendorDriver(vendor, standIn);
    const script = await readFile(join(REFERENCE_SUPERVISOR.hostDir, REFERENCE_SUPERVISOR.script));
    const target = `${REFERENCE_SUPERVISOR.sandboxDir}/${REFERENCE_SUPERVISOR.script}`;
    const processes = preparedProcesses(driver.processes(), async (lease) => {
      const wrote = await driver.toolSandbox(lease).writeFile({ path: target, content: script, mode: 0o644, signal: never() });
      if (wrote.type !== "ok") throw new Error(`installing the supervisor failed: ${wrote.message}`);
    });
    const store = new FsBlobStore(join(root, "blobs"));
    const tools = (lease: Parameters<typeof driver.toolSandbox>[0]) => driver.toolSandbox(lease);
    const fences = new SqlRuntimeResourceFence(storage.storage.db, { clock: realScheduler });
    const host = new ManagedRuntimeHost({
      fences,
      orphans: new SqlRuntimeOrphanStore(storage.storage.db, { clock: realScheduler }),
      sandbox: driver,
      workspace: new RemoteCheckpointWorkspace({ root: join(root, "workspaces"), store, tools }),
      outputs: new RemoteSessionOutputs({ root: join(root, "outputs"), store, scheduler: realScheduler, tools }),
      harness: new SupervisedHarnessRunner({ processes, scheduler: realScheduler, sandbox: driver }),
      lanes: ["openma_supervised"],
      scheduler: realScheduler,
      newOwnerId: () => `supervised-cloud:${randomBytes(6).toString("hex")}`,
    });
    const harness = { id: `demo-${randomBytes(4).toString("hex")}`, version: "1.0.0" };
    const profile = (turns: number, command: string): ManagedRuntimeProfile => ({
      workspace: { requirement: "durable", preferredStrategies: ["checkpoint_restore"] },
      outputs: { requirement: "durable", preferredStrategies: ["final_collect"] },
      runtimeCheckpoint: "disabled",
      driver: {
        type: "openma_supervised",
        protocol: PROTOCOL,
        supervisor: referenceSupervisorCommand({ harness, turns, harnessCommand: ["sh", "-c", command] }),
        harness,
        readyTimeoutMs: 60_000,
        heartbeatTimeoutMs: 30_000,
        drainTimeoutMs: 60_000,
      },
    });
    const completed = (result: RuntimeRunResult) => {
      if (result.type !== "completed") throw new Error(`the run did not complete: ${JSON.stringify(result, null, 1)}`);
      return result;
    };
    const entries = async (manifestId: string): Promise<OutputEntry[]> => {
      const parsed = parseOutputManifest((await store.get(outputManifestKey(manifestId)))!);
      if (!parsed.ok) throw new Error(parsed.message);
      return parsed.manifest.entries;
    };
    const scope = { environmentId: "env_supervised_cloud", sessionId: `sesn_${randomBytes(6).toString("hex")}` };

    const turn = [
      "set -e",
      'echo "work of $OPENMA_TURN_ID" > "/workspace/$OPENMA_TURN_ID.txt"',
      'printf "# %s\\n" "$OPENMA_TURN_ID" > "/mnt/session/outputs/$OPENMA_TURN_ID.md"',
    ].join("\n");
    const first = completed(await host.run({ scope, profile: profile(2, turn) }));
    const history = await fences.history({ scope, limit: 10, signal: never() });
    expect(history.map((h) => h.idempotencyKey)).toEqual(["1:final:publish", "1:turn:turn-2:publish", "1:turn:turn-1:publish"]);
    expect((await entries(first.publication!.outputs!.id)).map(({ path, sha256: hash }) => [path, hash])).toEqual([
      ["turn-1.md", sha256("# turn-1\n")],
      ["turn-2.md", sha256("# turn-2\n")],
    ]);
    expect(first.cleanup).toEqual({ compute: "terminated", orphanIds: [] });

    const verify = "{ cat /workspace/turn-1.txt /workspace/turn-2.txt; } > /mnt/session/outputs/restored.txt";
    const second = completed(await host.run({ scope, profile: profile(1, verify) }));
    expect(second).toMatchObject({ generation: 2, publication: { generation: 2 } });
    const restored = (await entries(second.publication!.outputs!.id)).find((e) => e.path === "restored.txt");
    expect(Buffer.from((await store.get(restored!.blobKey))!).toString("utf8")).toBe("work of turn-1\nwork of turn-2\n");

    expect(standIn.live()).toBe(0);
    expect(await standIn.boxes.containers()).toEqual([]);
  });
});
