/**
 * Runtime presets (seed 004, "Composition examples"): the ports a deployment
 * composes a Managed Runtime Host from, for one provider, with what it can
 * honestly advertise.
 *
 *   const runtime = await createNodeManagedRuntime({ rootDir, storage, ownerId, leaseTtlMs, heartbeatIntervalMs, image });
 *   const host = runtime.host({ harness, lanes: ["ama_worker"] });
 *
 *   const resources = createE2BManagedRuntime({ environment: process.env, outputStore, leaseTtlMs: 90_000 });
 *
 * E2B's durable outputs need an explicit `outputStore` or all of
 * FILES_S3_ENDPOINT, FILES_S3_BUCKET, FILES_S3_ACCESS_KEY and
 * FILES_S3_SECRET_KEY (FILES_S3_REGION, FILES_S3_FORCE_PATH_STYLE and
 * FILES_S3_PREFIX optional). Without a complete store the preset has no
 * output port, so it advertises no output strategy instead of pretending
 * local files are deliverables. E2B_API_URL, E2B_SANDBOX_URL and E2B_DOMAIN
 * point the same driver at an E2B-compatible service.
 */
import { join } from "node:path";
import type {
  HarnessDriverType,
  ManagedRuntimeCapabilities,
  ManagedSandboxLease,
  ManagedSandboxPort,
  SandboxProcessPort,
  SessionOutputPort,
  ToolSandboxPort,
  WorkspacePersistencePort,
} from "@openma/contract";
import { composeCapabilities } from "@openma/contract";
import { createE2BDriver, e2bConfigFromEnv } from "@openma/driver-e2b";
import {
  FsCheckpointWorkspace,
  FsSessionOutputs,
  type HostTimings,
  ManagedRuntimeHost,
  type ManagedRuntimeHostDeps,
  sqlRuntimePorts,
} from "@openma/host";
import { RemoteCheckpointWorkspace, RemoteSessionOutputs } from "@openma/remote-bindings";
import type { Storage } from "@openma/storage";
import { type BlobStore, FsBlobStore } from "@openma/storage/blobs";
import { S3BlobStore } from "@openma/storage/s3-blobs";
import { realScheduler, type Scheduler } from "@openma/time";

/** What a preset hands a composition: the ports of one provider and what they advertise. */
export interface ManagedRuntimeResources {
  provider: string;
  sandbox: ManagedSandboxPort;
  processes: SandboxProcessPort;
  /** The tool port of a leased runtime (the harness-outside-sandbox placement). */
  toolSandbox(lease: ManagedSandboxLease): ToolSandboxPort;
  workspace: WorkspacePersistencePort;
  /** Null when no complete output store was configured: no output strategy is advertised. */
  outputs: SessionOutputPort | null;
  timings: Partial<HostTimings>;
  capabilities(lanes: readonly HarnessDriverType[]): ManagedRuntimeCapabilities;
  close(): Promise<void>;
}

type HostInput = Pick<ManagedRuntimeHostDeps, "fences" | "orphans" | "harness" | "lanes"> &
  Partial<Pick<ManagedRuntimeHostDeps, "scheduler" | "newOwnerId">>;

function resources(parts: Omit<ManagedRuntimeResources, "capabilities">): ManagedRuntimeResources {
  return {
    ...parts,
    capabilities: (lanes) =>
      composeCapabilities({ sandbox: parts.sandbox, workspace: parts.workspace, outputs: parts.outputs ?? undefined, lanes }),
  };
}

/** The host for one harness lane over a preset's ports. */
export function hostFor(resources: ManagedRuntimeResources, input: HostInput & { ownerId: string }): ManagedRuntimeHost {
  let attempt = 0;
  return new ManagedRuntimeHost({
    fences: input.fences,
    orphans: input.orphans,
    sandbox: resources.sandbox,
    workspace: resources.workspace,
    ...(resources.outputs ? { outputs: resources.outputs } : {}),
    harness: input.harness,
    lanes: input.lanes,
    scheduler: input.scheduler ?? realScheduler,
    // Fence owners are unique per attempt, even within one process.
    newOwnerId: input.newOwnerId ?? (() => `${input.ownerId}:${process.pid}:${++attempt}:${Date.now().toString(36)}`),
    timings: resources.timings,
  });
}

export interface NodeManagedRuntimeOptions {
  /** Host directories for workspace and output bindings. */
  rootDir: string;
  /** The control plane's storage: the SQL fence and orphan store, and the blob store for checkpoints and manifests. */
  storage: Storage;
  ownerId: string;
  leaseTtlMs: number;
  heartbeatIntervalMs: number;
  /** The sandbox image (default: the base image of `npm run provision`). */
  image: string;
  scheduler?: Scheduler;
}

export interface NodeManagedRuntime extends ManagedRuntimeResources {
  host(input: Omit<HostInput, "fences" | "orphans">): ManagedRuntimeHost;
}

