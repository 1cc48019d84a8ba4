/**
 * `openma runtime-host`: the composition that serves a self-hosted
 * environment from this machine (the `ama_worker` lane, or with `harness:
 * {type: "acp"}` the ACP harness of the `openma_supervised` lane: see
 * acp-lane.ts and ADR 0034). It claims
 * Environment Work, and for each claimed session runs the Managed Runtime
 * Host transaction with a local sandbox driver (bubblewrap or Docker) or a
 * cloud driver (see remote.ts),
 * checkpoint_restore workspaces and final_collect outputs in the blob
 * store, the SQL fence and orphan store of the control plane's database,
 * and the official EnvironmentWorker inside the sandbox.
 *
 * Layout under `stateDir`: `workspaces/`, `outputs/` (host directories bound
 * at /workspace and /mnt/session/outputs), `run/api.sock` (the control-plane
 * bridge). Inside every sandbox: `/openma/node_modules` (the SDK, read-only),
 * `/openma/launcher` (ama-worker.mjs), `/openma/run` (the socket).
 *
 * One runtime host per `stateDir`: at start it removes the sandboxes a
 * previous (crashed) process of the same host left behind; compute whose
 * kill failed while running is recorded as an orphan and reaped by the
 * reaper loop.
 */
import { randomBytes } from "node:crypto";
import { realpathSync } from "node:fs";
import { chmod, mkdir, rm, stat } from "node:fs/promises";
import { createRequire } from "node:module";
import { hostname } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import {
  hasSandboxInventory,
  type ManagedRuntimeProfile,
  type ManagedSandboxPort,
  type RuntimeOrphanPort,
  type RuntimeResourceFencePort,
  resolveManagedRuntimePlan,
  type SandboxProcessPort,
  type SessionOutputPort,
  type WorkspacePersistencePort,
} from "@openma/contract";
import {
  collectRuntimeGarbage,
  FsCheckpointWorkspace,
  FsSessionOutputs,
  type HostTimings,
  ManagedRuntimeHost,
  RuntimeReaper,
  type RuntimeRunResult,
  sqlFenceScopes,
  sqlRuntimePorts,
} from "@openma/host";
import { type Storage, sha256Hex, systemClock } from "@openma/storage";
import { deploymentId, SqlSandboxOwnership } from "@openma/storage/sandbox-owners";
import { realScheduler, type Scheduler } from "@openma/time";
import type { WarmPoolStats } from "@openma/warm-pool";
import { type AcpHarnessConfig, type AcpLane, openAcpLane } from "./acp-lane.ts";
import { AmaWorkerRunner, type WorkTicket } from "./ama-worker-runner.ts";
import { type ApiBridge, openApiBridge } from "./api-bridge.ts";
import { openRemoteParts, type RemoteRuntimeHostDriver, remoteProfile } from "./remote.ts";
import { type RuntimeHostWarmPool, runtimeHostWarmPool } from "./warm-compute.ts";
import { type RuntimeHostLogger, TicketBoard, WorkLoop } from "./work-loop.ts";

export type RuntimeHostDriver = "bubblewrap" | "docker";

/** Paths inside the sandbox. Top-level so bwrap can create the mount points over a read-only rootfs. */
export const SANDBOX_PATHS = {
  nodeModules: "/openma/node_modules",
  launcherDir: "/openma/launcher",
  launcher: "/openma/launcher/ama-worker.mjs",
  runDir: "/openma/run",
  apiSocket: "/openma/run/api.sock",
} as const;

/** The profile the ama_worker lane asks for: a durable workspace and durable deliverables, no process memory. */
export const AMA_WORKER_PROFILE: ManagedRuntimeProfile = {
  workspace: { requirement: "durable", preferredStrategies: ["checkpoint_restore"] },
  outputs: { requirement: "durable", preferredStrategies: ["final_collect"] },
  runtimeCheckpoint: "disabled",
  driver: { type: "ama_worker", process: { command: "node", args: [SANDBOX_PATHS.launcher], cwd: "/workspace" } },
};

