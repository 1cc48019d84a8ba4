/**
 * node-docker: ManagedSandboxPort on the Docker Engine API (dockerode over
 * the local socket). One container per (scope, generation, acquire key),
 * with a deterministic name and ownership labels, so any process can find,
 * heartbeat, kill or reap it from the serialized lease alone.
 *
 * Defaults are closed: `NetworkMode: none`; the agent runs as an
 * unprivileged uid (1000, `agent` in the OpenMA images) with every
 * capability dropped and no new privileges; the root filesystem is
 * read-only, with memory-backed tmpfs for `/tmp`, the home directory and the
 * driver's runtime directory; CPU/memory/pids limits; an init process reaping
 * zombies. `/workspace` and `/mnt/session/outputs` are bind mounts of the
 * host directories the workspace and output ports materialized, handed to
 * the sandbox uid before the container starts. There is no suspend: a plain
 * container cannot be retained across host loss, so the capability says so.
 * What stays privileged is listed in docs/images.md.
 */
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { lstat, rm } from "node:fs/promises";
import type { Server } from "node:net";
import { tmpdir } from "node:os";
import { isAbsolute, join, normalize } from "node:path";
import {
  type CredentialEgressPort,
  type FenceIdentity,
  isRuntimeIdentifier,
  type ManagedSandboxLease,
  type ManagedSandboxPort,
  type OrphanReapInput,
  type OrphanReapResult,
  OUTPUTS_MOUNT_PATH,
  type OwnedRuntime,
  type RuntimeResourceScope,
  runtimeScopeKey,
  type SandboxAcquireResult,
  type SandboxCapabilities,
  type SandboxHeartbeatResult,
  type SandboxInspectResult,
  type SandboxInventoryPort,
  type SandboxListResult,
  type SandboxSuspendResult,
  type SandboxTerminateResult,
  type SessionOutputBinding,
  sandboxLeaseIssues,
  WORKSPACE_MOUNT_PATH,
  type WorkspaceBinding,
} from "@openma/contract";
import { chownTree } from "@openma/driver-kit/chown-tree";
import {
  EGRESS_PROXY_PORT,
  gatewaySandboxEnv,
  listenInNetnsOf,
  SANDBOX_EGRESS_DIR,
  SYSTEM_TRUST_STORE,
  writeTrustFiles,
} from "@openma/egress";
import type Docker from "dockerode";
import { connectDocker, describeError, PROVISION_HINT, statusOf } from "./engine.ts";
import { RUNTIME_DIR } from "./scripts.ts";
import { DockerToolSandbox, type DockerToolSandboxOptions } from "./tool-sandbox.ts";

export const NODE_DOCKER_PROVIDER = "node-docker";

export const NODE_DOCKER_SANDBOX_CAPABILITIES: SandboxCapabilities = {
  provider: NODE_DOCKER_PROVIDER,
  lifecycle: { suspendResume: "unsupported", hardTerminate: "supported", orphanReap: "host_managed" },
  facts: {
    has: [
      "duplex_process",
      "workspace_file_io",
      "stable_name_with_ownership_labels",
      "network_none_by_default",
      "unprivileged_uid",
      "read_only_rootfs",
      "no_capabilities",
    ],
    lacks: ["provider_suspend_resume", "process_memory_checkpoint"],
  },
  // `NetworkMode: none` leaves only loopback: nothing leaves unless a composed egress gateway is the way out.
  credentialEgress: { enforcement: "enforced", interceptedProtocols: [] },
};

/** Ownership labels; `openma.managed` + `openma.driver` mark a container this driver may kill. */
export const LABELS = {
  managed: "openma.managed",
  driver: "openma.driver",
  session: "openma.session",
  environment: "openma.environment",
  generation: "openma.generation",
  owner: "openma.owner",
  scope: "openma.scope",
  acquireKey: "openma.acquire-key",
} as const;

export interface ResourceLimits {
  /** Fractional CPUs (NanoCpus). */
  cpus: number;
  memoryBytes: number;
  pids: number;
}

