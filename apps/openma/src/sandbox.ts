/**
 * The embedded default sandbox of `openma serve` (harness outside the
 * sandbox): the default harness's tools run through a ToolSandboxPort of a
 * real local sandbox, one per session, acquired lazily on its first sandbox
 * tool call and cached.
 *
 * `OPENMA_SANDBOX=auto` picks bubblewrap when it works here, else Docker when
 * the engine answers and the base image is loaded, else fails closed: the
 * server still starts, logs one warning naming what is missing, and every
 * sandbox tool returns that reason as its error. Agent tools never run
 * unisolated on the host.
 *
 * Each session's workspace is a host directory, `<dataDir>/workspaces/<id>`,
 * bound at `/workspace` (outputs: `<dataDir>/outputs/<id>` at
 * `/mnt/session/outputs`), so its files outlive the sandbox: a sandbox idle
 * for `idleMs` is terminated and the next tool call gets a fresh one over the
 * same files. `release(id)` terminates a session's sandbox as soon as the
 * session is archived or deleted, and `close()` every sandbox this server
 * started.
 */

import { randomBytes } from "node:crypto";
import { mkdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { Logger } from "@openma/api";
import {
  type CredentialEgressPort,
  type FenceIdentity,
  type ManagedRuntimePlan,
  type ManagedSandboxLease,
  type ManagedSandboxPort,
  OUTPUTS_MOUNT_PATH,
  type RuntimeResourceScope,
  type SandboxRequest,
  type SandboxResolution,
  type SandboxResolver,
  type SandboxStopReason,
  type ToolSandboxPort,
  WORKSPACE_MOUNT_PATH,
} from "@openma/contract";
import { installSessionError, packagesOf } from "@openma/driver-kit/env-packages";
import { plannedLeaseOf } from "@openma/driver-kit/remote";
import { NO_SANDBOX_DRIVER } from "@openma/harness";
import { realScheduler, type Scheduler } from "@openma/time";
import type { WarmPoolStats, WarmPoolTargets } from "@openma/warm-pool";
import {
  bubblewrapPackagesRefusal,
  ensurePackagePrefix,
  makeTraversable,
  type PackageRegistries,
  prefixEnv,
  SANDBOX_PACKAGES_DIR,
  withInstallSandbox,
} from "./bwrap-packages.ts";
import { checkBubblewrap } from "./doctor.ts";
import type { Provisioner } from "./provision.ts";
import type { OwnerHandle, ServeOwnership } from "./sandbox-owners.ts";
import { openWarmPools, type ServeWarmPools } from "./warm-pools.ts";

export const SANDBOX_CHOICES = ["auto", "bubblewrap", "docker", "none"] as const;
export type SandboxChoice = (typeof SANDBOX_CHOICES)[number];

const PROVISION = "run `npm run provision` (as root)";
const TOOLS = "sandbox tools (bash, read, write, edit, glob, grep) cannot run";

export type Probe<T = object> = () => Promise<({ ok: true } & T) | { ok: false; reason: string }>;

/** Whether each driver can run here; injected by tests. */
export interface AvailabilityProbes {
  bubblewrap: Probe;
  /** `image` is the loaded base image sandboxes start from. */
  docker: Probe<{ image: string }>;
}

export type SandboxSelection =
  | { type: "bubblewrap" }
  | { type: "docker"; image: string }
  /** `warn`: the operator asked for a sandbox (or auto found none), so the refusal deserves a warning. */
  | { type: "none"; reason: string; warn: boolean };

/** The driver `choice` resolves to on this host, or the reason sandbox tools fail closed. */
export async function chooseSandbox(choice: SandboxChoice, probes: AvailabilityProbes): Promise<SandboxSelection> {
  if (choice === "none") return { type: "none", reason: NO_SANDBOX_DRIVER, warn: false };
  const missing: string[] = [];
  if (choice !== "docker") {
    const bwrap = await safely(probes.bubblewrap);
    if (bwrap.ok) return { type: "bubblewrap" };
    missing.push(`bubblewrap: ${bwrap.reason}`);
  }
  if (choice !== "bubblewrap") {
    const docker = await safely(probes.docker);
    if (docker.ok) return { type: "docker", image: docker.image };
    missing.push(`docker: ${docker.reason}`);
  }
  const which = choice === "auto" ? "no sandbox driver is usable on this server" : `the ${choice} sandbox driver is not usable`;
  return { type: "none", reason: `${which} (${missing.join("; ")}), so ${TOOLS}: ${PROVISION}`, warn: true };
}

/** A probe that throws reports "not usable" instead: the server must start either way. */
async function safely<T extends object>(probe: Probe<T>): ReturnType<Probe<T>> {
  try {
    return await probe();
  } catch (err) {
    return { ok: false, reason: err instanceof Error ? err.message : String(err) };
  }
}

/** The real probes: the doctor's bwrap check (plus root, which the driver needs), and the Docker engine and base image. */
export const hostProbes: AvailabilityProbes = {
  async bubblewrap() {
    if (process.getuid?.() !== 0) return { ok: false, reason: "the bubblewrap driver must run as root" };
    const check = await checkBubblewrap(5_000);
    return check.status === "ok" ? { ok: true } : { ok: false, reason: check.detail };
  },
  async docker() {
    // Loaded only here, so a server without Docker never loads dockerode.
    const { connectDocker, imagePresent, probeEngine, readImageManifest } = await import("@openma/driver-node-docker");
    const docker = connectDocker();
    const engine = await probeEngine(docker);
    if (!engine.ok) return { ok: false, reason: engine.message };
    const manifest = await readImageManifest();
    if (!manifest.ok) return { ok: false, reason: manifest.message };
    const chosen = sandboxImage(manifest.manifest, process.env.OPENMA_SANDBOX_IMAGE);
    if (!chosen.ok) return chosen;
    const { image, which } = chosen;
    const present = await imagePresent(docker, image).catch(() => false);
    return present ? { ok: true, image } : { ok: false, reason: `the ${which} image ${image} is not loaded in dockerd` };
  },
};

/**
 * `OPENMA_SANDBOX_IMAGE`: `base` (default: node, npm, bash, core tools) or `dev` (the toolchain image that
 * `OPENMA_DEV_IMAGE=1 npm run provision` builds: git, curl, python3 with pip, build tools; docs/images.md).
 */
export function sandboxImage(
  manifest: { base: { image: string }; dev?: { image: string } | undefined },
  setting: string | undefined,
): { ok: true; image: string; which: "base" | "dev" } | { ok: false; reason: string } {
  const which = setting === undefined || setting === "" ? "base" : setting;
  if (which === "base") return { ok: true, image: manifest.base.image, which };
  if (which !== "dev") return { ok: false, reason: `OPENMA_SANDBOX_IMAGE must be base or dev, not ${JSON.stringify(setting)}` };
  if (manifest.dev === undefined)
    return { ok: false, reason: "OPENMA_SANDBOX_IMAGE=dev but no dev image was built: run `OPENMA_DEV_IMAGE=1 npm run provision`" };
  return { ok: true, image: manifest.dev.image, which };
}

/** A driver the resolver acquires from, with the tool surface of its leases. */
export interface SandboxBackend {
  /** `bubblewrap`, `docker`, or a cloud driver's name (remote-sandboxes.ts). */
  name: string;
  sandbox: ManagedSandboxPort;
  toolSandbox(lease: ManagedSandboxLease): ToolSandboxPort;
  /** Whether the driver's unprivileged host uid must traverse the data dir to bind the workspace. */
  needsTraversal: boolean;
  /** What else shapes this driver's sandboxes (its image): part of the profile a warm sandbox must match. */
  variant?: Record<string, string>;
  /** Whether its sandboxes get an egress gateway (opened per session at acquire, so never pooled). */
  gateway?: boolean;
  /**
   * The driver for this session's environment, its packages installed (or taken from their cache), or why
   * there is none; absent (or no `sandbox` in the answer): `sandbox` as is.
   */
  prepare?(request: SandboxRequest, context: PrepareContext): Promise<{ sandbox?: ManagedSandboxPort } | Refusal>;
}

/** What `prepare` runs with: `ownerId` is the session's owner record, which any sandbox it starts must carry. */
export interface PrepareContext {
  logger: Logger;
  dataDir: string;
  ownerId: string;
}

/** `prepare`'s answer when the backend's own driver serves the session. */
const AS_IS: { sandbox?: ManagedSandboxPort } = {};

/** Why a session gets no sandbox; `sessionError` (a `session.error` body) when the session should hear of it as one. */
type Refusal = { reason: string; sessionError?: Record<string, unknown> };

/** `labels`: ownership labels every sandbox carries and the driver lists by (the serve lane's deployment). */
/**
 * `egress`: the gateway every sandbox gets as its only way out (egress.ts); absent or null: no network at all.
 * `registries`: where bubblewrap's npm and pip installs fetch from (default: the package managers' own).
 */
export async function openBackend(
  selection: Exclude<SandboxSelection, { type: "none" }>,
  labels: Readonly<Record<string, string>> = {},
  egress: CredentialEgressPort | null = null,
  registries: PackageRegistries = {},
): Promise<SandboxBackend> {
  const credentialEgress = egress ?? undefined;
  if (selection.type === "bubblewrap") {
    const { BubblewrapSandbox } = await import("@openma/driver-bubblewrap");
    const sandbox = new BubblewrapSandbox({ ...serveNodeRuntime(), labels, credentialEgress });
    // Records of sandboxes whose processes died with an earlier server (a crash, kill -9):
    // only dead runtimes are removed, so another live server on this host is untouched.
    await sandbox.reapLeftovers().catch(() => 0);
    return {
      name: "bubblewrap",
      sandbox,
      toolSandbox: (lease) => sandbox.toolSandbox(lease),
      needsTraversal: true,
      gateway: credentialEgress !== undefined,
      async prepare(request, { logger, dataDir, ownerId }) {
        const wanted = packagesOf(request.environment);
        if (!wanted.ok) return { reason: wanted.message, sessionError: installSessionError({ manager: null, message: wanted.message }) };
        if (wanted.spec === null) return AS_IS;
        const refused = bubblewrapPackagesRefusal(wanted.spec, egress !== null);
        if (refused !== null) return { reason: refused.message, sessionError: installSessionError(refused) };
        const where = { sessionId: request.sessionId, environmentId: request.environmentId };
        const prefix = await ensurePackagePrefix({
          dataDir,
          environmentId: request.environmentId,
          spec: wanted.spec,
          registries,
          installSandbox: (hostDir, work) => withInstallSandbox(sandbox, request, ownerId, planFor("bubblewrap"), hostDir, work),
          onProgress: (progress) => logger.info({ ...where, ...progress }, "environment packages"),
        });
        if (!prefix.ok) {
          logger.warn({ ...where, manager: prefix.manager, error: prefix.message }, "environment packages failed to install");
          return {
            reason: `the environment's packages could not be installed: ${prefix.message}`,
            sessionError: installSessionError(prefix),
          };
        }
        const binds = [{ source: prefix.dir, target: SANDBOX_PACKAGES_DIR }];
        return { sandbox: sandbox.withExtras({ binds, env: prefixEnv(SANDBOX_PATH) }) };
      },
    };
  }
  const { NodeDockerSandbox, ensurePackageLayer } = await import("@openma/driver-node-docker");
  const sandbox = new NodeDockerSandbox({ image: selection.image, namePrefix: "openma-serve", labels, credentialEgress });
  return {
    name: "docker",
    sandbox,
    toolSandbox: (lease) => sandbox.toolSandbox(lease),
    needsTraversal: false,
    variant: { image: selection.image },
    gateway: credentialEgress !== undefined,
    async prepare(request, { logger }) {
      const wanted = packagesOf(request.environment);
      if (!wanted.ok) return { reason: wanted.message, sessionError: installSessionError({ manager: null, message: wanted.message }) };
      if (wanted.spec === null) return AS_IS;
      const where = { sessionId: request.sessionId, environmentId: request.environmentId };
      const layer = await ensurePackageLayer({
        docker: sandbox.docker,
        baseImage: selection.image,
        environmentId: request.environmentId,
        spec: wanted.spec,
        signal: request.signal,
        onProgress: (progress) => logger.info({ ...where, ...progress }, "environment packages"),
      });
      if (!layer.ok) {
        logger.warn({ ...where, manager: layer.manager, error: layer.message }, "environment packages failed to install");
        return { reason: `the environment's packages could not be installed: ${layer.message}`, sessionError: installSessionError(layer) };
      }
      return { sandbox: sandbox.forImage(layer.image) };
    },
  };
}

/** Where the serve lane's bubblewrap sandboxes find the server's own Node. */
export const SANDBOX_NODE_DIR = "/opt/openma/node";
const SANDBOX_PATH = `${SANDBOX_NODE_DIR}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`;

/**
 * The serve lane's bubblewrap sandboxes see the host's `/usr`, whose `node`
 * is the machine's own (Node 20 here, or none): the Node installation this
 * server runs on (Node 24 from node_modules, `bin/node` beside its headers
 * and npm) is bound read-only at /opt/openma/node and comes first on PATH, so
 * `node` in a sandbox is the server's Node, as in the image-based lanes.
 */
export function serveNodeRuntime(execPath: string = process.execPath): {
  binds: { source: string; target: string }[];
  env: Record<string, string>;
} {
  return { binds: [{ source: dirname(dirname(execPath)), target: SANDBOX_NODE_DIR }], env: { PATH: SANDBOX_PATH } };
}

export interface ServeSandboxes extends SandboxResolver {
  /** The driver in use, or null when sandbox tools fail closed. */
  readonly driver: string | null;
  /** Session ids with a live (or starting) sandbox. */
  active(): string[];
  /** The warm pools (docs/warm-pools.md): one entry per environment with a pool. */
  warmPools(): WarmPoolStats[];
  /**
   * The session was archived or deleted: terminates its sandbox (resolves once
   * it is gone) and refuses to start another one for it. Its files stay in the
   * host workspace.
   */
  release(sessionId: string): Promise<void>;
  /** Terminates every sandbox this resolver started. */
  close(): Promise<void>;
}

export interface ServeSandboxOptions {
  choice: SandboxChoice;
  dataDir: string;
  logger: Logger;
  probes?: AvailabilityProbes;
  scheduler?: Scheduler;
  /** A session's sandbox is terminated after this long without a tool call (default 30 minutes). */
  idleMs?: number;
  /** Installs bubblewrap when no driver is usable (first start on a fresh machine); absent: never. */
  provisioner?: Provisioner | undefined;
  /** Owner records, leases and the reaper (sandbox-owners.ts); absent: sandboxes live only in this process's memory. */
  ownership?: ServeOwnership | undefined;
  /** Wraps the chosen backend (metrics.ts times its calls); absent: used as is. */
  instrument?: ((backend: SandboxBackend) => SandboxBackend) | undefined;
  /** The egress gateway composed into every sandbox (egress.ts); absent or null: sandboxes have no network. */
  egress?: CredentialEgressPort | null | undefined;
  /** Registries bubblewrap's package installs use (bwrap-packages.ts). */
  registries?: PackageRegistries | undefined;
  /** Warm pool target per environment (OPENMA_WARM_POOL, warm-pools.ts); needs `ownership`. Absent or empty: none. */
  warmPools?: WarmPoolTargets | undefined;
}

/**
 * Chooses the driver (installing bubblewrap first when none is usable and a
 * provisioner is given), logs once when sandbox tools will fail closed, and
 * returns the per-session resolver.
 */
export async function openServeSandboxes(options: ServeSandboxOptions): Promise<ServeSandboxes> {
  const probes = options.probes ?? hostProbes;
  let selection = await chooseSandbox(options.choice, probes);
  if (selection.type === "none" && selection.warn && options.provisioner !== undefined && options.choice !== "docker") {
    options.logger.info(
      { sandbox: options.choice },
      "no sandbox driver is usable: installing bubblewrap for the embedded default (OPENMA_AUTO_PROVISION=0 turns this off)",
    );
    const outcome = await options.provisioner();
    if (outcome.type === "provisioned") selection = await chooseSandbox(options.choice, probes);
    else selection = { ...selection, reason: `${selection.reason} (not installed automatically: ${outcome.reason})` };
  }
  if (selection.type === "none") {
    if (selection.warn) options.logger.warn({ sandbox: options.choice }, selection.reason);
    return failClosed(selection.reason);
  }
  let egress = options.egress ?? null;
  if (egress !== null && selection.type === "docker" && process.getuid?.() !== 0) {
    // The gateway's socket is bound inside the container's namespace (nsenter), which needs root.
    options.logger.warn({ sandbox: "docker" }, "the egress gateway needs a root server on the Docker host: sandboxes have no network");
    egress = null;
  }
  const backend = await openBackend(selection, options.ownership?.labels, egress, options.registries);
  options.logger.info(
    { sandbox: backend.name, egress: egress === null ? "none" : "gateway" },
    "sandbox tools run in per-session sandboxes",
  );
  return sessionSandboxes(backend, options);
}

export function failClosed(reason: string): ServeSandboxes {
  return {
    driver: null,
    resolve: async () => ({ type: "unavailable", reason }),
    active: () => [],
    warmPools: () => [],
    release: async () => {},
    close: async () => {},
  };
}

const SAFE_ID = /^[A-Za-z0-9_-]{1,128}$/;

/**
 * How many released sessions the resolver remembers. The harness stops at an
 * archived or deleted session before its next step, so the refusal only has
 * to cover a tool call already in flight when the session closed; a bounded
 * memory does that without growing for the life of the server.
 */
export const RELEASED_MEMORY = 10_000;

export const releasedReason = (sessionId: string) =>
  `session ${sessionId} was archived or deleted: its sandbox was terminated and no new one is started for it`;

interface Held {
  scope: RuntimeResourceScope;
  fence: FenceIdentity;
  lease: ManagedSandboxLease;
  port: ToolSandboxPort;
  /** The owner record, when the server keeps them. */
  owner: OwnerHandle | null;
  /** After the sandbox is gone (a warm sandbox's slot leftovers). */
  cleanup?: () => Promise<void>;
}

interface Entry {
  acquiring: Promise<Held | Refusal>;
  cancelIdle: () => void;
}

/**
 * The resolver over one backend: one cached sandbox per session, terminated
 * when idle or on close. With `ownership`, every sandbox has an owner record
 * whose lease this server renews, and a reaper over the backend ends what
 * dead or idle owners left (sandbox-owners.ts).
 */
export function sessionSandboxes(
  chosen: SandboxBackend,
  options: Pick<ServeSandboxOptions, "dataDir" | "logger" | "scheduler" | "idleMs" | "ownership" | "instrument" | "warmPools">,
): ServeSandboxes {
  const backend = options.instrument?.(chosen) ?? chosen;
  const scheduler = options.scheduler ?? realScheduler;
  const idleMs = options.idleMs ?? 30 * 60_000;
  // Unique per server start, so a restarted server never adopts (or collides with) a previous process's sandbox.
  const boot = randomBytes(6).toString("hex");
  const entries = new Map<string, Entry>();
  /** Terminations in flight per session, so `release` and `close` can wait for ones an idle timer started. */
  const stopping = new Map<string, Promise<void>>();
  const released = new Set<string>();
  let acquisitions = 0;
  let closed = false;
  const ownership = options.ownership;
  const reaper = ownership?.startReaper(backend.sandbox) ?? null;
  const pools = startPools(backend, { ...options, idleMs, scheduler });
  let poolStats: () => WarmPoolStats[] = () => [];
  void pools.then((opened) => {
    if (opened !== null) poolStats = () => opened.stats();
  });

  /** Why no sandbox may be handed out for this session now, or null. */
  const refusal = (sessionId: string): string | null => {
    if (closed) return "the server is shutting down";
    if (released.has(sessionId)) return releasedReason(sessionId);
    return null;
  };

  const remember = (sessionId: string) => {
    released.delete(sessionId);
    released.add(sessionId);
    // A Set iterates in insertion order: the first one is the oldest.
    for (const oldest of released) {
      if (released.size <= RELEASED_MEMORY) break;
      released.delete(oldest);
    }
  };

  const stop = async (sessionId: string, entry: Entry, reason: SandboxStopReason) => {
    const held = await entry.acquiring;
    if ("reason" in held) return;
    const signal = AbortSignal.timeout(30_000);
    const result = await backend.sandbox
      .terminate({ scope: held.scope, fence: held.fence, lease: held.lease, reason, signal })
      .catch((err: unknown) => ({ type: "failed" as const, error: String(err) }));
    if (result.type === "failed") options.logger.warn({ sessionId, error: result.error }, "terminating a session sandbox failed");
    await held.cleanup?.().catch(() => {});
    // Gone: the record goes too. Still there: the lease lapses now and a reaper kills it (or parks it as an orphan).
    await (result.type === "failed" ? held.owner?.abandon() : held.owner?.release())?.catch((err: unknown) =>
      options.logger.warn({ sessionId, error: String(err) }, "ending a session sandbox's owner record failed"),
    );
  };

  const terminate = (sessionId: string, entry: Entry, reason: SandboxStopReason): Promise<void> => {
    // Forgotten synchronously: from here on a resolve for this session starts afresh (or is refused).
    if (entries.get(sessionId) === entry) entries.delete(sessionId);
    entry.cancelIdle();
    const done = stop(sessionId, entry, reason);
    const previous = stopping.get(sessionId);
    const all = previous ? Promise.all([previous, done]).then(() => {}) : done;
    stopping.set(sessionId, all);
    void all.finally(() => {
      if (stopping.get(sessionId) === all) stopping.delete(sessionId);
    });
    return done;
  };

  const touch = (sessionId: string, entry: Entry) => {
    entry.cancelIdle();
    const idle = new AbortController();
    entry.cancelIdle = () => idle.abort();
    scheduler.sleep(idleMs, idle.signal).then(
      () => void terminate(sessionId, entry, "completed"),
      () => {}, // cancelled: the sandbox was used again or terminated
    );
  };

  const acquire = async (request: SandboxRequest): Promise<Held | Refusal> => {
    const scope = { environmentId: request.environmentId, sessionId: request.sessionId };
    const warm = await claimWarm(request, scope);
    if (warm !== null) return warm;
    // The record comes first: no sandbox of this lane ever exists without an owner record naming it.
    const owner = (await ownership?.claim(scope, backend.sandbox.capabilities.provider, idleMs)) ?? null;
    const attempt = { planned: false };
    // A refused acquire leaves no runtime, except where the record named one before it existed: a provider
    // whose asking may already start one (the Cloudflare bridge assigns a container to an id on its first
    // request, and an acquire aborted after that look-up made it). Such a record's lease lapses now, so the
    // reaper reaps by it before deleting the record, as for a sandbox that could not be killed.
    const end = () => (attempt.planned ? owner?.abandon() : owner?.release());
    try {
      const held = await start(request, scope, owner, attempt);
      if ("reason" in held) await end();
      return held;
    } catch (err) {
      await end()?.catch(() => {});
      throw err;
    }
  };

  const start = async (
    request: SandboxRequest,
    scope: RuntimeResourceScope,
    owner: OwnerHandle | null,
    attempt: { planned: boolean },
  ): Promise<Held | Refusal> => {
    const fence: FenceIdentity = {
      scope,
      ownerId: owner?.id ?? `serve-${boot}-${++acquisitions}`,
      generation: 1,
      expiresAt: Date.now() + 3650 * 86_400_000,
    };
    const context = { logger: options.logger, dataDir: options.dataDir, ownerId: fence.ownerId };
    const prepared = backend.prepare ? await backend.prepare(request, context) : {};
    if ("reason" in prepared) return prepared;
    const dirs = await sessionDirs(options.dataDir, request.sessionId, backend.needsTraversal);
    const sandbox = prepared.sandbox ?? backend.sandbox;
    // A provider the reaper cannot list (the Cloudflare bridge): the record names the runtime before it exists (ADR 0028).
    const planned = plannedLeaseOf(sandbox, { scope, fence, idempotencyKey: fence.ownerId });
    if (owner !== null && planned !== null) {
      if (!(await owner.attach(planned)))
        return { reason: `the session's ${backend.name} sandbox lost its owner record while starting; the next tool call starts another` };
      attempt.planned = true;
    }
    const result = await sandbox.acquire({
      scope,
      fence,
      plan: planFor(backend.name),
      workspace: {
        bindingId: `ws-${request.sessionId}`,
        strategy: "ephemeral",
        mountPath: WORKSPACE_MOUNT_PATH,
        metadata: { hostPath: dirs.workspace },
      },
      outputs: {
        bindingId: `out-${request.sessionId}`,
        strategy: "final_collect",
        mountPath: OUTPUTS_MOUNT_PATH,
        metadata: { hostPath: dirs.outputs },
      },
      idempotencyKey: fence.ownerId,
      signal: request.signal,
    });
    if (result.type !== "acquired") return { reason: `the session's ${backend.name} sandbox could not be started: ${result.reason}` };
    if (owner !== null && !(await owner.attach(result.lease))) {
      // The record was taken while the sandbox started (this server lost its lease): that sandbox is a reaper's now.
      await backend.sandbox
        .terminate({ scope, fence, lease: result.lease, reason: "failed", signal: AbortSignal.timeout(30_000) })
        .catch(() => {});
      return { reason: `the session's ${backend.name} sandbox lost its owner record while starting; the next tool call starts another` };
    }
    return { scope, fence, lease: result.lease, port: backend.toolSandbox(result.lease), owner };
  };

  /** A sandbox from the environment's warm pool when it fits this session exactly (warm-pools.ts), else null. */
  const claimWarm = async (request: SandboxRequest, scope: RuntimeResourceScope): Promise<Held | null> => {
    const opened = await pools;
    if (opened === null) return null;
    const dirs = await sessionDirs(options.dataDir, request.sessionId, backend.needsTraversal);
    const warm = await opened.claim(request, scope, dirs);
    if (warm === null) return null;
    return { ...warm, port: backend.toolSandbox(warm.lease) };
  };

  /** The cached sandbox when it still runs; a dead one is replaced (its files stay in the host workspace). */
  const current = async (request: SandboxRequest, entry: Entry): Promise<Held | { reason: string } | null> => {
    const held = await entry.acquiring;
    if ("reason" in held) return held;
    const beat = await backend.sandbox
      .heartbeat({ scope: held.scope, fence: held.fence, lease: held.lease, signal: request.signal })
      .catch(() => ({ type: "lost" as const }));
    if (beat.type !== "alive") return null;
    // Its owner lease lost or its stored idle deadline passed: a reaper may be killing it, so it is not used again.
    if (held.owner !== null && !(await held.owner.touch(idleMs))) return null;
    return held;
  };

  return {
    driver: backend.name,
    active: () => [...entries.keys()],
    warmPools: () => poolStats(),
    async resolve(request): Promise<SandboxResolution> {
      const { sessionId } = request;
      const early = refusal(sessionId);
      if (early !== null) return { type: "unavailable", reason: early };
      if (!SAFE_ID.test(sessionId)) return { type: "unavailable", reason: "the session id cannot name a workspace directory" };
      const cached = entries.get(sessionId);
      if (cached !== undefined && (await current(request, cached)) === null) await terminate(sessionId, cached, "failed");
      let entry = entries.get(sessionId);
      if (entry === undefined) {
        // Checked again with no await before the entry is made: a release or close during the heartbeat above wins.
        const refused = refusal(sessionId);
        if (refused !== null) return { type: "unavailable", reason: refused };
        entry = { acquiring: acquire(request).catch((err: unknown) => ({ reason: String(err) })), cancelIdle: () => {} };
        entries.set(sessionId, entry);
      }
      const held = await entry.acquiring;
      if ("reason" in held) {
        // Not cached: the next tool call tries again.
        if (entries.get(sessionId) === entry) entries.delete(sessionId);
        return { type: "unavailable", reason: held.reason, sessionError: held.sessionError };
      }
      // Released or shut down while it was starting: that sandbox is being terminated, so it is not handed out.
      const late = refusal(sessionId);
      if (late !== null) return { type: "unavailable", reason: late };
      touch(sessionId, entry);
      return { type: "ready", port: held.port };
    },
    async release(sessionId) {
      remember(sessionId);
      const entry = entries.get(sessionId);
      if (entry !== undefined) void terminate(sessionId, entry, "cancelled");
      await stopping.get(sessionId);
    },
    async close() {
      closed = true;
      // The pools first: nothing is handed out any more, and what waits in them is terminated.
      await (await pools)?.drain();
      await reaper?.stop();
      for (const [sessionId, entry] of [...entries]) void terminate(sessionId, entry, "cancelled");
      await Promise.all([...stopping.values()]);
    },
  };
}

/** The configured warm pools over this backend; none without owner records (a pooled sandbox must have one). */
async function startPools(
  backend: SandboxBackend,
  options: Pick<ServeSandboxOptions, "dataDir" | "logger" | "ownership" | "warmPools"> & { idleMs: number; scheduler: Scheduler },
): Promise<ServeWarmPools | null> {
  const { warmPools, ownership, logger } = options;
  if (warmPools === undefined || warmPools.size === 0) return null;
  if (ownership === undefined) {
    logger.warn({}, "warm pools need owner records (a database): sandboxes start cold");
    return null;
  }
  return openWarmPools({
    sandbox: backend.sandbox,
    needsTraversal: backend.needsTraversal,
    targets: warmPools,
    ownership,
    plan: planFor(backend.name),
    variant: backend.variant ?? {},
    gateway: backend.gateway ?? false,
    dataDir: options.dataDir,
    idleMs: options.idleMs,
    scheduler: options.scheduler,
    logger,
  }).catch((err: unknown) => {
    logger.warn({ err: String(err) }, "warm pools could not start: sandboxes start cold");
    return null;
  });
}

/** The per-session host directories, made on first use. */
export async function sessionDirs(
  dataDir: string,
  sessionId: string,
  traversable: boolean,
): Promise<{ workspace: string; outputs: string }> {
  const workspace = join(dataDir, "workspaces", sessionId);
  const outputs = join(dataDir, "outputs", sessionId);
  if (traversable) {
    // bwrap binds the directories as the sandbox's unprivileged host uid, which must be able to reach them:
    // search (not list) permission on the data dir and the two roots; the session dirs are chowned by the driver.
    await makeTraversable(dataDir);
  }
  for (const root of [join(dataDir, "workspaces"), join(dataDir, "outputs")]) await mkdir(root, { recursive: true, mode: 0o711 });
  await mkdir(workspace, { recursive: true, mode: 0o700 });
  await mkdir(outputs, { recursive: true, mode: 0o700 });
  return { workspace, outputs };
}

/** Drivers take a plan; in this lane the harness runs outside the sandbox, so no process is started in it. */
export function planFor(provider: string): ManagedRuntimePlan {
  return {
    provider,
    driver: { type: "ama_worker", process: { command: "true" } },
    workspace: { requirement: "ephemeral", strategy: "ephemeral", durability: "none" },
    outputs: { requirement: "best_effort", strategy: "final_collect", durability: "best_effort" },
    runtimeCheckpoint: null,
  };
}
