/**
 * The bubblewrap driver: a ManagedSandboxPort whose runtimes are bwrap
 * sandboxes on this host (no daemon), plus the ToolSandboxPort and duplex
 * processes that run inside them.
 *
 * Isolation: user, pid, ipc, uts, network and (where possible) cgroup
 * namespaces; a read-only base (host `/usr` or a rootfs directory); private
 * writable `/tmp`, `/workspace` and `/mnt/session/outputs`; no capabilities;
 * a seccomp denylist on x86_64/aarch64; resource limits through a delegated
 * cgroup v2 parent, the host's cgroup v1 hierarchies, or rlimits. When the
 * driver runs as root, sandbox processes run as an unprivileged host uid of
 * their own (one per sandbox from `hostUidRange`, unless one is configured),
 * so a file the sandbox can reach through a bug is still not readable as
 * root, and per-uid budgets are never shared between sandboxes.
 *
 * Network: none by default (a namespace with only loopback); with
 * `network: {mode: "proxy", allow}`, an HTTP/CONNECT proxy with a host
 * allowlist reachable at 127.0.0.1:3128 inside the sandbox is the only way out.
 *
 * No suspend/resume (declared). A runtime is recorded under the state root
 * (pid + start time), so any process sharing that root can reap it from its
 * serialized lease.
 */
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, renameSync, statSync, writeFileSync } from "node:fs";
import { chmod, chown, rm } from "node:fs/promises";
import type { Server } from "node:net";
import { tmpdir } from "node:os";
import { join, posix } from "node:path";
import type {
  CredentialEgressPort,
  ExecInput,
  FenceIdentity,
  ManagedSandboxLease,
  ManagedSandboxPort,
  OrphanReapInput,
  OrphanReapResult,
  OwnedRuntime,
  SandboxAcquireResult,
  SandboxCapabilities,
  SandboxEgress,
  SandboxHeartbeatResult,
  SandboxInspectResult,
  SandboxInventoryPort,
  SandboxListResult,
  SandboxSuspendResult,
  SandboxTerminateResult,
  ToolSandboxPort,
} from "@openma/contract";
import {
  EGRESS_PROXY_PORT,
  listenInNetns,
  SANDBOX_EGRESS_DIR,
  SYSTEM_TRUST_STORE,
  sandboxProxyEnv,
  sandboxTrustEnv,
  writeTrustFiles,
} from "@openma/egress";
import { type EgressOptions, EgressProxy, proxyEnv } from "./egress.ts";
import { type ExecContext, execInSandbox, type SandboxProcess, spawnInSandbox, type Tools } from "./exec.ts";
import { chownTree, SandboxFs } from "./files.ts";
import {
  claimHostUid,
  clearStaleHostUids,
  DEFAULT_HOST_UID_RANGE,
  type HostUidRange,
  hostUidRangeIssues,
  releaseHostUid,
} from "./host-uids.ts";
import { startInit } from "./init.ts";
import { baseLayout, type ExtraBind, extraBindIssues, layoutArgs, type MountEntry, runtimeLayout, syntheticEtc } from "./layout.ts";
import {
  CgroupParent,
  CgroupV1,
  DEFAULT_LIMITS,
  killCgroups,
  type LimitEnforcement,
  limitEnforcement,
  limitIssues,
  type ResourceLimits,
  removeCgroups,
  type SandboxCgroups,
} from "./limits.ts";
import { isSameLiveProcess, killExact, readStat, waitGone } from "./proc.ts";
import { bubblewrapProcesses } from "./process-port.ts";
import { seccompProgram } from "./seccomp.ts";
import {
  isRuntimeId,
  makeRuntimeDir,
  makingRuntimeId,
  PROVIDER,
  type RuntimeCreator,
  type RuntimeOwner,
  type RuntimeState,
  readCreator,
  readState,
  runtimeDir,
  runtimeIdFor,
  writeState,
} from "./state.ts";

export const PROVISION_HINT = "run `npm run provision`";

export type NetworkOptions = { mode: "none" } | ({ mode: "proxy" } & EgressOptions);