export const DEFAULT_LIMITS: ResourceLimits = { cpus: 1, memoryBytes: 1024 * 1024 * 1024, pids: 512 };

/** The sandbox identity by default: uid/gid 1000 (`agent` in the OpenMA images), whose home is a tmpfs. */
export const SANDBOX_USER = { uid: 1000, gid: 1000 } as const;
export const SANDBOX_HOME = "/home/agent";

/**
 * Only for an operator who asks for a root container (`user: "0:0"`): enough for a root shell to manage files
 * it owns or was handed; no network, mount, ptrace or raw I/O powers. The unprivileged default gets none.
 */
const ROOT_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"];

/** Keeps the container alive between execs; the init process (tini) is pid 1 and reaps orphans. */
const IDLE_COMMAND = ["/bin/sh", "-c", "while :; do sleep 86400; done"];

export interface NodeDockerSandboxOptions {
  image: string;
  docker?: Docker;
  limits?: Partial<ResourceLimits>;
  /** Default `none`. Anything else is a deliberate operator choice (e.g. a network whose only exit is a proxy). */
  networkMode?: string;
  /** Extra labels (e.g. a test run id, so leftovers can be found by label). */
  labels?: Readonly<Record<string, string>>;
  /** Non-secret container environment. Secrets go through `toolSandbox(...).exec({secretEnv})`. */
  env?: Readonly<Record<string, string>>;
  /**
   * Container user as numeric `uid:gid` (default `1000:1000`). `0:0` runs the agent as root (with a few file
   * capabilities): only for images that cannot work otherwise, e.g. stand-ins of vendors whose boxes are root.
   */
  user?: string;
  /** Default true: the image is read-only, writes go to the bindings and the tmpfs mounts. */
  readOnlyRootfs?: boolean;
  namePrefix?: string;
  /**
   * Extra host paths bound into every container (e.g. the official worker's SDK and the control-plane
   * socket of the ama_worker lane). Read-only unless `writable`; they may not cover the workspace or outputs.
   */
  binds?: readonly { source: string; target: string; writable?: boolean }[];
  /**
   * The egress gateway the host composes (one per container, see @openma/egress). The container keeps
   * `NetworkMode: none`; the gateway's listening socket is bound at 127.0.0.1:3128 inside the container's own
   * network namespace (entered from the host), so it is the container's only way out. Needs dockerd on this
   * host and this process as root.
   */
  credentialEgress?: CredentialEgressPort;
  /** Host directory for the per-container trust files (default: under the OS temp dir). */
  egressStateDir?: string;
  /** nsenter (util-linux), to bind the gateway's socket inside the container (default /usr/bin/nsenter). */
  nsenterPath?: string;
}

type Input<M extends "acquire" | "heartbeat" | "suspend" | "terminate" | "inspect"> = Parameters<ManagedSandboxPort[M]>[0];

type AcquireInput = Omit<Input<"acquire">, "plan"> & Partial<Pick<Input<"acquire">, "plan">>;

const hash = (text: string) => createHash("sha256").update(text).digest("hex");

/** `<prefix>-<scope hash>-g<generation>-<acquire-key hash>`: the same acquire always names the same container. */
export function containerName(prefix: string, scope: RuntimeResourceScope, generation: number, idempotencyKey: string): string {
  return `${prefix}-${hash(runtimeScopeKey(scope)).slice(0, 20)}-g${generation}-${hash(idempotencyKey).slice(0, 10)}`;
}

type Binding = WorkspaceBinding | SessionOutputBinding;

/** The host directory behind a binding, from its metadata (`hostPath`, as the filesystem ports set it). */
function hostPathOf(binding: Binding): { ok: true; path: string | null } | { ok: false; reason: string } {
  const path = binding.metadata?.hostPath;
  if (path === undefined || path === null) return { ok: true, path: null };
  if (typeof path !== "string" || !isAbsolute(path))
    return { ok: false, reason: `binding ${binding.bindingId}: hostPath must be an absolute path` };
  return { ok: true, path };
}