export interface RuntimeHostOptions {
  driver: RuntimeHostDriver | RemoteRuntimeHostDriver;
  /** The control plane's HTTP listener (plain http on this machine: the sandbox bridge forwards to it). */
  apiUrl: string;
  environmentId: string;
  environmentKey: string;
  /** The control plane's storage: the fence and orphan tables and the blob store. */
  storage: Storage;
  stateDir: string;
  logger: RuntimeHostLogger;
  concurrency?: number;
  timings?: Partial<HostTimings>;
  /** Forwarded to the worker (SDK default: 60 s after the last `end_turn`). */
  workerMaxIdleMs?: number;
  /** Where the sandbox images are recorded (default: /var/lib/openma/images.json). */
  imageManifest?: string;
  scheduler?: Scheduler;
  reapIntervalMs?: number;
  /**
   * Candidate GC on the reaper's schedule: superseded workspace checkpoints and output manifests (and
   * chunks no retained manifest references) beyond `keepPrevious` per session, never younger than
   * `graceMs`. Default: hourly, keep 3, 1 h grace. `false` leaves GC to an operator task.
   */
  gc?: { intervalMs: number; keepPrevious: number; graceMs: number } | false;
  onResult?: (ticket: WorkTicket, result: RuntimeRunResult) => void;
  /**
   * A warm pool for this environment's runs (warm-compute.ts, ADR 0032): `target` sandboxes started ahead, each
   * owned by a record in the database that lapses `leaseTtlMs` (default 60 s) after this process dies; the pool's
   * reaper looks every `reapIntervalMs` (default 30 s). Needs a driver that lists what it holds.
   */
  warmPool?: { target: number; leaseTtlMs?: number; reapIntervalMs?: number };
  /** Wraps the host's fence and workspace ports (`openma serve` times and counts them for metrics). */
  instrument?: RuntimeHostInstruments;
  /**
   * The harness this host runs for every claimed session (ADR 0034): the official worker (`ama_worker`, the
   * default; the brain stays in the server), or the session's pinned ACP agent under the in-sandbox ACP harness
   * (`openma_supervised`; the server must leave the brain to the Work item: OPENMA_SELF_HOSTED_BRAIN=work_item).
   * The ACP lane runs on bubblewrap only.
   */
  harness?: "ama_worker" | AcpHarnessConfig;
}

export interface RuntimeHostInstruments {
  fences?(port: RuntimeResourceFencePort): RuntimeResourceFencePort;
  workspace?(port: WorkspacePersistencePort): WorkspacePersistencePort;
}

export interface RunningRuntimeHost {
  /** The driver's name (`bubblewrap`, `docker`, or a cloud driver's). */
  readonly driver: string;
  /** This host's identity (labels its containers). */
  readonly hostId: string;
  readonly host: ManagedRuntimeHost;
  readonly sandbox: ManagedSandboxPort;
  /** The warm pool's counts; null without one. */
  warmPool(): WarmPoolStats | null;
  close(): Promise<void>;
}

interface DriverParts {
  sandbox: ManagedSandboxPort;
  processes: SandboxProcessPort;
  /** Removes what a previous process of this host left; returns how many. */
  sweepLeftovers(): Promise<number>;
  /** The bwrap driver's unprivileged uid must be able to traverse to the bound directories. */
  needsTraversal: boolean;
  /** The workspace and output ports for this driver's runtimes. */
  ports(root: string): { workspace: WorkspacePersistencePort; outputs: SessionOutputPort };
  /** How the worker reaches the control plane (see AmaWorkerRunnerOptions). */
  worker: { apiSocketPath?: string; workerApiUrl?: string };
  profile: ManagedRuntimeProfile;
  close(): Promise<void>;
}

const HOST_LABEL = "openma.runtime-host";
const DEFAULT_GC = { intervalMs: 3_600_000, keepPrevious: 3, graceMs: 3_600_000 };

