/**
 * Warm pools of `openma serve`'s session sandboxes (docs/warm-pools.md, ADR
 * 0027): per environment in `OPENMA_WARM_POOL`, a `@openma/warm-pool` pool
 * over the chosen driver keeps sandboxes started ahead, each with an owner
 * record under a pool scope (so a crash leaks nothing: the reaper ends them
 * once the lease lapses) and its workspace and outputs bound to a slot
 * directory, `<dataDir>/warm/<slot>/{workspace,outputs}`.
 *
 * A session's first sandbox is taken from its environment's pool when the
 * session would get exactly what the pool holds (same driver, plan, image,
 * no environment packages, no network) and its host directories are still
 * fresh; anything else starts cold, and a pooled sandbox is never used for a
 * profile it was not made for. At claim the owner record is rebound to the
 * session (one conditional statement: a record a reaper is taking is not
 * used), the slot's directories are renamed into the session's (the
 * sandbox's binds follow the directories), and the slot keeps a symlink to
 * each for the driver's later binds. The sandbox is then the session's own:
 * terminated when the session is done with it, never returned.
 */
import { randomBytes } from "node:crypto";
import { mkdir, readdir, rename, rm, rmdir, symlink } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "@openma/api";
import {
  type FenceIdentity,
  type ManagedRuntimePlan,
  type ManagedSandboxLease,
  type ManagedSandboxPort,
  OUTPUTS_MOUNT_PATH,
  type RuntimeResourceScope,
  type SandboxRequest,
  WORKSPACE_MOUNT_PATH,
} from "@openma/contract";
import { packagesOf } from "@openma/driver-kit/env-packages";
import type { Scheduler } from "@openma/time";
import { WarmPool, type WarmPoolStats, type WarmPoolTargets, type WarmProfile } from "@openma/warm-pool";
import { makeTraversable } from "./bwrap-packages.ts";
import type { OwnerHandle, ServeOwnership } from "./sandbox-owners.ts";

/** A pooled sandbox's owner record waits this long unused before it counts as idle (the longest an idle deadline may be). */
export const POOL_IDLE_MS = 7 * 86_400_000;

/** A claimed warm sandbox, as the session resolver holds it. */
export interface WarmHeld {
  scope: RuntimeResourceScope;
  fence: FenceIdentity;
  lease: ManagedSandboxLease;
  owner: OwnerHandle;
  /** Removes the slot's leftovers once the sandbox is gone. */
  cleanup(): Promise<void>;
}

export interface ServeWarmPools {
  /** The session's first sandbox from its environment's pool, or null (start one cold). */
  claim(request: SandboxRequest, scope: RuntimeResourceScope, dirs: { workspace: string; outputs: string }): Promise<WarmHeld | null>;
  stats(): WarmPoolStats[];
  /** Terminates every sandbox still in a pool (shutdown). */
  drain(): Promise<void>;
}

export interface WarmPoolsOptions {
  sandbox: ManagedSandboxPort;
  /** Whether the driver's unprivileged host uid must traverse the data dir to bind a slot (sandbox.ts). */
  needsTraversal: boolean;
  targets: WarmPoolTargets;
  ownership: ServeOwnership;
  plan: ManagedRuntimePlan;
  /** What else shapes the driver's sandboxes (its image); part of the profile a claim must match. */
  variant: Record<string, string>;
  /** Whether sessions' sandboxes get an egress gateway; pools hold only sandboxes without one (see below). */
  gateway: boolean;
  dataDir: string;
  /** The session's idle timeout its rebound record starts with. */
  idleMs: number;
  scheduler: Scheduler;
  logger: Logger;
}

/** The profile of a session's sandbox, or of a pool's when `packages` is null. */
function profileOf(options: WarmPoolsOptions, packages: string | null, gateway: boolean): WarmProfile {
  return {
    provider: options.sandbox.capabilities.provider,
    plan: options.plan,
    variant: { ...options.variant, packages, network: gateway ? "gateway" : "none" },
  };
}

/** Whether a host directory is absent or empty: a session's first sandbox. */
async function fresh(dir: string): Promise<boolean> {
  try {
    return (await readdir(dir)).length === 0;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "ENOENT";
  }
}