export interface BubblewrapOptions {
  /** Runtime records and private `/tmp` directories (default /run/openma/bwrap as root, else a temp dir). */
  stateRoot?: string;
  /** Extra ownership labels recorded with every runtime; `listOwned` lists only runtimes carrying them (a serve lane's deployment). */
  labels?: Readonly<Record<string, string>>;
  /** A root filesystem directory (e.g. /var/lib/openma/rootfs/<tag>) instead of the host's `/usr`. */
  rootfs?: string | null;
  network?: NetworkOptions;
  /**
   * The egress gateway the host composes (one per sandbox, see @openma/egress): the sandbox's only way out,
   * applying the environment's networking and substituting credentials. Excludes `network: proxy`.
   */
  credentialEgress?: CredentialEgressPort;
  limits?: Partial<ResourceLimits>;
  /** A delegated cgroup v2 directory; without it, the v1 hierarchies (see `cgroupV1Root`) or rlimits. */
  cgroupParent?: string | null;
  /**
   * Where the cgroup v1 hierarchies are mounted (default /sys/fs/cgroup): used as root when the host has the v1
   * memory, pids and cpu controllers and no `cgroupParent` is given; false keeps rlimits on such a host.
   */
  cgroupV1Root?: string | false;
  /** The seccomp denylist (default on where supported). */
  seccomp?: boolean;
  hostname?: string;
  /** Identity inside the sandbox (default 1000:1000). */
  sandboxUser?: { uid: number; gid: number };
  /** When the driver runs as root: one host uid/gid for every sandbox's processes (default: one per sandbox); null keeps root. */
  hostUser?: { uid: number; gid: number } | null;
  /** When the driver runs as root and `hostUser` is not given: the host uids sandboxes get one each from (uid = gid). */
  hostUidRange?: HostUidRange;
  /** Variables every process gets (PATH, HOME, LANG and TERM have defaults). */
  env?: Readonly<Record<string, string>>;
  binds?: readonly ExtraBind[];
  tools?: Partial<Tools>;
  startTimeoutMs?: number;
  killTimeoutMs?: number;
}

type PortInput<M extends "acquire" | "heartbeat" | "suspend" | "terminate" | "inspect"> = Parameters<ManagedSandboxPort[M]>[0];

interface Live {
  state: RuntimeState;
  /** Null when this process cannot run anything in it (host checks failed). */
  ctx: ExecContext | null;
  fs: SandboxFs;
  /** Present only in the process that started the runtime. */
  stdin: { destroy(): void } | null;
  egress: { close(): void } | null;
}

const BIN_DIRS = ["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"];

function findTool(name: string): string | null {
  for (const dir of BIN_DIRS) if (existsSync(join(dir, name))) return join(dir, name);
  return null;
}

const BASE_ENV = {
  PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
  HOME: "/tmp",
  LANG: "C.UTF-8",
  TERM: "dumb",
};

function hostPathOf(
  binding: { metadata?: Record<string, unknown> } | null,
  field: string,
): { ok: true; path: string } | { ok: false; reason: string } {
  const path = binding?.metadata?.hostPath;
  if (typeof path !== "string" || !path.startsWith("/"))
    return { ok: false, reason: `${field}.metadata.hostPath: must be an absolute host directory` };
  try {
    if (!statSync(path).isDirectory()) return { ok: false, reason: `${field}.metadata.hostPath: ${path} is not a directory` };
  } catch {
    return { ok: false, reason: `${field}.metadata.hostPath: ${path} does not exist` };
  }
  return { ok: true, path };
}

/** The cgroups runtimes get: a delegated v2 parent, else (as root) the host's v1 hierarchies when mounted, else none. */
function cgroupsFor(options: BubblewrapOptions, root: boolean): SandboxCgroups | null {
  if (options.cgroupParent) return new CgroupParent(options.cgroupParent);
  const v1Root = options.cgroupV1Root ?? "/sys/fs/cgroup";
  if (!root || v1Root === false) return null;
  return CgroupV1.detect(v1Root);
}

export class BubblewrapSandbox implements ManagedSandboxPort, SandboxInventoryPort {
  readonly capabilities: SandboxCapabilities;
  readonly stateRoot: string;
  readonly limits: ResourceLimits;
  readonly enforcement: LimitEnforcement;
  readonly tools: Tools;
  readonly #options: BubblewrapOptions;
  /** A fixed host identity, one per sandbox ("per_sandbox"), or none (not root, or configured to stay root). */
  readonly #hostUser: { uid: number; gid: number } | "per_sandbox" | null;
  readonly #uidRange: HostUidRange;
  readonly #sandboxUser: { uid: number; gid: number };
  readonly #hostname: string;
  readonly #seccomp: Buffer | null;
  readonly #cgroup: SandboxCgroups | null;
  // Shared with every `withExtras` sibling, so leases of one are live (and locked) for the others.
  #live = new Map<string, Live>();
  #locks = new Map<string, Promise<unknown>>();
  #ready: Promise<{ ok: true; base: MountEntry[]; seccompFile: string | null } | { ok: false; reason: string }> | null = null;