function mountsFor(
  workspace: WorkspaceBinding,
  outputs: SessionOutputBinding | null,
): { ok: true; mounts: Docker.MountConfig } | { ok: false; reason: string } {
  const mounts: Docker.MountConfig = [];
  const ws = hostPathOf(workspace);
  if (!ws.ok) return ws;
  if (ws.path !== null) mounts.push({ Type: "bind", Source: ws.path, Target: WORKSPACE_MOUNT_PATH, ReadOnly: false });
  // Without a host directory the workspace lives only in the container: acceptable only when nothing must survive it.
  else if (workspace.strategy !== "ephemeral")
    return { ok: false, reason: `workspace binding ${workspace.bindingId} has no hostPath to bind-mount` };
  if (outputs) {
    const out = hostPathOf(outputs);
    if (!out.ok) return out;
    if (out.path === null) return { ok: false, reason: `output binding ${outputs.bindingId} has no hostPath to bind-mount` };
    mounts.push({ Type: "bind", Source: out.path, Target: OUTPUTS_MOUNT_PATH, ReadOnly: false });
  }
  return { ok: true, mounts };
}

/** A running container's gateway, held by the process that acquired it. */
interface LiveGateway {
  close(): void;
}

export class NodeDockerSandbox implements ManagedSandboxPort, SandboxInventoryPort {
  readonly capabilities: SandboxCapabilities;
  readonly docker: Docker;
  readonly #options: NodeDockerSandboxOptions;
  readonly #limits: ResourceLimits;
  /** Shared with every `forImage` sibling, so a lease acquired on one is closed by a terminate on another. */
  #gateways = new Map<string, LiveGateway>();
  readonly #user: { uid: number; gid: number };

  constructor(options: NodeDockerSandboxOptions) {
    this.#options = options;
    this.docker = options.docker ?? connectDocker();
    this.#limits = { ...DEFAULT_LIMITS, ...options.limits };
    const { cpus, memoryBytes, pids } = this.#limits;
    // The Engine's own floors (6 MiB of memory) and sane ceilings; a bad value is a configuration error, not a runtime one.
    if (!(cpus > 0 && cpus <= 1024)) throw new Error("node-docker: limits.cpus must be in (0, 1024]");
    if (!(Number.isSafeInteger(memoryBytes) && memoryBytes >= 6 * 1024 * 1024))
      throw new Error("node-docker: limits.memoryBytes must be an integer >= 6 MiB");
    if (!(Number.isSafeInteger(pids) && pids >= 8 && pids <= 4_194_304))
      throw new Error("node-docker: limits.pids must be an integer in [8, 4194304]");
    for (const bind of options.binds ?? []) {
      const issue = bindIssue(bind);
      if (issue) throw new Error(`node-docker: binds: ${issue}`);
    }
    if (options.credentialEgress && (options.networkMode ?? "none") !== "none")
      throw new Error("node-docker: credentialEgress needs networkMode none (the gateway must be the only way out)");
    const gateway = options.credentialEgress;
    this.capabilities = gateway
      ? {
          ...NODE_DOCKER_SANDBOX_CAPABILITIES,
          facts: {
            has: [...NODE_DOCKER_SANDBOX_CAPABILITIES.facts.has, "egress_gateway", "credential_substitution"],
            lacks: NODE_DOCKER_SANDBOX_CAPABILITIES.facts.lacks,
          },
          credentialEgress: gateway.capabilities,
        }
      : (options.networkMode ?? "none") === "none"
        ? NODE_DOCKER_SANDBOX_CAPABILITIES
        : { ...NODE_DOCKER_SANDBOX_CAPABILITIES, credentialEgress: { enforcement: "unsupported" } };
    this.#user = parseUser(options.user);
  }