/** Starts the configured pools; none when the targets are empty, or (logged) when sandboxes get a gateway. */
export async function openWarmPools(options: WarmPoolsOptions): Promise<ServeWarmPools | null> {
  const { targets, logger, ownership, dataDir } = options;
  if ([...targets.values()].every((target) => target === 0)) return null;
  if (options.gateway) {
    // The gateway is opened per session at acquire, from the session's environment networking and vault credentials,
    // so a sandbox started before its session cannot carry the right one: pools stay off rather than misroute.
    logger.warn(
      { environments: [...targets.keys()] },
      "warm pools need OPENMA_EGRESS=off (a pooled sandbox cannot carry its session's egress gateway): sandboxes start cold",
    );
    return null;
  }
  const root = join(dataDir, "warm");
  if (options.needsTraversal) await makeTraversable(dataDir);
  // Slots of an earlier server: their sandboxes are the reaper's (owner records lapse), their directories go now.
  await rm(root, { recursive: true, force: true });
  await mkdir(root, { recursive: true, mode: 0o711 });
  const slotDirs = (slotId: string) => ({ workspace: join(root, slotId, "workspace"), outputs: join(root, slotId, "outputs") });
  const poolProfile = profileOf(options, null, false);
  const pools = new Map<string, WarmPool<OwnerHandle>>();
  for (const [environmentId, target] of targets) {
    if (target === 0) continue;
    const pool = new WarmPool<OwnerHandle>({
      driver: options.sandbox,
      environmentId,
      target,
      profile: poolProfile,
      scheduler: options.scheduler,
      claimOwner: (scope) => ownership.claim(scope, options.sandbox.capabilities.provider, POOL_IDLE_MS),
      async slot(slotId) {
        const dirs = slotDirs(slotId);
        // Search-only for the slot, as for the data dir's roots: the sandbox's unprivileged host uid must reach its binds.
        await mkdir(join(root, slotId), { mode: 0o711 });
        await mkdir(dirs.workspace, { recursive: true, mode: 0o700 });
        await mkdir(dirs.outputs, { recursive: true, mode: 0o700 });
        return {
          workspace: {
            bindingId: `ws-${slotId}`,
            strategy: "ephemeral",
            mountPath: WORKSPACE_MOUNT_PATH,
            metadata: { hostPath: dirs.workspace },
          },
          outputs: {
            bindingId: `out-${slotId}`,
            strategy: "final_collect",
            mountPath: OUTPUTS_MOUNT_PATH,
            metadata: { hostPath: dirs.outputs },
          },
        };
      },
      discardSlot: (slotId) => rm(join(root, slotId), { recursive: true, force: true }),
      newSlotId: () => `wp_${randomBytes(8).toString("hex")}`,
      onError: (err, where) => logger.warn({ ...where, err: String(err) }, "warm pool"),
    });
    pool.start();
    pools.set(environmentId, pool);
  }
  logger.info({ pools: Object.fromEntries(targets) }, "warm pools started");

  return {
    async claim(request, scope, dirs) {
      const pool = pools.get(request.environmentId);
      if (pool === undefined) return null;
      const wanted = packagesOf(request.environment);
      const packages = !wanted.ok ? "invalid" : wanted.spec === null ? null : JSON.stringify(wanted.spec);
      // A session with files already (a later sandbox of the session) keeps them: only a fresh one takes a warm sandbox.
      if (!(await fresh(dirs.workspace)) || !(await fresh(dirs.outputs))) return null;
      const claim = await pool.claim({ profile: profileOf(options, packages, false), signal: request.signal });
      if (claim.type === "miss") return null;
      const { sandbox } = claim;
      const fence: FenceIdentity = { ...sandbox.fence, scope };
      const drop = async () => {
        // Not handed out: the session starts cold, and this sandbox ends here (never back to the pool).
        await options.sandbox
          .terminate({ scope, fence, lease: sandbox.lease, reason: "failed", signal: AbortSignal.timeout(30_000) })
          .then((r) => (r.type === "terminated" ? sandbox.owner.release() : sandbox.owner.abandon()))
          .catch(() => sandbox.owner.abandon());
        await rm(join(root, sandbox.slotId), { recursive: true, force: true });
      };
      if (!(await sandbox.owner.rebind(scope, options.idleMs))) {
        await drop();
        return null;
      }
      try {
        const slot = slotDirs(sandbox.slotId);
        for (const [from, to] of [
          [slot.workspace, dirs.workspace],
          [slot.outputs, dirs.outputs],
        ] as const) {
          await rmdir(to).catch(() => {});
          await rename(from, to);
          await symlink(to, from);
        }
      } catch (err) {
        logger.warn({ sessionId: scope.sessionId, err: String(err) }, "binding a warm sandbox to its session failed: starting cold");
        await drop();
        return null;
      }
      return {
        scope,
        fence,
        lease: sandbox.lease,
        owner: sandbox.owner,
        cleanup: () => rm(join(root, sandbox.slotId), { recursive: true, force: true }),
      };
    },
    stats: () => [...pools.values()].map((pool) => pool.stats()),
    async drain() {
      await Promise.all([...pools.values()].map((pool) => pool.drain()));
    },
  };
}
