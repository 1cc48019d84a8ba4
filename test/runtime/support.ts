/**
 * The Managed Runtime Host on real parts: a real local sandbox driver
 * (bubblewrap or node-docker) or a cloud driver against its vendor's
 * stand-in, the real SQL fence and orphan store, the filesystem workspace
 * and output adapters (for a cloud runtime, the remote ones that push and
 * pull through its tool port) over a blob store in a temp directory, and a
 * ManualScheduler that is both the hosts' scheduler and the fence's clock,
 * so lease time moves only when a test says so.
 *
 * What is simulated is only what cannot be caused for real on one machine:
 * a host cut off from the database (its renewals throw), a publication
 * delayed on the wire, and a hard kill the engine refuses once.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { chmod, mkdtemp, readdir, readFile, realpath, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type {
  ActivePublication,
  ExecResult,
  FenceAcquireResult,
  FencePublishResult,
  FenceReleaseResult,
  FenceRenewResult,
  ManagedSandboxLease,
  ManagedSandboxPort,
  OrphanReapInput,
  OrphanReapResult,
  PublicationRecord,
  RuntimeResourceFence,
  RuntimeResourceFencePort,
  RuntimeResourceScope,
  SandboxAcquireResult,
  SandboxHeartbeatResult,
  SandboxInspectResult,
  SandboxSuspendResult,
  SandboxTerminateResult,
  SessionOutputPort,
  ToolSandboxPort,
  WorkspacePersistencePort,
} from "@openma/contract";
import { BubblewrapSandbox } from "@openma/driver-bubblewrap";
import { assertBwrapInstalled } from "@openma/driver-bubblewrap/test-support";
import { LABELS, type NodeDockerSandbox } from "@openma/driver-node-docker";
import { type DockerTestEnv, removeRunContainers, requireDocker } from "@openma/driver-node-docker/testing";
import { hostProcesses } from "@openma/driver-suite/host-processes";
import {
  FsCheckpointWorkspace,
  FsSessionOutputs,
  type HarnessRunInput,
  type HarnessRunner,
  type HarnessRunResult,
  ManagedRuntimeHost,
  type WarmComputePort,
} from "@openma/host";
import { AMA_WORKER_PROFILE, TEST_TIMINGS } from "@openma/host/testing/rig";
import { RemoteCheckpointWorkspace, RemoteSessionOutputs } from "@openma/remote-bindings";
import type { CloudStandIn } from "@openma/standin-kit";
import type { BlobStore } from "@openma/storage/blobs";
import { SqlRuntimeResourceFence } from "@openma/storage/fence";
import { SqlRuntimeOrphanStore } from "@openma/storage/orphans";
import type { TestStorage } from "@openma/storage/testing";
import type { ManualScheduler } from "@openma/time";
import { startVendorStandIn, VENDORS, type Vendor, vendorDriver } from "../support/cloud.ts";

export { AMA_WORKER_PROFILE, TEST_TIMINGS };

export const never = new AbortController().signal;

/** A real driver as the host uses it, plus the tool surface a harness outside the sandbox drives. */
export type RealSandbox = ManagedSandboxPort & { toolSandbox(lease: ManagedSandboxLease): ToolSandboxPort };

export type DriverName = "bubblewrap" | "node-docker" | Vendor;
export type EngineState = "running" | "stopped" | "gone";
export const DRIVERS: readonly DriverName[] = ["bubblewrap", "node-docker"];
/** The cloud drivers, each against its vendor's stand-in. */
export const CLOUD_DRIVERS: readonly DriverName[] = VENDORS;

/**
 * One local engine for one test. `open()` gives another driver instance over
 * the same engine, as a second host process or the reaper would have: it
 * shares no memory with the instance that started a runtime.
 */