/** Node + Docker: hard remove, no suspend; filesystem checkpoint_restore; filesystem final_collect (seed 004). */
export async function createNodeManagedRuntime(options: NodeManagedRuntimeOptions): Promise<NodeManagedRuntime> {
  const { NodeDockerSandbox, dockerProcesses } = await import("@openma/driver-node-docker");
  const scheduler = options.scheduler ?? realScheduler;
  const sandbox = new NodeDockerSandbox({ image: options.image, namePrefix: "openma-preset" });
  const store = options.storage.blobs;
  const base = resources({
    provider: sandbox.capabilities.provider,
    sandbox,
    processes: dockerProcesses(sandbox),
    toolSandbox: (lease) => sandbox.toolSandbox(lease),
    workspace: new FsCheckpointWorkspace({ root: join(options.rootDir, "workspaces"), store }),
    outputs: new FsSessionOutputs({ root: join(options.rootDir, "outputs"), store, scheduler }),
    timings: { leaseTtlMs: options.leaseTtlMs, renewEveryMs: options.heartbeatIntervalMs },
    close: async () => {},
  });
  const { fences, orphans } = sqlRuntimePorts(options.storage.db, scheduler);
  return { ...base, host: (input) => hostFor(base, { ...input, fences, orphans, scheduler, ownerId: options.ownerId }) };
}

/** The FILES_S3_* store, or the names of the required variables it lacks (none set: null). */
export function outputStoreFromEnv(env: Readonly<Record<string, string | undefined>>): S3BlobStore | { missing: string[] } | null {
  const required = ["FILES_S3_ENDPOINT", "FILES_S3_BUCKET", "FILES_S3_ACCESS_KEY", "FILES_S3_SECRET_KEY"];
  const optional = ["FILES_S3_REGION", "FILES_S3_FORCE_PATH_STYLE", "FILES_S3_PREFIX"];
  if ([...required, ...optional].every((name) => !env[name])) return null;
  const missing = required.filter((name) => !env[name]);
  if (missing.length > 0) return { missing };
  const forcePathStyle = env.FILES_S3_FORCE_PATH_STYLE;
  return new S3BlobStore({
    endpoint: env.FILES_S3_ENDPOINT,
    bucket: env.FILES_S3_BUCKET as string,
    prefix: env.FILES_S3_PREFIX || undefined,
    region: env.FILES_S3_REGION || undefined,
    forcePathStyle: forcePathStyle === undefined ? true : ["1", "true"].includes(forcePathStyle),
    credentials: { accessKeyId: env.FILES_S3_ACCESS_KEY as string, secretAccessKey: env.FILES_S3_SECRET_KEY as string },
  });
}

export interface E2BManagedRuntimeOptions {
  /** E2B_API_KEY, E2B_API_URL / E2B_SANDBOX_URL / E2B_DOMAIN, OPENMA_E2B_TEMPLATE, FILES_S3_* (usually `process.env`). */
  environment: Readonly<Record<string, string | undefined>>;
  /** Where output manifests and deliverables go; default the FILES_S3_* store, else none (no output strategy). */
  outputStore?: BlobStore;
  leaseTtlMs: number;
  /** Host directories for the bindings pulled out of the sandbox (default a directory under the OS temp dir). */
  rootDir?: string;
  /** Workspace checkpoints (default: the output store, else local files under `rootDir`). */
  checkpointStore?: BlobStore;
  scheduler?: Scheduler;
}

/**
 * E2B: suspend/resume and kill/reap; a checkpoint_restore workspace pushed
 * into and pulled out of the sandbox; final_collect outputs only with a
 * complete output store.
 */
export function createE2BManagedRuntime(options: E2BManagedRuntimeOptions): ManagedRuntimeResources {
  const config = e2bConfigFromEnv(options.environment);
  if ("missing" in config) throw new Error(`the E2B runtime needs ${config.missing.join(", ")}`);
  const fromEnv = options.outputStore === undefined ? outputStoreFromEnv(options.environment) : null;
  if (fromEnv !== null && "missing" in fromEnv) throw new Error(`FILES_S3_* is incomplete: set ${fromEnv.missing.join(", ")}`);
  const outputStore = options.outputStore ?? fromEnv ?? null;
  const rootDir = options.rootDir ?? join(process.env.TMPDIR ?? "/tmp", "openma-e2b-runtime");
  const scheduler = options.scheduler ?? realScheduler;
  const sandbox = createE2BDriver(config);
  const tools = (lease: Parameters<typeof sandbox.toolSandbox>[0]) => sandbox.toolSandbox(lease);
  const checkpointStore = options.checkpointStore ?? outputStore ?? new FsBlobStore(join(rootDir, "blobs"));
  return resources({
    provider: sandbox.capabilities.provider,
    sandbox,
    processes: sandbox.processes(),
    toolSandbox: tools,
    workspace: new RemoteCheckpointWorkspace({ root: join(rootDir, "workspaces"), store: checkpointStore, tools }),
    outputs:
      outputStore === null ? null : new RemoteSessionOutputs({ root: join(rootDir, "outputs"), store: outputStore, scheduler, tools }),
    timings: {
      leaseTtlMs: options.leaseTtlMs,
      renewEveryMs: Math.floor(options.leaseTtlMs / 3),
      safetyMarginMs: Math.floor(options.leaseTtlMs / 6),
    },
    close: () => sandbox.close(),
  });
}