  /** The uid:gid the agent's processes run as. */
  get user(): { uid: number; gid: number } {
    return { ...this.#user };
  }

  /** The same driver on another image (an environment's package layer); leases of either work on both. */
  forImage(image: string): NodeDockerSandbox {
    const sibling = new NodeDockerSandbox({ ...this.#options, image, docker: this.docker });
    sibling.#gateways = this.#gateways;
    return sibling;
  }

  /** The image new containers start from. */
  get image(): string {
    return this.#options.image;
  }

  /** The plan is optional: the container is the same whatever harness lane runs in it. */
  async acquire(input: AcquireInput): Promise<SandboxAcquireResult> {
    const mounts = mountsFor(input.workspace, input.outputs);
    if (!mounts.ok) return { type: "unavailable", reason: mounts.reason, retryable: false };
    const owned = await this.#handOver(mounts.mounts);
    if (owned !== null) return { type: "unavailable", reason: owned, retryable: false };
    const name = containerName(this.#options.namePrefix ?? "openma", input.scope, input.fence.generation, input.idempotencyKey);
    const labels = this.#labels(input.scope, input.fence, input.idempotencyKey);
    try {
      const existing = await this.#adopt(name, labels);
      if (existing) return existing;
      if (input.signal.aborted) return { type: "unavailable", reason: "acquire aborted", retryable: true };
      const egress = await this.#openEgress(name, input);
      let container: Docker.Container;
      try {
        container = await this.docker.createContainer(this.#createOptions(name, labels, [...mounts.mounts, ...egress.mounts], egress.env));
      } catch (err) {
        await egress.close();
        // A concurrent acquire with the same key won the name: its container is this acquire's answer.
        if (statusOf(err) === 409) return this.#adoptAfterConflict(name, labels);
        throw err;
      }
      try {
        if (input.signal.aborted) throw new Error("acquire aborted");
        await startIdempotent(container);
        await egress.attach(container);
      } catch (err) {
        // Never leave a created-but-unowned container behind.
        await container.remove({ force: true, v: true }).catch(() => {});
        await egress.close();
        throw err;
      }
      return { type: "acquired", lease: this.#lease(name, container.id, input.fence.generation) };
    } catch (err) {
      const status = statusOf(err);
      const hint = status === 404 ? ` (${PROVISION_HINT})` : "";
      // 4xx is a configuration problem (missing image, bad mount) that a retry will not fix.
      const retryable = status === undefined || status >= 500;
      return { type: "unavailable", reason: `docker: ${describeError(err)}${hint}`, retryable };
    }
  }

  /**
   * An earlier acquire with the same key already made this container: reuse
   * it while it runs, replace it when it stopped (`null`: create one). A
   * container holding the name without this acquire's labels is never
   * touched.
   */
  async #adopt(name: string, labels: Record<string, string>): Promise<SandboxAcquireResult | null> {
    let info: Docker.ContainerInspectInfo;
    try {
      info = await this.docker.getContainer(name).inspect();
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw err;
    }
    const theirs = info.Config.Labels ?? {};
    if (!Object.entries(labels).every(([key, value]) => theirs[key] === value)) {
      return {
        type: "unavailable",
        reason: `container ${name} exists but does not carry this acquire's ownership labels`,
        retryable: false,
      };
    }
    const lease = this.#lease(name, info.Id, Number(labels[LABELS.generation]));
    if (info.State.Running) return { type: "acquired", lease };
    // Created but not started yet: a concurrent acquire is between create and start. Starting twice is harmless.
    if (info.State.Status === "created") {
      await startIdempotent(this.docker.getContainer(info.Id));
      return { type: "acquired", lease };
    }
    // It ran and died: a fresh one under the same name.
    await this.docker.getContainer(info.Id).remove({ force: true, v: true });
    return null;
  }

  /**
   * The Engine reserves a name before the container can be inspected, so the
   * winner of a same-key race may not be visible yet: look again briefly.
   */
  async #adoptAfterConflict(name: string, labels: Record<string, string>): Promise<SandboxAcquireResult> {
    for (let attempt = 0; attempt < 12; attempt++) {
      const adopted = await this.#adopt(name, labels);
      if (adopted) return adopted;
      await new Promise((resolve) => setTimeout(resolve, Math.min(10 * 2 ** attempt, 250)));
    }
    return { type: "unavailable", reason: `container name ${name} is held by a concurrent acquire that did not finish`, retryable: true };
  }

  /**
   * The bound host directories become the sandbox uid's (recursively, never through symlinks), so the agent
   * can write its workspace and outputs. Needs a root host process unless they already belong to that uid.
   */
  async #handOver(mounts: Docker.MountConfig): Promise<string | null> {
    const { uid, gid } = this.#user;
    for (const mount of mounts) {
      const source = mount.Source as string;
      try {
        const info = await lstat(source);
        if (!info.isDirectory()) return `bind source ${source} is not a directory`;
        if (uid === 0) continue;
        // A host process that is not root can only hand over what it already owns (and has nothing to do then).
        if (process.getuid?.() !== 0 && info.uid === uid) continue;
        await chownTree(source, uid, gid);
      } catch (err) {
        return `cannot hand ${source} to the sandbox uid ${uid}: ${describeError(err)}`;
      }
    }
    return null;
  }

  #labels(scope: RuntimeResourceScope, fence: FenceIdentity, idempotencyKey: string): Record<string, string> {
    return {
      ...this.#options.labels,
      [LABELS.managed]: "true",
      [LABELS.driver]: NODE_DOCKER_PROVIDER,
      [LABELS.session]: scope.sessionId,
      [LABELS.environment]: scope.environmentId,
      [LABELS.generation]: String(fence.generation),
      [LABELS.owner]: fence.ownerId,
      [LABELS.scope]: hash(runtimeScopeKey(scope)).slice(0, 32),
      [LABELS.acquireKey]: hash(idempotencyKey).slice(0, 32),
    };
  }

  /**
   * The container's gateway, when one is composed: opened before the container exists (its trust files are
   * bound and its placeholders set at create), attached to the container's network namespace once it runs.
   */
  async #openEgress(
    name: string,
    input: Pick<AcquireInput, "scope" | "signal">,
  ): Promise<{
    env: Record<string, string>;
    mounts: Docker.MountConfig;
    attach(container: Docker.Container): Promise<void>;
    close(): Promise<void>;
  }> {
    const port = this.#options.credentialEgress;
    if (!port) return { env: {}, mounts: [], attach: async () => {}, close: async () => {} };
    const gateway = await port.open({ scope: input.scope, runtimeId: name, signal: input.signal });
    const hostDir = join(this.#egressRoot(), name);
    const env = gatewaySandboxEnv(gateway);
    const mounts: Docker.MountConfig = [];
    let server: Server | null = null;
    const close = async () => {
      server?.close();
      gateway.close();
      this.#gateways.delete(name);
      await rm(hostDir, { recursive: true, force: true });
    };
    try {
      if (gateway.caCertPem !== null) {
        writeTrustFiles(hostDir, gateway.caCertPem);
        mounts.push({ Type: "bind", Source: hostDir, Target: SANDBOX_EGRESS_DIR, ReadOnly: true });
        mounts.push({ Type: "bind", Source: join(hostDir, "ca-bundle.pem"), Target: SYSTEM_TRUST_STORE, ReadOnly: true });
      }
    } catch (err) {
      await close();
      throw err;
    }
    return {
      env,
      mounts,
      attach: async (container) => {
        const info = await container.inspect();
        if (!info.State.Running || !info.State.Pid) throw new Error(`container ${name} is not running`);
        server = await listenInNetnsOf({ nsenterPath: this.#nsenter(), pid: info.State.Pid, port: EGRESS_PROXY_PORT });
        server.on("connection", (socket) => gateway.accept(socket));
        server.unref();
        this.#gateways.set(name, { close: () => void close() });
      },
      close,
    };
  }

  #egressRoot(): string {
    return this.#options.egressStateDir ?? join(tmpdir(), `openma-docker-egress-${process.getuid?.() ?? "user"}`);
  }

  #nsenter(): string {
    if (this.#options.nsenterPath) return this.#options.nsenterPath;
    return ["/usr/bin/nsenter", "/bin/nsenter"].find((path) => existsSync(path)) ?? "nsenter";
  }

  #createOptions(
    name: string,
    labels: Record<string, string>,
    mounts: Docker.MountConfig,
    egressEnv: Record<string, string> = {},
  ): Docker.ContainerCreateOptions {
    const networkMode = this.#options.networkMode ?? "none";
    const limits = this.#limits;
    const { uid, gid } = this.#user;
    const root = uid === 0;
    const owner = `uid=${uid},gid=${gid}`;
    const home = root ? "/root" : SANDBOX_HOME;
    const readOnlyRootfs = this.#options.readOnlyRootfs ?? true;
    return {
      name,
      Image: this.#options.image,
      Cmd: IDLE_COMMAND,
      WorkingDir: WORKSPACE_MOUNT_PATH,
      User: `${uid}:${gid}`,
      // HOME explicitly: an image without a passwd entry for the uid would otherwise give `/`.
      Env: Object.entries({ HOME: home, ...this.#options.env, ...egressEnv }).map(([key, value]) => `${key}=${value}`),
      Labels: labels,
      NetworkDisabled: networkMode === "none",
      HostConfig: {
        NetworkMode: networkMode,
        Init: true,
        Mounts: [...mounts, ...this.#extraMounts()],
        ReadonlyRootfs: readOnlyRootfs,
        // Memory only (they count against the memory limit). The runtime directory holds pid and secret
        // files: private to the sandbox uid, never executable.
        Tmpfs: {
          [RUNTIME_DIR]: `rw,nosuid,nodev,noexec,size=16m,mode=0700,${owner}`,
          // `exec` explicitly: the Engine's tmpfs default is noexec, and agents build and run things in /tmp.
          "/tmp": "rw,exec,nosuid,nodev,size=512m,mode=1777",
          ...(root ? {} : { [SANDBOX_HOME]: `rw,exec,nosuid,nodev,size=256m,mode=0700,${owner}` }),
          // An ephemeral workspace without a host directory on a read-only root: a tmpfs writable by the sandbox
          // uid. On a writable root it stays in the container's own layer, which outlives a stop (as a vendor's box).
          ...(mounts.some((m) => m.Target === WORKSPACE_MOUNT_PATH) || !readOnlyRootfs
            ? {}
            : { [WORKSPACE_MOUNT_PATH]: `rw,exec,nosuid,nodev,size=1g,${owner}` }),
        },
        NanoCpus: Math.round(limits.cpus * 1e9),
        Memory: limits.memoryBytes,
        MemorySwap: limits.memoryBytes,
        PidsLimit: limits.pids,
        CapDrop: ["ALL"],
        CapAdd: root ? ROOT_CAPABILITIES : [],
        SecurityOpt: ["no-new-privileges"],
        RestartPolicy: { Name: "no" },
        LogConfig: { Type: "none", Config: {} },
      },
    };
  }

  #extraMounts(): Docker.MountConfig {
    return (this.#options.binds ?? []).map((bind) => ({
      Type: "bind" as const,
      Source: bind.source,
      Target: bind.target,
      ReadOnly: bind.writable !== true,
    }));
  }

  #lease(name: string, containerId: string, generation: number): ManagedSandboxLease {
    return { provider: NODE_DOCKER_PROVIDER, runtimeId: name, metadata: { containerId, image: this.#options.image, generation } };
  }

  async heartbeat(input: Input<"heartbeat">): Promise<SandboxHeartbeatResult> {
    const refused = leaseProblem(input.lease);
    if (refused) return { type: "lost", reason: refused };
    let info: Docker.ContainerInspectInfo;
    try {
      info = await this.docker.getContainer(input.lease.runtimeId).inspect({ abortSignal: input.signal });
    } catch (err) {
      if (statusOf(err) === 404) return { type: "lost", reason: `container ${input.lease.runtimeId} no longer exists` };
      throw err; // the engine did not answer: transient, the host retries
    }
    if (!ownedBy(info, input.lease)) return { type: "lost", reason: `container ${input.lease.runtimeId} was replaced` };
    if (info.State.Running && !info.State.Paused) return { type: "alive" };
    const oom = info.State.OOMKilled ? ", killed for exceeding its memory limit" : "";
    return { type: "lost", reason: `container ${input.lease.runtimeId} is ${info.State.Status} (exit code ${info.State.ExitCode}${oom})` };
  }

  async suspend(_input: Input<"suspend">): Promise<SandboxSuspendResult> {
    return { type: "failed", error: "node-docker does not support suspend (a plain container is not retained across host loss)" };
  }

  async terminate(input: Input<"terminate">): Promise<SandboxTerminateResult> {
    const result = await this.#remove(input.lease);
    return result.type === "failed" ? result : { type: "terminated" };
  }

  /** From the serialized lease alone: no state from the process that acquired it is needed. */
  reap(input: OrphanReapInput): Promise<OrphanReapResult> {
    return this.#remove(input.lease);
  }

  /** Hard kill + remove, idempotent: a container already gone is `not_found`. Failures are values. */
  async #remove(lease: ManagedSandboxLease): Promise<OrphanReapResult> {
    const refused = leaseProblem(lease);
    if (refused) return { type: "failed", error: refused };
    try {
      const info = await this.docker.getContainer(lease.runtimeId).inspect();
      // A container with this name that is not ours (or not this lease's) must never be killed.
      if (!ownedBy(info, lease)) return { type: "failed", error: `container ${lease.runtimeId} is not owned by this lease` };
      await this.docker.getContainer(info.Id).remove({ force: true, v: true });
      this.#gateways.get(lease.runtimeId)?.close();
      return { type: "reaped" };
    } catch (err) {
      const status = statusOf(err);
      if (status === 404) {
        this.#gateways.get(lease.runtimeId)?.close();
        return { type: "not_found" };
      }
      // 409 "removal already in progress": another reaper got there first; it will finish.
      if (status === 409 && /already in progress/i.test(describeError(err))) return { type: "reaped" };
      return { type: "failed", error: `docker: ${describeError(err)}` };
    }
  }

  async inspect(input: Input<"inspect">): Promise<SandboxInspectResult> {
    if (leaseProblem(input.lease)) return { state: "unknown" };
    try {
      const info = await this.docker.getContainer(input.lease.runtimeId).inspect({ abortSignal: input.signal });
      if (!ownedBy(info, input.lease)) return { state: "unknown" };
      if (info.State.Paused) return { state: "suspended" };
      return { state: info.State.Running ? "running" : "stopped" };
    } catch (err) {
      // Removed is the final form of stopped; an engine that does not answer tells us nothing.
      return { state: statusOf(err) === 404 ? "stopped" : "unknown" };
    }
  }

  /** The tool exec port of a running lease (exec, streaming, files) for the harness outside the sandbox. */
  toolSandbox(lease: ManagedSandboxLease, options: DockerToolSandboxOptions = {}): DockerToolSandbox {
    const refused = leaseProblem(lease);
    if (refused) throw new Error(refused);
    return new DockerToolSandbox(this.docker.getContainer(lease.runtimeId), options);
  }

  /**
   * The containers this driver made carrying its configured extra labels (a
   * serve lane's deployment, a runtime host's identity), read back from
   * their labels: what a reaper judges against the owner records.
   */
  async listOwned(input: { signal: AbortSignal }): Promise<SandboxListResult> {
    try {
      input.signal.throwIfAborted();
      const runtimes: OwnedRuntime[] = [];
      for (const info of await this.listManaged(this.#options.labels)) {
        const labels = info.Labels ?? {};
        const name = info.Names?.[0]?.replace(/^\//, "");
        const scope = { environmentId: labels[LABELS.environment], sessionId: labels[LABELS.session] };
        const ownerId = labels[LABELS.owner];
        const generation = Number(labels[LABELS.generation]);
        if (!name || !isRuntimeIdentifier(scope.environmentId) || !isRuntimeIdentifier(scope.sessionId) || !isRuntimeIdentifier(ownerId))
          continue;
        if (!Number.isSafeInteger(generation) || generation < 1) continue;
        const state = info.State === "running" ? "running" : info.State === "paused" ? "suspended" : "stopped";
        const createdAt = typeof info.Created === "number" ? new Date(info.Created * 1000).toISOString() : null;
        runtimes.push({
          lease: this.#lease(name, info.Id, generation),
          scope: scope as OwnedRuntime["scope"],
          ownerId,
          generation,
          state,
          createdAt,
        });
      }
      return { type: "listed", runtimes };
    } catch (err) {
      return { type: "failed", error: `docker: ${describeError(err)}`, retryable: true };
    }
  }

  /** Containers this driver made that carry every given label (tests and operators sweep by label). */
  async listManaged(labels: Readonly<Record<string, string>> = {}): Promise<Docker.ContainerInfo[]> {
    const filters = [
      `${LABELS.managed}=true`,
      `${LABELS.driver}=${NODE_DOCKER_PROVIDER}`,
      ...Object.entries(labels).map(([k, v]) => `${k}=${v}`),
    ];
    return this.docker.listContainers({ all: true, filters: { label: filters } });
  }
}

/** `docker start` answers 304 when the container already runs: for us that is success. */
async function startIdempotent(container: Docker.Container): Promise<void> {
  try {
    await container.start();
  } catch (err) {
    if (statusOf(err) !== 304) throw err;
  }
}

const RESERVED_TARGETS = [WORKSPACE_MOUNT_PATH, OUTPUTS_MOUNT_PATH, "/proc", "/dev", "/sys", RUNTIME_DIR, "/tmp", SANDBOX_HOME];

/** `uid:gid`, numeric: names would depend on the image's passwd, which the host cannot check. */
function parseUser(user: string | undefined): { uid: number; gid: number } {
  if (user === undefined) return { ...SANDBOX_USER };
  const match = /^(\d{1,10}):(\d{1,10})$/.exec(user);
  const [uid, gid] = match ? [Number(match[1]), Number(match[2])] : [Number.NaN, Number.NaN];
  if (!(uid < 2 ** 31 - 1 && gid < 2 ** 31 - 1))
    throw new Error(`node-docker: user must be a numeric uid:gid, got ${JSON.stringify(user)}`);
  return { uid, gid };
}

/** A bind may add paths, never shadow the bindings or the driver's own runtime directory. */
function bindIssue(bind: { source: string; target: string }): string | null {
  if (!isAbsolute(bind.source)) return `source ${JSON.stringify(bind.source)} must be absolute`;
  if (!isAbsolute(bind.target) || normalize(bind.target) !== bind.target || bind.target === "/")
    return `target ${JSON.stringify(bind.target)} must be a normalized absolute path other than /`;
  const clash = RESERVED_TARGETS.find((r) => r === bind.target || r.startsWith(`${bind.target}/`) || bind.target.startsWith(`${r}/`));
  return clash ? `target ${bind.target} would cover ${clash}` : null;
}

function leaseProblem(lease: ManagedSandboxLease): string | null {
  const issues = sandboxLeaseIssues(lease);
  if (issues.length > 0) return `invalid lease: ${issues.join("; ")}`;
  if (lease.provider !== NODE_DOCKER_PROVIDER) return `lease belongs to provider ${lease.provider}, not ${NODE_DOCKER_PROVIDER}`;
  return null;
}

/** Ours, and the very container the lease names (same generation; same id when the lease recorded one). */
function ownedBy(info: Docker.ContainerInspectInfo, lease: ManagedSandboxLease): boolean {
  const labels = info.Config.Labels ?? {};
  if (labels[LABELS.managed] !== "true" || labels[LABELS.driver] !== NODE_DOCKER_PROVIDER) return false;
  const meta = lease.metadata ?? {};
  if (typeof meta.containerId === "string" && meta.containerId !== info.Id) return false;
  if (typeof meta.generation === "number" && labels[LABELS.generation] !== String(meta.generation)) return false;
  return true;
}