export interface LocalEngine {
  readonly name: DriverName;
  open(): RealSandbox;
  /**
   * The runtime behind `lease` as the engine itself reports it, never as the
   * driver remembers it. Docker: listed by its openma labels (session,
   * generation) and running, listed but stopped, or not listed at all.
   * Bubblewrap: its init pid (with that start time) is a live process in
   * /proc, or only its runtime record is left, or neither.
   */
  state(scope: RuntimeResourceScope, lease: ManagedSandboxLease): Promise<EngineState>;
  /** Force-removes whatever this test left behind (the safety net; tests assert emptiness themselves). */
  close(): Promise<void>;
  /** Workspace and output ports of one host (default: the host-directory adapters the local drivers bind). */
  ports?(root: string, store: BlobStore, scheduler: ManualScheduler, sandbox: RealSandbox): HostPorts;
}

export interface HostPorts {
  workspace: WorkspacePersistencePort;
  outputs: SessionOutputPort;
}

export async function openEngine(name: DriverName, root: string): Promise<LocalEngine> {
  if (name === "bubblewrap") return openBubblewrap(root);
  if (name === "node-docker") return openDocker(await requireDocker());
  return openCloud(name);
}

/** A cloud driver against its stand-in; the runtime's state is read at the stand-in, never through the driver. */
async function openCloud(vendor: Vendor): Promise<LocalEngine> {
  const standIn: CloudStandIn = await startVendorStandIn(vendor);
  const opened: RealSandbox[] = [];
  return {
    name: vendor,
    open() {
      const driver = vendorDriver(vendor, standIn);
      opened.push(driver);
      return driver;
    },
    async state(_scope, lease) {
      const held = standIn.state(lease.runtimeId);
      return held === "running" ? "running" : held === "suspended" ? "stopped" : "gone";
    },
    async close() {
      await standIn.close();
    },
    ports: (root, store, scheduler, sandbox) => ({
      workspace: new RemoteCheckpointWorkspace({ root: join(root, "workspaces"), store, tools: (lease) => sandbox.toolSandbox(lease) }),
      outputs: new RemoteSessionOutputs({ root: join(root, "outputs"), store, scheduler, tools: (lease) => sandbox.toolSandbox(lease) }),
    }),
  };
}

async function openBubblewrap(root: string): Promise<LocalEngine> {
  assertBwrapInstalled();
  // A private state root: runtime records of this test only, traversable by the sandbox's host uid.
  const stateRoot = join(root, "bwrap-state");
  const opened: BubblewrapSandbox[] = [];
  const open = () => {
    const driver = new BubblewrapSandbox({ stateRoot });
    opened.push(driver);
    return driver;
  };
  return {
    name: "bubblewrap",
    open,
    async state(_scope, lease) {
      const pid = Number(lease.metadata?.pid);
      const start = Number(lease.metadata?.start);
      if ((await procStartTime(pid)) === start) return "running";
      const recorded = await stat(join(stateRoot, lease.runtimeId)).then(
        () => true,
        () => false,
      );
      return recorded ? "stopped" : "gone";
    },
    async close() {
      for (const driver of opened) await driver.shutdown();
      // Runtimes no instance of this test still tracks (an orphan nobody reaped): kill them from their records.
      const reaper = new BubblewrapSandbox({ stateRoot });
      const names = await readdir(stateRoot).catch(() => [] as string[]);
      for (const runtimeId of names.filter((n) => n.startsWith("bwrap-"))) {
        await reaper.reap({ scope: SWEEP_SCOPE, lease: { provider: "bubblewrap", runtimeId }, reason: "host_recovery", signal: never });
      }
    },
  };
}

const SWEEP_SCOPE: RuntimeResourceScope = { environmentId: "env_sweep", sessionId: "sesn_sweep" };

/** Field 22 of /proc/<pid>/stat (start time in clock ticks), or null when no live process has that pid. */
async function procStartTime(pid: number): Promise<number | null> {
  if (!Number.isInteger(pid) || pid <= 0) return null;
  const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => null);
  if (stat === null) return null;
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  if (fields[0] === "Z" || fields[0] === "X") return null;
  return Number(fields[19]);
}

function openDocker(env: DockerTestEnv): LocalEngine {
  const probe: NodeDockerSandbox = env.driver();
  return {
    name: "node-docker",
    open: () => env.driver(),
    async state(scope, lease) {
      const listed = await probe.listManaged({
        [LABELS.session]: scope.sessionId,
        [LABELS.generation]: String(lease.metadata?.generation),
      });
      const container = listed.find((c) => c.Names.includes(`/${lease.runtimeId}`));
      if (container === undefined) return "gone";
      return container.State === "running" ? "running" : "stopped";
    },
    close: () => removeRunContainers(env),
  };
}

