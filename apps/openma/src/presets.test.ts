/**
 * The seed's presets on real parts: the Node + Docker preset runs a turn in
 * a real container; the E2B preset, against the E2B stand-in, advertises
 * durable outputs only with a complete output store, and with FILES_S3_*
 * pointing at the S3 stand-in its deliverables land in that bucket.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ManagedRuntimeProfile, resolveManagedRuntimePlan } from "@openma/contract";
import { readImageManifest } from "@openma/driver-node-docker";
import { type HarnessRunInput, type HarnessRunner, type HarnessRunResult, sqlRuntimePorts } from "@openma/host";
import { outputManifestKey } from "@openma/persistence";
import { type S3StandIn, startS3StandIn } from "@openma/s3-standin";
import { CREDENTIALS } from "@openma/s3-standin/testkit";
import { type E2BStandIn, startE2BStandIn } from "@openma/standin-e2b";
import { systemClock } from "@openma/storage";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { createE2BManagedRuntime, createNodeManagedRuntime, hostFor, outputStoreFromEnv } from "./presets.ts";

const PROFILE: ManagedRuntimeProfile = {
  workspace: { requirement: "durable", preferredStrategies: ["checkpoint_restore"] },
  outputs: { requirement: "durable", preferredStrategies: ["final_collect"] },
  runtimeCheckpoint: "disabled",
  driver: { type: "ama_worker", process: { command: "true" } },
};

/** One turn through the sandbox's tool port: a file in the workspace and a deliverable. */
class OneTurn implements HarnessRunner {
  constructor(private readonly exec: (input: HarnessRunInput, command: string) => Promise<boolean>) {}
  async run(input: HarnessRunInput): Promise<HarnessRunResult> {
    const ok = await this.exec(input, "echo notes > /workspace/notes.txt && echo report > /mnt/session/outputs/report.md");
    return ok ? { type: "completed" } : { type: "failed", error: "the turn's command failed" };
  }
  async drain(): Promise<{ type: "drained" }> {
    return { type: "drained" };
  }
}

let storage: TestStorage;
let dir: string;

beforeEach(async () => {
  storage = await openTestStorage("sqlite");
  dir = await mkdtemp(join(tmpdir(), "openma-presets-"));
});
afterEach(async () => {
  await storage?.cleanup();
  await rm(dir, { recursive: true, force: true });
});

describe("createNodeManagedRuntime", () => {
  it("runs a turn in a real container and publishes its workspace and outputs", async () => {
    const manifest = await readImageManifest();
    if (!manifest.ok) throw new Error(manifest.message);
    const runtime = await createNodeManagedRuntime({
      rootDir: dir,
      storage: storage.storage,
      ownerId: "runtime-host:preset-test",
      leaseTtlMs: 90_000,
      heartbeatIntervalMs: 30_000,
      image: manifest.manifest.busybox.image,
    });
    expect(runtime.capabilities(["ama_worker"]).outputs).toEqual(
      expect.arrayContaining([{ strategy: "final_collect", durability: "durable" }]),
    );
    const harness = new OneTurn(async (input, command) => {
      const result = await runtime
        .toolSandbox(input.sandbox)
        .exec({ command: ["sh", "-c", command], timeoutMs: 60_000, signal: input.signal });
      return result.type === "exited" && result.exitCode === 0;
    });
    const scope = { environmentId: "env_preset", sessionId: `sesn_${randomBytes(6).toString("hex")}` };
    const result = await runtime.host({ harness, lanes: ["ama_worker"] }).run({ scope, profile: PROFILE });
    expect(result).toMatchObject({ type: "completed", publication: { revision: 1 }, cleanup: { compute: "terminated" } });
  });
});

describe("createE2BManagedRuntime", () => {
  let e2b: E2BStandIn;
  let s3: S3StandIn;
  beforeAll(async () => {
    e2b = await startE2BStandIn();
    s3 = await startS3StandIn({ ...CREDENTIALS, buckets: ["deliverables"] });
  });
  afterAll(async () => {
    await e2b?.close();
    await s3?.close();
  });

  it("advertises no output strategy without a complete store, so a durable-output profile is refused", () => {
    const runtime = createE2BManagedRuntime({ environment: e2b.env, leaseTtlMs: 90_000, rootDir: dir });
    expect(runtime.outputs).toBeNull();
    const capabilities = runtime.capabilities(["ama_worker"]);
    expect(capabilities.outputs).toEqual([]);
    expect(capabilities.runtimeCheckpoints).toEqual([]);
    const plan = resolveManagedRuntimePlan(PROFILE, capabilities);
    expect(plan.type === "rejected" && plan.error.missing.map((m) => m.guarantee)).toEqual(["output_durability"]);
    expect(() => createE2BManagedRuntime({ environment: { ...e2b.env, FILES_S3_BUCKET: "x" }, leaseTtlMs: 90_000 })).toThrow(
      /FILES_S3_ENDPOINT, FILES_S3_ACCESS_KEY, FILES_S3_SECRET_KEY/,
    );
    expect(outputStoreFromEnv({})).toBeNull();
  });

  it("collects outputs into the FILES_S3_* store and publishes them, against the E2B and S3 stand-ins", async () => {
    const environment = {
      ...e2b.env,
      FILES_S3_ENDPOINT: s3.endpoint,
      FILES_S3_BUCKET: "deliverables",
      FILES_S3_ACCESS_KEY: CREDENTIALS.accessKeyId,
      FILES_S3_SECRET_KEY: CREDENTIALS.secretAccessKey,
      FILES_S3_PREFIX: "openma",
    };
    const runtime = createE2BManagedRuntime({ environment, leaseTtlMs: 90_000, rootDir: dir });
    try {
      expect(runtime.capabilities(["ama_worker"]).outputs).toEqual([{ strategy: "final_collect", durability: "durable" }]);
      const harness = new OneTurn(async (input, command) => {
        const result = await runtime
          .toolSandbox(input.sandbox)
          .exec({ command: ["sh", "-c", command], timeoutMs: 60_000, signal: input.signal });
        return result.type === "exited" && result.exitCode === 0;
      });
      const { fences, orphans } = sqlRuntimePorts(storage.storage.db, systemClock);
      const host = hostFor(runtime, { fences, orphans, harness, lanes: ["ama_worker"], ownerId: "preset-e2b" });
      const scope = { environmentId: "env_preset", sessionId: `sesn_${randomBytes(6).toString("hex")}` };
      const result = await host.run({ scope, profile: PROFILE });
      expect(result).toMatchObject({ type: "completed", publication: { revision: 1 }, cleanup: { compute: "terminated" } });
      const manifestId = result.type === "completed" ? result.publication?.outputs?.id : undefined;
      expect(manifestId).toBeDefined();
      // The manifest (and the deliverable's blob) are objects in the S3 bucket.
      const store = outputStoreFromEnv(environment);
      if (store === null || "missing" in store) throw new Error("no store");
      expect(await store.exists(outputManifestKey(manifestId as string))).toBe(true);
      expect(e2b.live()).toBe(0);
    } finally {
      await runtime.close();
    }
  });
});