export async function startRuntimeHost(options: RuntimeHostOptions): Promise<RunningRuntimeHost> {
  const scheduler = options.scheduler ?? realScheduler;
  const stateDir = resolve(options.stateDir);
  const hostId = sha256Hex(`${hostname()}\0${stateDir}`).slice(0, 16);
  await mkdir(stateDir, { recursive: true, mode: 0o711 });
  const hostLabels = { [HOST_LABEL]: hostId };
  let bridge: ApiBridge | null = null;
  let acp: AcpLane | null = null;
  let parts: DriverParts;
  const harness = options.harness ?? "ama_worker";
  if (harness !== "ama_worker" && options.driver !== "bubblewrap")
    throw new Error(
      `the ACP lane runs on bubblewrap only (got ${typeof options.driver === "object" ? options.driver.name : options.driver})`,
    );
  if (typeof options.driver === "object") {
    const store = new SqlSandboxOwnership(options.storage.db, { clock: systemClock });
    const remote = await openRemoteParts(options.driver, hostLabels, { store, deployment: `rh-${hostId}` });
    parts = {
      ...remote,
      needsTraversal: false,
      ports: (root) => remote.ports({ root, store: options.storage.blobs, scheduler }),
      worker: { workerApiUrl: options.driver.workerApiUrl },
      profile: remoteProfile(AMA_WORKER_PROFILE),
    };
  } else {
    const runDir = join(stateDir, "run");
    bridge = await openApiBridge({ socketPath: join(runDir, "api.sock"), apiUrl: options.apiUrl });
    const binds: { source: string; target: string }[] = [
      { source: sdkNodeModules(), target: SANDBOX_PATHS.nodeModules },
      { source: launcherDir(), target: SANDBOX_PATHS.launcherDir },
      { source: runDir, target: SANDBOX_PATHS.runDir },
    ];
    try {
      if (harness !== "ama_worker") {
        acp = await openAcpLane({ config: harness, stateDir, runDir, storage: options.storage, apiUrl: options.apiUrl });
        binds.push(...acp.binds);
      }
      parts = await openDriver(options, options.driver, hostId, binds, scheduler, acp !== null);
      if (acp !== null) parts.profile = acp.profile;
    } catch (err) {
      await acp?.close();
      await bridge.close();
      throw err;
    }
  }
  if (parts.needsTraversal) await allowTraversal(stateDir);
  const swept = await parts.sweepLeftovers().catch(() => 0);
  if (swept > 0) options.logger.info({ swept }, "removed sandboxes a previous runtime host left behind");

  const sqlPorts = sqlRuntimePorts(options.storage.db, systemClock);
  const fences = options.instrument?.fences?.(sqlPorts.fences) ?? sqlPorts.fences;
  const { orphans } = sqlPorts;
  const tickets = new TicketBoard();
  const runner =
    acp === null
      ? new AmaWorkerRunner({
          processes: parts.processes,
          ticketFor: (scope) => tickets.get(scope),
          apiUrl: options.apiUrl,
          ...parts.worker,
          maxIdleMs: options.workerMaxIdleMs,
          scheduler,
          onLog: (line, scope) => options.logger.info({ session_id: scope.sessionId, worker: line.slice(0, 2000) }, "worker"),
        })
      : acp.runner({
          processes: parts.processes,
          sandbox: parts.sandbox,
          ticketFor: (scope) => tickets.get(scope),
          scheduler,
          onLog: (runtimeId, entry) =>
            entry.type === "stderr" ? options.logger.info({ runtime_id: runtimeId, harness: entry.line }, "acp harness") : undefined,
        });
  for (const dir of ["workspaces", "outputs"]) await mkdir(join(stateDir, dir), { recursive: true, mode: 0o711 });
  const ported = parts.ports(stateDir);
  const workspace = options.instrument?.workspace?.(ported.workspace) ?? ported.workspace;
  const { outputs } = ported;
  const warm = await openWarmPool(options, parts.sandbox, stateDir, orphans, scheduler);
  const host = new ManagedRuntimeHost({
    fences,
    orphans,
    sandbox: parts.sandbox,
    ...(warm ? { warm: warm.port } : {}),
    workspace,
    outputs,
    harness: runner,
    lanes: [acp === null ? "ama_worker" : "openma_supervised"],
    scheduler,
    newOwnerId: () => `rh-${hostId}-${randomBytes(6).toString("hex")}`,
    timings: options.timings,
  });
  const gc = options.gc === undefined ? DEFAULT_GC : options.gc;
  const reaper = new RuntimeReaper({
    orphans,
    reaper: parts.sandbox,
    scheduler,
    intervalMs: options.reapIntervalMs ?? 30_000,
    gc: gc
      ? {
          intervalMs: gc.intervalMs,
          run: async (signal) => {
            const report = await collectRuntimeGarbage({
              fences,
              scopes: sqlFenceScopes(options.storage.db),
              store: options.storage.blobs,
              policy: { keepPrevious: gc.keepPrevious, graceMs: gc.graceMs },
              now: scheduler.now(),
              signal,
            });
            options.logger.info({ scopes: report.scopes, blobs: report.blobs }, "runtime candidate GC");
          },
        }
      : undefined,
    onError: (err) => options.logger.warn({ err: String(err) }, "orphan reaping failed"),
  });
  reaper.start();
  if (warm !== null) {
    const planned = resolveManagedRuntimePlan(parts.profile, host.capabilities);
    if (planned.type === "planned") warm.start(planned.plan);
    else options.logger.warn({ err: planned.error.message }, "no warm pool: the host cannot plan its own profile");
  }
  const loop = new WorkLoop({
    apiUrl: options.apiUrl,
    environmentId: options.environmentId,
    environmentKey: options.environmentKey,
    host,
    profile: parts.profile,
    tickets,
    scheduler,
    logger: options.logger,
    concurrency: options.concurrency ?? 4,
    workerId: `rh-${hostId}`,
    onResult: options.onResult,
  });
  loop.start();
  const driverName = typeof options.driver === "object" ? options.driver.name : options.driver;
  options.logger.info({ driver: driverName, environment_id: options.environmentId, host_id: hostId }, "runtime host serving");
  return {
    driver: driverName,
    hostId,
    host,
    sandbox: parts.sandbox,
    warmPool: () => warm?.stats() ?? null,
    async close() {
      await loop.stop();
      await warm?.close();
      await reaper.stop();
      await parts.close();
      await acp?.close();
      await bridge?.close();
    },
  };
}