/** Host processes whose command line mentions `marker` (the sleeper and its whole launch chain). */
export async function processesMentioning(marker: string): Promise<string[]> {
  return (await hostProcesses()).filter((p) => p.argv.includes(marker)).map((p) => `${p.pid}: ${p.argv}`);
}

/** Host processes whose command line or environment contains `secret`. */
export async function processesHolding(secret: string): Promise<number[]> {
  return (await hostProcesses()).filter((p) => p.argv.includes(secret) || p.environ.includes(secret)).map((p) => p.pid);
}

/** A scratch directory the sandbox's unprivileged host uid can traverse (mkdtemp makes 0700 ones). */
export async function scratchDir(): Promise<string> {
  const dir = await realpath(await mkdtemp(join(tmpdir(), "openma-fence-loss-")));
  await chmod(dir, 0o755);
  return dir;
}

export function newScope(): RuntimeResourceScope {
  const id = randomBytes(6).toString("hex");
  return { environmentId: `env_${id}`, sessionId: `sesn_${id}` };
}

/**
 * The fence as one host sees it. `cutOff()` makes every renewal throw (the
 * host lost its database connection; the lease controller treats a throw as
 * transient until the safety margin). `delayPublish` holds a publication on
 * the wire: the host has sent it, the database has not seen it yet.
 */
export class HostFence implements RuntimeResourceFencePort {
  /** Fences this host acquired, with their tokens (so tests can look for leaks). */
  readonly acquired: RuntimeResourceFence[] = [];
  renewalsFailed = 0;
  #cutOff = false;
  #delayed: { matches: (key: string) => boolean; transit: PublishInTransit } | null = null;

  constructor(private readonly inner: RuntimeResourceFencePort) {}

  cutOff(): void {
    this.#cutOff = true;
  }

  /** The next publication whose idempotency key `matches` waits until `deliver()`. */
  delayPublish(matches: (key: string) => boolean): PublishInTransit {
    const transit = new PublishInTransit();
    this.#delayed = { matches, transit };
    return transit;
  }

  async acquire(input: Parameters<RuntimeResourceFencePort["acquire"]>[0]): Promise<FenceAcquireResult> {
    const result = await this.inner.acquire(input);
    if (result.type === "acquired") this.acquired.push(result.fence);
    return result;
  }

  async renew(input: Parameters<RuntimeResourceFencePort["renew"]>[0]): Promise<FenceRenewResult> {
    if (this.#cutOff) {
      this.renewalsFailed++;
      throw new Error("connection to the database lost");
    }
    return this.inner.renew(input);
  }

  isCurrent(input: Parameters<RuntimeResourceFencePort["isCurrent"]>[0]): Promise<boolean> {
    return this.inner.isCurrent(input);
  }

  async publish(input: Parameters<RuntimeResourceFencePort["publish"]>[0]): Promise<FencePublishResult> {
    const delayed = this.#delayed;
    if (delayed === null || !delayed.matches(input.idempotencyKey)) return this.inner.publish(input);
    this.#delayed = null;
    delayed.transit.arrived();
    await delayed.transit.delivered;
    // The statement already left the host: aborting the run cannot recall it, so it reaches the database as sent.
    const answer = await this.inner.publish({ ...input, signal: never });
    delayed.transit.answered(answer);
    return answer;
  }

  release(input: Parameters<RuntimeResourceFencePort["release"]>[0]): Promise<FenceReleaseResult> {
    return this.inner.release(input);
  }

  active(input: Parameters<RuntimeResourceFencePort["active"]>[0]): Promise<ActivePublication | null> {
    return this.inner.active(input);
  }

  history(input: Parameters<RuntimeResourceFencePort["history"]>[0]): Promise<PublicationRecord[]> {
    return this.inner.history(input);
  }
}