  constructor(options: BubblewrapOptions = {}) {
    this.#options = options;
    const root = process.getuid?.() === 0;
    this.stateRoot = options.stateRoot ?? (root ? "/run/openma/bwrap" : join(tmpdir(), `openma-bwrap-${process.getuid?.() ?? "user"}`));
    this.#hostUser = root ? (options.hostUser === undefined ? "per_sandbox" : options.hostUser) : null;
    this.#uidRange = options.hostUidRange ?? DEFAULT_HOST_UID_RANGE;
    this.#sandboxUser = options.sandboxUser ?? { uid: 1000, gid: 1000 };
    this.#hostname = options.hostname ?? "sandbox";
    if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(this.#hostname)) throw new Error("hostname: must be a DNS label");
    this.limits = { ...DEFAULT_LIMITS, ...options.limits };
    const issues = [...limitIssues(this.limits), ...(options.binds ?? []).flatMap(extraBindIssues), ...hostUidRangeIssues(this.#uidRange)];
    for (const [field, ids] of [
      ["sandboxUser", this.#sandboxUser],
      ["hostUser", options.hostUser ?? null],
    ] as const) {
      if (ids !== null && ![ids.uid, ids.gid].every((id) => Number.isInteger(id) && id >= 0 && id < 2 ** 31 - 1)) {
        issues.push(`${field}: uid and gid must be integers between 0 and 2147483646`);
      }
    }
    if (options.network?.mode === "proxy") {
      const port = options.network.port ?? 3128;
      if (!Number.isInteger(port) || port < 1 || port > 65535) issues.push("network.port: must be between 1 and 65535");
      new EgressProxy(options.network).close(); // validates the allowlist now rather than at first acquire
    }
    if (options.credentialEgress && options.network?.mode === "proxy")
      issues.push("network: proxy and credentialEgress exclude each other (the gateway is the proxy)");
    if (issues.length > 0) throw new Error(`bubblewrap driver: ${issues.join("; ")}`);
    this.tools = {
      bwrap: options.tools?.bwrap ?? findTool("bwrap") ?? "bwrap",
      nsenter: options.tools?.nsenter ?? findTool("nsenter") ?? "nsenter",
      unshare: options.tools?.unshare ?? findTool("unshare") ?? "unshare",
      prlimit: options.tools?.prlimit === undefined ? findTool("prlimit") : options.tools.prlimit,
      setpriv: options.tools?.setpriv === undefined ? findTool("setpriv") : options.tools.setpriv,
    };
    this.#seccomp = options.seccomp === false ? null : seccompProgram();
    this.#cgroup = cgroupsFor(options, root);
    const hostUid = this.#hostUser === "per_sandbox" ? this.#uidRange.first : (this.#hostUser?.uid ?? process.getuid?.() ?? 0);
    this.enforcement = limitEnforcement(this.#cgroup?.mechanism ?? null, hostUid);
    this.capabilities = this.#describe(hostUid);
  }

  #describe(hostUid: number): SandboxCapabilities {
    const gateway = this.#options.credentialEgress;
    const proxy = this.#options.network?.mode === "proxy" || gateway !== undefined;
    const has = ["duplex_process", "workspace_file_io", "process_tree_kill", "private_network_namespace", "read_only_base"];
    const lacks = ["provider_suspend_resume", "process_memory_checkpoint", "durable_output_mount"];
    if (proxy) has.push("egress_proxy_allowlist");
    (gateway ? has : lacks).push("credential_substitution");
    (this.#seccomp ? has : lacks).push("seccomp_syscall_denylist");
    const mechanism = this.#cgroup?.mechanism ?? null;
    (mechanism === "cgroup_v2" ? has : lacks).push("resource_limits_cgroup_v2");
    if (mechanism === "cgroup_v1") has.push("resource_limits_cgroup_v1");
    if (mechanism === null) has.push("resource_limits_rlimit");
    (hostUid !== 0 ? has : lacks).push("unprivileged_host_uid");
    (this.#hostUser === "per_sandbox" ? has : lacks).push("per_sandbox_host_uid");
    return {
      provider: PROVIDER,
      lifecycle: { suspendResume: "unsupported", hardTerminate: "supported", orphanReap: "host_managed" },
      facts: { has, lacks },
      // No route out but the proxy (or none at all): the namespace has only loopback.
      credentialEgress: gateway ? gateway.capabilities : { enforcement: "enforced", interceptedProtocols: proxy ? ["http", "https"] : [] },
    };
  }

  /**
   * The same driver with more binds and variables for the sandboxes it starts (an environment's package
   * prefix); leases of either are heartbeated, used and terminated through both.
   */
  withExtras(extra: { binds?: readonly ExtraBind[]; env?: Readonly<Record<string, string>> }): BubblewrapSandbox {
    const options = this.#options;
    const sibling = new BubblewrapSandbox({
      ...options,
      binds: [...(options.binds ?? []), ...(extra.binds ?? [])],
      env: { ...options.env, ...extra.env },
    });
    sibling.#live = this.#live;
    sibling.#locks = this.#locks;
    return sibling;
  }

  /** One-time host checks and files shared by every runtime; a failure is reported by acquire, not thrown. */
  #prepare() {
    this.#ready ??= (async () => {
      if (!existsSync(this.tools.bwrap) && !findTool(this.tools.bwrap)) {
        return { ok: false as const, reason: `bubblewrap (bwrap) is not installed: ${PROVISION_HINT}` };
      }
      for (const tool of [this.tools.nsenter, this.tools.unshare]) {
        if (!existsSync(tool) && !findTool(tool))
          return { ok: false as const, reason: `${tool} (util-linux) is not installed: ${PROVISION_HINT}` };
      }
      if (process.getuid?.() !== 0) {
        // Joining a sandbox's pid namespace needs a private /proc mount, which needs root on the host.
        return {
          ok: false as const,
          reason: "the bubblewrap driver must run as root (it drops every sandbox to an unprivileged host uid)",
        };
      }
      if (this.#hostUser !== null && this.tools.setpriv === null) {
        return { ok: false as const, reason: `setpriv (util-linux) is needed to drop sandboxes to an unprivileged uid: ${PROVISION_HINT}` };
      }
      const problem = this.#cgroup ? await this.#cgroup.probe() : null;
      if (problem !== null) return { ok: false as const, reason: `${this.#cgroup?.mechanism} limits: ${problem}` };
      mkdirSync(this.stateRoot, { recursive: true, mode: 0o711 });
      // Traversable by the sandbox's host uid, which bwrap runs as when it binds /tmp from here (never narrowed: it may be shared).
      const mode = statSync(this.stateRoot).mode & 0o7777;
      if ((mode & 0o011) !== 0o011) await chmod(this.stateRoot, mode | 0o011);
      for (const bind of this.#options.binds ?? []) {
        if (!existsSync(bind.source)) return { ok: false as const, reason: `binds: ${bind.source} does not exist` };
      }
      const etcDir = join(this.stateRoot, `etc-${this.#hostname}-${this.#sandboxUser.uid}-${this.#sandboxUser.gid}`);
      mkdirSync(etcDir, { recursive: true, mode: 0o755 });
      for (const [name, text] of Object.entries(syntheticEtc(this.#sandboxUser, this.#hostname)))
        atomicWrite(join(etcDir, name), text, 0o644);
      let seccompFile: string | null = null;
      if (this.#seccomp) {
        seccompFile = join(this.stateRoot, `seccomp-${process.arch}.bpf`);
        atomicWrite(seccompFile, this.#seccomp, 0o644);
      }
      let base: MountEntry[];
      try {
        base = baseLayout(this.#options.rootfs ?? null, etcDir);
      } catch (err) {
        return { ok: false as const, reason: `rootfs: ${(err as Error).message}` };
      }
      return { ok: true as const, base, seccompFile };
    })();
    return this.#ready;
  }

  /** The host identity a new runtime's processes run as: its own uid from the range, the configured one, or none. */
  async #hostUserFor(runtimeId: string): Promise<{ uid: number; gid: number } | null> {
    if (this.#hostUser !== "per_sandbox") return this.#hostUser;
    const uid = await claimHostUid(this.stateRoot, runtimeId, this.#uidRange);
    if (uid === null) throw new Error(`every host uid of hostUidRange (${this.#uidRange.count} from ${this.#uidRange.first}) is in use`);
    return { uid, gid: uid };
  }

  /** Serializes work per runtime id inside this process (acquire retries, terminate racing reap). */
  async #locked<T>(runtimeId: string, work: () => Promise<T>): Promise<T> {
    const previous = this.#locks.get(runtimeId) ?? Promise.resolve();
    const next = previous.then(work, work);
    this.#locks.set(runtimeId, next);
    try {
      return await next;
    } finally {
      if (this.#locks.get(runtimeId) === next) this.#locks.delete(runtimeId);
    }
  }

  async acquire(input: PortInput<"acquire">): Promise<SandboxAcquireResult> {
    const ready = await this.#prepare();
    if (!ready.ok) return { type: "unavailable", reason: ready.reason, retryable: false };
    const workspace = hostPathOf(input.workspace, "workspace");
    if (!workspace.ok) return { type: "unavailable", reason: workspace.reason, retryable: false };
    const outputs = input.outputs === null ? null : hostPathOf(input.outputs, "outputs");
    if (outputs !== null && !outputs.ok) return { type: "unavailable", reason: outputs.reason, retryable: false };
    const runtimeId = runtimeIdFor(input.scope, input.idempotencyKey);
    return this.#locked(runtimeId, async () => {
      const existing = await this.#load(runtimeId);
      if (existing && (await isSameLiveProcess(existing.state.initPid, existing.state.initStart))) {
        return { type: "acquired", lease: leaseOf(existing.state) };
      }
      if (existing) await this.#destroy(existing.state);
      return this.#start(runtimeId, ready, workspace.path, outputs?.ok ? outputs.path : null, input, this.#ownerOf(input.fence));
    });
  }

  async #start(
    runtimeId: string,
    ready: { base: MountEntry[]; seccompFile: string | null },
    workspace: string,
    outputs: string | null,
    input: Pick<PortInput<"acquire">, "scope" | "signal">,
    owner: RuntimeOwner,
  ): Promise<SandboxAcquireResult> {
    const signal = input.signal;
    const dir = runtimeDir(this.stateRoot, runtimeId);
    const tmpDir = join(dir, "tmp");
    await makeRuntimeDir(dir, await this.#creator());
    let cgroupDirs: string[] = [];
    let hostUser: { uid: number; gid: number } | null = null;
    let gateway: SandboxEgress | null = null;
    const undo = async () => {
      gateway?.close();
      await removeCgroups(cgroupDirs);
      if (hostUser !== null && this.#hostUser === "per_sandbox") await releaseHostUid(this.stateRoot, hostUser.uid, runtimeId);
      await rm(dir, { recursive: true, force: true });
    };
    let mounts: MountEntry[];
    try {
      if (this.#options.credentialEgress) {
        gateway = await this.#options.credentialEgress.open({ scope: input.scope, runtimeId, signal });
        if (gateway.caCertPem !== null) writeTrustFiles(join(dir, "egress"), gateway.caCertPem);
      }
      mounts = runtimeLayout(ready.base, { tmpDir, workspace, outputs, extra: this.#extraBinds(dir) });
      hostUser = await this.#hostUserFor(runtimeId);
      if (hostUser !== null) {
        await chown(tmpDir, hostUser.uid, hostUser.gid);
        await chownTree(workspace, hostUser.uid, hostUser.gid);
        if (outputs !== null) await chownTree(outputs, hostUser.uid, hostUser.gid);
      }
      if (this.#cgroup) cgroupDirs = await this.#cgroup.create(runtimeId, this.limits);
    } catch (err) {
      await undo();
      return { type: "unavailable", reason: `preparing the sandbox failed: ${(err as Error).message}`, retryable: true };
    }
    const init = await startInit({
      tools: this.tools,
      hostname: this.#hostname,
      sandboxUser: this.#sandboxUser,
      hostUser,
      layoutArgs: layoutArgs(mounts),
      seccompFile: ready.seccompFile,
      cgroupDirs,
      limits: this.limits,
      cwd: "/workspace",
      timeoutMs: this.#options.startTimeoutMs ?? 30_000,
      signal,
    });
    if (!init.ok) {
      await undo();
      return { type: "unavailable", reason: init.reason, retryable: init.retryable };
    }
    const state: RuntimeState = {
      version: 1,
      runtimeId,
      initPid: init.initPid,
      initStart: init.initStart,
      outerPid: init.outerPid,
      outerStart: init.outerStart,
      workspace,
      outputs,
      cgroupDirs,
      hostUser,
      createdAt: Date.now(),
      owner,
      ...(gateway ? { egressEnv: { ...gateway.env } } : {}),
    };
    const live = this.#liveFor(state, ready.seccompFile, mounts, init.child.stdin);
    try {
      await writeState(dir, state);
      live.egress = gateway ? await this.#startGateway(state, gateway) : await this.#startEgress(state);
    } catch (err) {
      gateway?.close();
      this.#live.set(runtimeId, live);
      await this.#destroy(state);
      return { type: "unavailable", reason: `starting the sandbox failed: ${(err as Error).message}`, retryable: true };
    }
    init.child.unref();
    for (const stream of [init.child.stdin, init.child.stdout, init.child.stderr]) (stream as unknown as { unref?: () => void })?.unref?.();
    this.#live.set(runtimeId, live);
    return { type: "acquired", lease: leaseOf(state) };
  }

  #liveFor(state: RuntimeState, seccompFile: string | null, mounts: MountEntry[], stdin: { destroy(): void } | null): Live {
    const network = this.#options.network;
    const gatewayEnv = this.#options.credentialEgress
      ? {
          ...sandboxProxyEnv(EGRESS_PROXY_PORT),
          ...(existsSync(join(runtimeDir(this.stateRoot, state.runtimeId), "egress")) ? sandboxTrustEnv() : {}),
          ...state.egressEnv,
        }
      : {};
    const env = {
      ...BASE_ENV,
      ...(network?.mode === "proxy" ? proxyEnv(network.port ?? 3128) : {}),
      ...this.#options.env,
      ...gatewayEnv,
    };
    const ctx: ExecContext = {
      tools: this.tools,
      initPid: state.initPid,
      initStart: state.initStart,
      hostname: this.#hostname,
      sandboxUser: this.#sandboxUser,
      hostUser: state.hostUser,
      layoutArgs: layoutArgs(mounts),
      env,
      seccompFile,
      cgroupDirs: state.cgroupDirs,
      limits: this.limits,
    };
    return { state, ctx, fs: new SandboxFs(mounts, state.hostUser), stdin, egress: null };
  }

  /** Extra binds plus, when the gateway gave this runtime a CA, its trust files (and the bundle over the trust store). */
  #extraBinds(dir: string): ExtraBind[] {
    const binds = [...(this.#options.binds ?? [])];
    const egressDir = join(dir, "egress");
    if (this.#options.credentialEgress && existsSync(egressDir)) {
      binds.push({ source: egressDir, target: SANDBOX_EGRESS_DIR });
      const store = this.#options.rootfs ? join(this.#options.rootfs, SYSTEM_TRUST_STORE) : SYSTEM_TRUST_STORE;
      if (existsSync(store)) binds.push({ source: join(egressDir, "ca-bundle.pem"), target: SYSTEM_TRUST_STORE });
    }
    return binds;
  }

  /** The gateway's socket inside the sandbox's namespace: 127.0.0.1:3128 there, the only way out. */
  async #startGateway(state: RuntimeState, gateway: SandboxEgress): Promise<Live["egress"]> {
    const server = await this.#listenInSandbox(state, EGRESS_PROXY_PORT);
    server.on("connection", (socket) => gateway.accept(socket));
    return {
      close: () => {
        server.close();
        gateway.close();
      },
    };
  }

  async #listenInSandbox(state: RuntimeState, port: number): Promise<Server> {
    const fd = openSync(`/proc/${state.initPid}/ns/net`, "r");
    try {
      if (!(await isSameLiveProcess(state.initPid, state.initStart))) throw new Error("the sandbox exited during start");
      const server = await listenInNetns({ nsenterPath: this.tools.nsenter, netnsFd: fd, port });
      server.unref();
      return server;
    } finally {
      closeSync(fd);
    }
  }

  async #startEgress(state: RuntimeState): Promise<Live["egress"]> {
    const network = this.#options.network;
    if (network?.mode !== "proxy") return null;
    const server = await this.#listenInSandbox(state, network.port ?? 3128);
    const proxy = new EgressProxy(network);
    server.on("connection", (socket) => proxy.accept(socket));
    return {
      close: () => {
        server.close();
        proxy.close();
      },
    };
  }

  /** The live record of a runtime: from memory, or rebuilt from its state file (another process started it). */
  async #load(runtimeId: string): Promise<Live | null> {
    const known = this.#live.get(runtimeId);
    if (known) return known;
    const state = await readState(runtimeDir(this.stateRoot, runtimeId));
    if (state === null) return null;
    const ready = await this.#prepare();
    if (!ready.ok) return { state, ctx: null, fs: new SandboxFs([], null), stdin: null, egress: null };
    const mounts = runtimeLayout(ready.base, {
      tmpDir: join(runtimeDir(this.stateRoot, runtimeId), "tmp"),
      workspace: state.workspace,
      outputs: state.outputs,
      extra: this.#extraBinds(runtimeDir(this.stateRoot, runtimeId)),
    });
    return this.#liveFor(state, ready.seccompFile, mounts, null);
  }

  /** Kills the runtime (cgroup, pid namespace, outer bwrap) and removes its records; false when it would not die. */
  async #destroy(state: RuntimeState): Promise<{ ok: true; killed: boolean } | { ok: false; error: string }> {
    const live = this.#live.get(state.runtimeId);
    live?.egress?.close();
    // Whether this call is what ended the sandbox: the cgroup kill below may already take its pid 1.
    const wasAlive = await isSameLiveProcess(state.initPid, state.initStart);
    await killCgroups(state.cgroupDirs);
    // Killing the namespace's pid 1 makes the kernel kill every process in it and in the exec namespaces nested in it.
    const killedInit = (await killExact(state.initPid, state.initStart)) || wasAlive;
    const timeout = this.#options.killTimeoutMs ?? 10_000;
    if (!(await waitGone(state.initPid, state.initStart, timeout))) {
      return { ok: false, error: `sandbox pid ${state.initPid} survived SIGKILL for ${timeout} ms` };
    }
    // The outer bwrap exits by itself once it has reaped the init; killing it first would leave the init a zombie.
    if (!(await waitGone(state.outerPid, state.outerStart, 1000))) {
      // (Or it is stuck: it must not outlive the sandbox.)
      await killExact(state.outerPid, state.outerStart);
      await waitGone(state.outerPid, state.outerStart, timeout);
    }
    live?.stdin?.destroy();
    this.#live.delete(state.runtimeId);
    if (!(await removeCgroups(state.cgroupDirs))) {
      return { ok: false, error: `cgroups ${state.cgroupDirs.join(", ")} could not be removed` };
    }
    if (state.hostUser !== null) await releaseHostUid(this.stateRoot, state.hostUser.uid, state.runtimeId);
    await rm(runtimeDir(this.stateRoot, state.runtimeId), { recursive: true, force: true });
    return { ok: true, killed: killedInit };
  }

  async heartbeat(input: PortInput<"heartbeat">): Promise<SandboxHeartbeatResult> {
    if (!isOwnLease(input.lease)) return { type: "lost", reason: "not a bubblewrap lease" };
    const live = await this.#load(input.lease.runtimeId);
    if (live === null) return { type: "lost", reason: "no record of this sandbox" };
    if (!(await isSameLiveProcess(live.state.initPid, live.state.initStart)))
      return { type: "lost", reason: "the sandbox's init process exited" };
    return { type: "alive" };
  }

  async suspend(_input?: PortInput<"suspend">): Promise<SandboxSuspendResult> {
    return { type: "failed", error: "bubblewrap sandboxes cannot be suspended (declared suspendResume: unsupported)" };
  }

  async terminate(input: PortInput<"terminate">): Promise<SandboxTerminateResult> {
    if (!isOwnLease(input.lease)) return { type: "failed", error: "not a bubblewrap lease" };
    const result = await this.#kill(input.lease);
    return result.type === "failed" ? result : { type: "terminated" };
  }

  async reap(input: OrphanReapInput): Promise<OrphanReapResult> {
    if (!isOwnLease(input.lease)) return { type: "failed", error: "not a bubblewrap lease" };
    return this.#kill(input.lease);
  }

  /** Idempotent: a runtime already gone is `not_found`. */
  async #kill(lease: ManagedSandboxLease): Promise<OrphanReapResult> {
    return this.#locked(lease.runtimeId, async () => {
      const live = await this.#load(lease.runtimeId);
      if (live !== null) {
        const result = await this.#destroy(live.state);
        if (!result.ok) return { type: "failed", error: result.error };
        return result.killed ? { type: "reaped" } : { type: "not_found" };
      }
      // No record (state root wiped): the lease's pid and start time still identify the process exactly.
      const pid = Number(lease.metadata?.pid);
      const start = Number(lease.metadata?.start);
      const stat = await readStat(pid);
      if (stat === null || stat.comm !== "bwrap" || !(await isSameLiveProcess(pid, start))) return { type: "not_found" };
      if (!(await killExact(pid, start))) return { type: "not_found" };
      return (await waitGone(pid, start, this.#options.killTimeoutMs ?? 10_000))
        ? { type: "reaped" }
        : { type: "failed", error: `sandbox pid ${pid} survived SIGKILL` };
    });
  }

  async inspect(input: PortInput<"inspect">): Promise<SandboxInspectResult> {
    if (!isOwnLease(input.lease)) return { state: "unknown" };
    const live = await this.#load(input.lease.runtimeId);
    if (live !== null && (await isSameLiveProcess(live.state.initPid, live.state.initStart))) return { state: "running" };
    return { state: "stopped" };
  }

  /** The tool surface of a running sandbox (harness-outside-sandbox placement); fails closed when it is gone. */
  toolSandbox(lease: ManagedSandboxLease): ToolSandboxPort {
    const workdir = "/workspace";
    const absolute = (path: string) => (path.startsWith("/") ? path : posix.join(workdir, path));
    const withLive = async <T>(work: (live: Live & { ctx: ExecContext }) => Promise<T>, gone: T): Promise<T> => {
      const live = isOwnLease(lease) ? await this.#load(lease.runtimeId) : null;
      return live === null || live.ctx === null ? gone : work(live as Live & { ctx: ExecContext });
    };
    const notRunning = "the sandbox is not running";
    return {
      workdir,
      exec: (input: ExecInput) => withLive((live) => execInSandbox(live.ctx, workdir, input), { type: "error", message: notRunning }),
      stat: (input) => withLive((live) => live.fs.stat(absolute(input.path)), { type: "error", message: notRunning }),
      readFile: (input) =>
        withLive((live) => live.fs.readFile(absolute(input.path), input.maxBytes, input.signal), { type: "error", message: notRunning }),
      writeFile: (input) =>
        withLive((live) => live.fs.writeFile(absolute(input.path), input.content, input.mode, input.signal), {
          type: "error",
          message: notRunning,
        }),
      list: (input) => withLive((live) => live.fs.list({ ...input, path: absolute(input.path) }), { type: "error", message: notRunning }),
      spawnProcess: (input) => bubblewrapProcesses(this).spawn(lease, { ...input, cwd: input.cwd ?? workdir }),
    };
  }

  /** A duplex process in the sandbox (what the ama_worker and supervised lanes drive). */
  async spawn(
    lease: ManagedSandboxLease,
    input: { command: readonly string[]; cwd?: string; env?: Readonly<Record<string, string>> },
  ): Promise<{ ok: true; process: SandboxProcess } | { ok: false; message: string }> {
    const live = isOwnLease(lease) ? await this.#load(lease.runtimeId) : null;
    if (live === null || live.ctx === null) return { ok: false, message: "the sandbox is not running" };
    return spawnInSandbox(live.ctx, { command: input.command, cwd: input.cwd ?? "/workspace", env: input.env });
  }

  #ownerOf(fence: FenceIdentity): RuntimeOwner {
    const { scope, ownerId, generation } = fence;
    return { environmentId: scope.environmentId, sessionId: scope.sessionId, ownerId, generation, labels: { ...this.#options.labels } };
  }

  /** The runtimes under the state root carrying this instance's labels, with the owner recorded at acquire. */
  async listOwned(input: { signal: AbortSignal }): Promise<SandboxListResult> {
    let names: string[];
    try {
      names = readdirSync(this.stateRoot);
    } catch {
      return { type: "listed", runtimes: [] };
    }
    const wanted = Object.entries(this.#options.labels ?? {});
    const runtimes: OwnedRuntime[] = [];
    for (const name of names) {
      if (input.signal.aborted) return { type: "failed", error: "listing aborted", retryable: true };
      if (!isRuntimeId(name)) continue;
      const state = await readState(runtimeDir(this.stateRoot, name));
      const owner = state?.owner;
      if (state === null || owner === undefined || !wanted.every(([key, value]) => owner.labels[key] === value)) continue;
      const running = await isSameLiveProcess(state.initPid, state.initStart);
      runtimes.push({
        lease: leaseOf(state),
        scope: { environmentId: owner.environmentId, sessionId: owner.sessionId },
        ownerId: owner.ownerId,
        generation: owner.generation,
        state: running ? "running" : "stopped",
        createdAt: new Date(state.createdAt).toISOString(),
      });
    }
    return { type: "listed", runtimes };
  }

  /** Removes records of runtimes whose processes are gone (e.g. after a host crash); returns how many. */
  async reapLeftovers(): Promise<number> {
    let removed = 0;
    let names: string[];
    try {
      names = readdirSync(this.stateRoot);
    } catch {
      return 0;
    }
    for (const name of names) {
      if (makingRuntimeId(name) !== null) {
        // A directory still being made: its creator's pid is in its name (creator.json may not be written yet).
        const creator = await readCreator(join(this.stateRoot, name));
        const alive = creator
          ? await isSameLiveProcess(creator.pid, creator.start)
          : (await readStat(Number(name.split("-").pop()))) !== null;
        if (!alive) await rm(join(this.stateRoot, name), { recursive: true, force: true });
        continue;
      }
      if (!isRuntimeId(name) || this.#live.has(name)) continue;
      const state = await readState(runtimeDir(this.stateRoot, name));
      if (state !== null && (await isSameLiveProcess(state.initPid, state.initStart))) continue;
      if (state === null) {
        // No state yet: a start in progress while its creator lives (in this process or another sharing the root).
        const creator = await readCreator(runtimeDir(this.stateRoot, name));
        if (creator !== null && (await isSameLiveProcess(creator.pid, creator.start))) continue;
      }
      await this.#locked(name, async () => {
        if (state !== null) await this.#destroy(state);
        else await rm(runtimeDir(this.stateRoot, name), { recursive: true, force: true });
      });
      removed++;
    }
    await clearStaleHostUids(this.stateRoot);
    return removed;
  }

  #self: Promise<RuntimeCreator> | null = null;

  /** This process as a runtime directory's creator (pid and start time, so a reused pid is not taken for it). */
  #creator(): Promise<RuntimeCreator> {
    this.#self ??= readStat(process.pid).then((stat) => {
      if (stat === null) throw new Error("cannot read this process's own /proc entry");
      return { pid: process.pid, start: stat.startTime };
    });
    return this.#self;
  }

  /** Terminates every runtime this instance started (for shutdown and tests). */
  async shutdown(): Promise<void> {
    for (const live of [...this.#live.values()]) await this.#kill(leaseOf(live.state));
  }
}

function leaseOf(state: RuntimeState): ManagedSandboxLease {
  return { provider: PROVIDER, runtimeId: state.runtimeId, metadata: { pid: state.initPid, start: state.initStart } };
}

function isOwnLease(lease: ManagedSandboxLease): boolean {
  return lease.provider === PROVIDER && isRuntimeId(lease.runtimeId);
}

function atomicWrite(path: string, content: string | Buffer, mode: number): void {
  const temp = `${path}.${process.pid}.tmp`;
  writeFileSync(temp, content, { mode });
  renameSync(temp, path);
}