async function openDriver(
  options: RuntimeHostOptions,
  driver: RuntimeHostDriver,
  hostId: string,
  binds: { source: string; target: string }[],
  scheduler: Scheduler,
  /**
   * The ACP lane's sandboxes run as this process's user: the agent cache (by default under the home directory)
   * must be readable to them, as under `openma serve`'s ACP sessions.
   */
  asHostUser = false,
): Promise<DriverParts> {
  const { readImageManifest } = await import("@openma/driver-node-docker");
  const manifest = await readImageManifest(options.imageManifest);
  if (!manifest.ok) throw new Error(manifest.message);
  const local = {
    ports: (root: string) => ({
      workspace: new FsCheckpointWorkspace({ root: join(root, "workspaces"), store: options.storage.blobs }),
      outputs: new FsSessionOutputs({ root: join(root, "outputs"), store: options.storage.blobs, scheduler }),
    }),
    worker: { apiSocketPath: SANDBOX_PATHS.apiSocket },
    profile: AMA_WORKER_PROFILE,
  };
  if (driver === "bubblewrap") {
    const { BubblewrapSandbox, bubblewrapProcesses } = await import("@openma/driver-bubblewrap");
    // Labelled with this host: the warm pool's reaper lists only this host's runtimes.
    const sandbox = new BubblewrapSandbox({
      rootfs: manifest.manifest.base.rootfs,
      binds,
      labels: { [HOST_LABEL]: hostId },
      ...(asHostUser ? { hostUser: null } : {}),
    });
    return {
      ...local,
      sandbox,
      processes: bubblewrapProcesses(sandbox),
      // bwrap sandboxes die with the process that started them; only their records can be left.
      sweepLeftovers: () => sandbox.reapLeftovers(),
      needsTraversal: true,
      close: () => sandbox.shutdown(),
    };
  }
  const { NodeDockerSandbox, dockerProcesses, NODE_DOCKER_PROVIDER, LABELS } = await import("@openma/driver-node-docker");
  const sandbox = new NodeDockerSandbox({
    image: manifest.manifest.base.image,
    binds,
    namePrefix: "openma-rh",
    labels: { [HOST_LABEL]: hostId },
  });
  return {
    ...local,
    sandbox,
    processes: dockerProcesses(sandbox),
    // Containers outlive a killed host: every container labelled with this host's id is a leftover of a dead process.
    async sweepLeftovers() {
      const leftovers = await sandbox.listManaged({ [HOST_LABEL]: hostId });
      for (const info of leftovers) {
        const runtimeId = (info.Names[0] ?? info.Id).replace(/^\//, "");
        const labels = info.Labels ?? {};
        await sandbox.reap({
          scope: { environmentId: labels[LABELS.environment] ?? "unknown", sessionId: labels[LABELS.session] ?? "unknown" },
          lease: { provider: NODE_DOCKER_PROVIDER, runtimeId, metadata: { containerId: info.Id } },
          reason: "host_recovery",
          signal: AbortSignal.timeout(30_000),
        });
      }
      return leftovers.length;
    },
    needsTraversal: false,
    close: async () => {},
  };
}

/** The configured warm pool over the driver, or null (none asked for, or a driver that cannot list what it holds). */
async function openWarmPool(
  options: RuntimeHostOptions,
  sandbox: ManagedSandboxPort,
  stateDir: string,
  orphans: RuntimeOrphanPort,
  scheduler: Scheduler,
): Promise<RuntimeHostWarmPool | null> {
  const config = options.warmPool;
  if (config === undefined || config.target === 0) return null;
  if (!hasSandboxInventory(sandbox)) {
    options.logger.warn({}, "no warm pool: the driver cannot list what it holds, so no reaper could judge pooled sandboxes");
    return null;
  }
  const local = typeof options.driver !== "object";
  const root = local ? join(stateDir, "warm") : null;
  if (root !== null) {
    // Slots of an earlier process: their sandboxes were swept at start, their directories go now.
    await rm(root, { recursive: true, force: true });
    await mkdir(root, { recursive: true, mode: 0o711 });
  }
  return runtimeHostWarmPool({
    sandbox,
    environmentId: options.environmentId,
    target: config.target,
    root,
    ownership: new SqlSandboxOwnership(options.storage.db, { clock: scheduler }),
    orphans,
    deployment: await deploymentId(options.storage.db),
    leaseTtlMs: config.leaseTtlMs ?? 60_000,
    reapIntervalMs: config.reapIntervalMs ?? 30_000,
    scheduler,
    onError: (err, where) => options.logger.warn({ ...where, err: String(err) }, "warm pool"),
  });
}

/** The SDK's node_modules directory, bound read-only into sandboxes (its dependencies resolve from there). */
function sdkNodeModules(): string {
  // Real path: a bound symlink would point outside the sandbox (and the resolver does not always realpath under loaders).
  const entry = realpathSync(createRequire(import.meta.url).resolve("@anthropic-ai/sdk"));
  let dir = dirname(entry);
  while (!dir.endsWith(`${"/"}node_modules`)) {
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`cannot find the node_modules directory of @anthropic-ai/sdk (${entry})`);
    dir = parent;
  }
  return dir;
}

function launcherDir(): string {
  return join(dirname(fileURLToPath(import.meta.url)), "..", "sandbox");
}

/** Search permission for others on the state dir and its parent: the sandbox uid binds directories below them. */
async function allowTraversal(stateDir: string): Promise<void> {
  for (const dir of [dirname(stateDir), stateDir]) {
    const mode = (await stat(dir)).mode & 0o7777;
    if ((mode & 0o001) !== 0o001) await chmod(dir, mode | 0o001);
  }
}