/** A publication held between host and database. */
export class PublishInTransit {
  /** Resolves when the host has sent the publication. */
  readonly sent: Promise<void>;
  /** What the database answered once it finally saw it. */
  readonly answer: Promise<FencePublishResult>;
  readonly delivered: Promise<void>;
  arrived!: () => void;
  deliver!: () => void;
  answered!: (answer: FencePublishResult) => void;

  constructor() {
    this.sent = new Promise((resolve) => {
      this.arrived = resolve;
    });
    this.delivered = new Promise((resolve) => {
      this.deliver = resolve;
    });
    this.answer = new Promise((resolve) => {
      this.answered = resolve;
    });
  }
}

/** The real driver, except that the next `terminate` answers `failed` (the engine refused the kill). */
export class RefusingTerminate implements ManagedSandboxPort {
  #refusals = 1;

  constructor(private readonly inner: ManagedSandboxPort) {}

  get capabilities() {
    return this.inner.capabilities;
  }

  acquire(input: Parameters<ManagedSandboxPort["acquire"]>[0]): Promise<SandboxAcquireResult> {
    return this.inner.acquire(input);
  }

  heartbeat(input: Parameters<ManagedSandboxPort["heartbeat"]>[0]): Promise<SandboxHeartbeatResult> {
    return this.inner.heartbeat(input);
  }

  suspend(input: Parameters<ManagedSandboxPort["suspend"]>[0]): Promise<SandboxSuspendResult> {
    return this.inner.suspend(input);
  }

  async terminate(input: Parameters<ManagedSandboxPort["terminate"]>[0]): Promise<SandboxTerminateResult> {
    if (this.#refusals > 0) {
      this.#refusals--;
      return { type: "failed", error: `engine refused to kill ${input.lease.runtimeId}: device or resource busy` };
    }
    return this.inner.terminate(input);
  }

  inspect(input: Parameters<ManagedSandboxPort["inspect"]>[0]): Promise<SandboxInspectResult> {
    return this.inner.inspect(input);
  }

  reap(input: OrphanReapInput): Promise<OrphanReapResult> {
    return this.inner.reap(input);
  }
}

/** What one harness placement did in its sandbox. */
export interface PlacementRecord {
  input: HarnessRunInput;
  /** The long-running process (`sleep <marker>`), if started; `ended` settles when it stops for any reason. */
  sleeper: { marker: string; ended: Promise<ExecResult> } | null;
}

/** The harness's handle on its placement: real processes and files inside the sandbox. */
export interface Placement {
  readonly input: HarnessRunInput;
  /** Starts `sleep <marker>` in the sandbox and resolves once it runs. Nothing but the sandbox's death stops it. */
  startSleeper(): Promise<string>;
  /** Writes `/workspace/notes.md` and `/mnt/session/outputs/report.md` from inside the sandbox. */
  write(notes: string, report: string): Promise<void>;
  /** Reads a file inside the sandbox (`null` when absent). */
  read(path: string): Promise<string | null>;
  /** Resolves when the host aborts this placement. */
  aborted(): Promise<void>;
}

const HOUR_MS = 3_600_000;

/**
 * A small HarnessRunner driving a real sandbox through the driver's tool
 * surface (the harness-outside-sandbox placement). Each run follows the
 * script the test gives it.
 */
export class SandboxHarness implements HarnessRunner {
  readonly runs: PlacementRecord[] = [];

  constructor(
    private readonly sandbox: RealSandbox,
    private readonly script: (placement: Placement) => Promise<HarnessRunResult>,
  ) {}

  async run(input: HarnessRunInput): Promise<HarnessRunResult> {
    const record: PlacementRecord = { input, sleeper: null };
    this.runs.push(record);
    const tools = this.sandbox.toolSandbox(input.sandbox);
    const placement: Placement = {
      input,
      startSleeper: async () => {
        // A duration no other process on the host will have: it names this process tree in /proc.
        const marker = `sleep ${1_000_000 + Math.floor(Math.random() * 8_000_000)}`;
        let started!: () => void;
        const running = new Promise<void>((resolve) => {
          started = resolve;
        });
        // Deliberately not bound to the run's signal: only killing the sandbox can end it.
        const ended = tools.exec({
          command: ["/bin/sh", "-c", `echo started; exec ${marker}`],
          timeoutMs: HOUR_MS,
          signal: never,
          onOutput: (stream, chunk) => {
            if (stream === "stdout" && Buffer.from(chunk).toString().includes("started")) started();
          },
        });
        record.sleeper = { marker, ended };
        await Promise.race([running, ended.then((r) => Promise.reject(new Error(`sleeper did not start: ${describe(r)}`)))]);
        return marker;
      },
      write: async (notes, report) => {
        const result = await tools.exec({
          command: [
            "/bin/sh",
            "-c",
            'printf %s "$1" > /workspace/notes.md && printf %s "$2" > /mnt/session/outputs/report.md',
            "write",
            notes,
            report,
          ],
          timeoutMs: 60_000,
          signal: never,
        });
        if (result.type !== "exited" || result.exitCode !== 0) throw new Error(`writing in the sandbox failed: ${describe(result)}`);
      },
      read: async (path) => {
        const result = await tools.readFile({ path, maxBytes: 1 << 20, signal: never });
        if (result.type === "not_found") return null;
        if (result.type !== "ok") throw new Error(`reading ${path} in the sandbox failed: ${JSON.stringify(result)}`);
        return Buffer.from(result.content).toString("utf8");
      },
      aborted: () =>
        new Promise<void>((resolve) => {
          if (input.signal.aborted) resolve();
          else input.signal.addEventListener("abort", () => resolve(), { once: true });
        }),
    };
    return this.script(placement);
  }

  async drain(): Promise<{ type: "drained" }> {
    return { type: "drained" };
  }
}

function describe(result: ExecResult): string {
  if (result.type === "error") return result.message;
  const stderr = Buffer.from(result.stderr).toString("utf8").trim();
  return result.type === "exited" ? `exit ${result.exitCode}${stderr ? `: ${stderr}` : ""}` : result.type;
}

export interface RuntimeParts {
  storage: TestStorage;
  scheduler: ManualScheduler;
  /** Shared by every host: the checkpoint and output blobs a successor restores from. */
  store: BlobStore;
  sqlFence: SqlRuntimeResourceFence;
  orphans: SqlRuntimeOrphanStore;
}

export function runtimeParts(storage: TestStorage, scheduler: ManualScheduler, store: BlobStore): RuntimeParts {
  const { db } = storage.storage;
  return {
    storage,
    scheduler,
    store,
    sqlFence: new SqlRuntimeResourceFence(db, { clock: scheduler }),
    orphans: new SqlRuntimeOrphanStore(db, { clock: scheduler }),
  };
}

/**
 * One runtime host process: its own owner ids, its own fence connection,
 * its own binding directories on local disk, the shared blob store.
 */
export function runtimeHost(
  parts: RuntimeParts,
  opts: {
    name: string;
    dir: string;
    sandbox: ManagedSandboxPort;
    harness: HarnessRunner;
    fence: HostFence;
    ports?: HostPorts;
    warm?: WarmComputePort;
  },
): ManagedRuntimeHost {
  const { scheduler, store } = parts;
  return new ManagedRuntimeHost({
    fences: opts.fence,
    orphans: parts.orphans,
    sandbox: opts.sandbox,
    ...(opts.warm ? { warm: opts.warm } : {}),
    workspace: opts.ports?.workspace ?? new FsCheckpointWorkspace({ root: join(opts.dir, `${opts.name}-workspaces`), store }),
    outputs: opts.ports?.outputs ?? new FsSessionOutputs({ root: join(opts.dir, `${opts.name}-outputs`), store, scheduler }),
    harness: opts.harness,
    lanes: ["ama_worker"],
    scheduler,
    newOwnerId: () => `runtime-host:${opts.name}:${randomUUID()}`,
    timings: TEST_TIMINGS,
  });
}

/** Removes a directory tree (bindings written by the sandbox's host uid included). */
export async function removeDir(dir: string | undefined): Promise<void> {
  if (dir) await rm(dir, { recursive: true, force: true });
}
