/**
 * The runtime host's warm pool (ADR 0032, docs/warm-pools.md): sandboxes of
 * its environment started ahead (`@openma/warm-pool`), handed to a run as
 * its compute through the host's `WarmComputePort`.
 *
 * The host asks only while it holds the generation's fence, after it has
 * restored `/workspace` and prepared the outputs (lease first, then bind).
 * A claim then:
 *
 * 1. takes one sandbox out of the pool (never to return: it is killed when
 *    the run ends, like any run's compute);
 * 2. moves its owner record from the pool scope to the session's (one
 *    conditional statement, refused once the record is not live: a reaper
 *    may be taking it, and the sandbox is dropped);
 * 3. for a local driver, binds the run's directories: the restored
 *    workspace's entries move into the slot directory the sandbox has bound
 *    at `/workspace` (and take that directory's owner, the sandbox's uid),
 *    and the slot directory is renamed to the binding's path, so the
 *    workspace port checkpoints what the sandbox sees; the slot keeps a
 *    symlink for drivers that bind again per process. The outputs likewise.
 *    A cloud driver's workspace is pushed in at attach, so nothing moves.
 *
 * Every pooled sandbox has an owner record from before it starts until it
 * is gone, renewed by this process (pool scope, then the session's). A crash
 * at any point leaves a record that lapses; the reaper here (and any other
 * reaper of the deployment) judges the sandboxes started under a pool scope
 * by those records, so nothing leaks; the records of runs' cold sandboxes
 * are not involved (those are fenced, swept at start and orphan-recorded).
 */
import { randomBytes } from "node:crypto";
import { lchown, lstat, mkdir, readdir, rename, rm, rmdir, symlink } from "node:fs/promises";
import { join } from "node:path";
import {
  type ManagedRuntimePlan,
  type ManagedSandboxPort,
  type OrphanReaper,
  OUTPUTS_MOUNT_PATH,
  type RuntimeOrphanPort,
  type SandboxInventoryPort,
  type SandboxOwnershipPort,
  WORKSPACE_MOUNT_PATH,
} from "@openma/contract";
import { chownTree } from "@openma/driver-kit/chown-tree";
import { claimSandboxOwner, type SandboxOwnerHandle, SandboxReaper, type WarmComputeClaim, type WarmComputePort } from "@openma/host";
import type { Scheduler } from "@openma/time";
import { isPoolScope, type PoolSlot, WarmPool, type WarmPoolStats, type WarmProfile } from "@openma/warm-pool";

/**
 * A pooled sandbox's record is never judged idle: the runtime-host lane ends its compute with the run, and a run
 * does not touch its record. Seven days is the longest idle deadline the owner table takes.
 */
const NEVER_IDLE_MS = 7 * 86_400_000;

export interface RuntimeHostWarmPoolOptions {
  sandbox: ManagedSandboxPort & SandboxInventoryPort & OrphanReaper;
  environmentId: string;
  target: number;
  /** Where slot directories live (`<root>/<slot>/{workspace,outputs}`); null for a cloud driver (nothing bound from the host). */
  root: string | null;
  ownership: SandboxOwnershipPort;
  orphans: RuntimeOrphanPort;
  /** The database's deployment id: any reaper of the deployment may judge the records. */
  deployment: string;
  /** How long a dead process's pooled sandboxes outlive it. */
  leaseTtlMs: number;
  reapIntervalMs: number;
  scheduler: Scheduler;
  /** Wait after a failed start (default 5 s). */
  retryMs?: number;
  onError?(err: unknown, where: Record<string, string>): void;
}

export interface RuntimeHostWarmPool {
  /** The host's port; misses until `start`. */
  readonly port: WarmComputePort;
  /** Fills the pool with sandboxes for runs of this plan (the host's plan for its profile), and starts the reaper (target 0: the reaper only). */
  start(plan: ManagedRuntimePlan): void;
  stats(): WarmPoolStats | null;
  /** Terminates what waits in the pool and stops the reaper (runs already holding a sandbox end it themselves). */
  close(): Promise<void>;
}

interface SlotDirs {
  workspace: string;
  outputs: string;
}

export function runtimeHostWarmPool(options: RuntimeHostWarmPoolOptions): RuntimeHostWarmPool {
  const { sandbox, root, scheduler } = options;
  const provider = sandbox.capabilities.provider;
  const report = (err: unknown, where: Record<string, string>) => options.onError?.(err, where);
  const slotDirs = (slotId: string): SlotDirs | null =>
    root === null ? null : { workspace: join(root, slotId, "workspace"), outputs: join(root, slotId, "outputs") };
  const removeSlot = (slotId: string) => (root === null ? Promise.resolve() : rm(join(root, slotId), { recursive: true, force: true }));
  const profileOf = (plan: ManagedRuntimePlan): WarmProfile => ({ provider, plan, variant: {} });
  let pool: WarmPool<SandboxOwnerHandle> | null = null;
  let reaper: SandboxReaper | null = null;

  const port: WarmComputePort = {
    async claim(input): Promise<WarmComputeClaim> {
      if (pool === null) return { type: "miss", reason: "the pool has not started" };
      const claim = await pool.claim({ profile: profileOf(input.plan), signal: input.signal });
      if (claim.type === "miss") return claim;
      const warm = claim.sandbox;
      const fence = input.fence;
      const end = async (killed: boolean) => {
        await (killed ? warm.owner.release() : warm.owner.abandon()).catch((err: unknown) => report(err, { step: "owner" }));
        await removeSlot(warm.slotId).catch((err: unknown) => report(err, { step: "slot" }));
      };
      const drop = async () => {
        // Not handed to the run: it ends here, never back to the pool.
        const result = await sandbox
          .terminate({ scope: input.scope, fence, lease: warm.lease, reason: "failed", signal: AbortSignal.timeout(30_000) })
          .catch((err: unknown) => ({ type: "failed" as const, error: String(err) }));
        await end(result.type === "terminated");
      };
      if (input.signal.aborted || !(await warm.owner.rebind(input.scope, NEVER_IDLE_MS))) {
        await drop();
        return { type: "miss", reason: "the pooled sandbox's owner record is no longer live" };
      }
      const dirs = slotDirs(warm.slotId);
      if (dirs !== null) {
        try {
          await bindInto(dirs.workspace, hostPath(input.workspace.metadata));
          if (input.outputs !== null) await bindInto(dirs.outputs, hostPath(input.outputs.metadata));
        } catch (err) {
          // Entries may have moved already: the run's restored workspace is spoiled, so the run fails (it published
          // nothing; the next generation restores afresh) rather than start cold over it.
          await drop();
          throw new Error(`binding the warm sandbox failed: ${err instanceof Error ? err.message : String(err)}`);
        }
      }
      return { type: "claimed", compute: { lease: warm.lease, settle: (how) => end(how === "terminated") } };
    },
  };

  return {
    port,
    start(plan) {
      if (reaper !== null) return;
      if (options.target > 0)
        pool = new WarmPool<SandboxOwnerHandle>({
          driver: sandbox,
          environmentId: options.environmentId,
          target: options.target,
          profile: profileOf(plan),
          scheduler,
          claimOwner: (scope) =>
            claimSandboxOwner({
              port: options.ownership,
              deployment: options.deployment,
              driver: provider,
              scope,
              leaseTtlMs: options.leaseTtlMs,
              idleMs: NEVER_IDLE_MS,
              scheduler,
              onLost: (lost) => report(new Error(`lost the owner lease of a pooled sandbox: ${JSON.stringify(lost)}`), { step: "lease" }),
            }),
          slot: (slotId) => slotFor(slotId, slotDirs(slotId), plan),
          discardSlot: removeSlot,
          newSlotId: () => `wp_${randomBytes(8).toString("hex")}`,
          ...(options.retryMs !== undefined ? { retryMs: options.retryMs } : {}),
          onError: (err, where) => report(err, where),
        });
      pool?.start();
      reaper = new SandboxReaper({
        // Only what was started under a pool scope: a run's cold sandboxes have no owner record to judge them by.
        sandbox: {
          listOwned: async (input) => {
            const listed = await sandbox.listOwned(input);
            return listed.type === "listed" ? { ...listed, runtimes: listed.runtimes.filter((r) => isPoolScope(r.scope)) } : listed;
          },
          reap: (input) => sandbox.reap(input),
        },
        ownership: options.ownership,
        orphans: options.orphans,
        deployment: options.deployment,
        driver: provider,
        scheduler,
        intervalMs: options.reapIntervalMs,
        onError: (err) => report(err, { step: "reaper" }),
      });
      reaper.start();
    },
    stats: () => pool?.stats() ?? null,
    async close() {
      await pool?.drain();
      await reaper?.stop();
    },
  };
}

/** A new slot's bindings: host directories for a local driver, none for a cloud one (its workspace is pushed in). */
async function slotFor(slotId: string, dirs: SlotDirs | null, plan: ManagedRuntimePlan): Promise<PoolSlot> {
  if (dirs !== null) {
    await mkdir(join(dirs.workspace, ".."), { recursive: true, mode: 0o711 });
    await mkdir(dirs.workspace, { mode: 0o700 });
    await mkdir(dirs.outputs, { mode: 0o700 });
  }
  const metadata = (path: string | undefined) => (path === undefined ? {} : { metadata: { hostPath: path } });
  return {
    workspace: {
      bindingId: `ws-${slotId}`,
      strategy: plan.workspace.strategy,
      mountPath: WORKSPACE_MOUNT_PATH,
      ...metadata(dirs?.workspace),
    },
    outputs:
      plan.outputs === null
        ? null
        : { bindingId: `out-${slotId}`, strategy: plan.outputs.strategy, mountPath: OUTPUTS_MOUNT_PATH, ...metadata(dirs?.outputs) },
  };
}

function hostPath(metadata: Readonly<Record<string, unknown>> | undefined): string {
  const path = metadata?.hostPath;
  if (typeof path !== "string" || !path.startsWith("/")) throw new Error("the binding has no host directory");
  return path;
}

/**
 * Makes the directory a running sandbox has bound (`slot`) the run's binding at `target`: the target's entries move
 * in (renames on one filesystem) and become the slot directory's owner's (the driver gave it to the sandbox's uid at
 * acquire), then the slot directory takes the target's name and a symlink takes the slot's.
 */
async function bindInto(slot: string, target: string): Promise<void> {
  const owner = await lstat(slot);
  for (const name of await readdir(target)) {
    await rename(join(target, name), join(slot, name));
    if (process.getuid?.() === 0) await chownEntry(join(slot, name), owner.uid, owner.gid);
  }
  await rmdir(target);
  await rename(slot, target);
  await symlink(target, slot);
}

async function chownEntry(path: string, uid: number, gid: number): Promise<void> {
  const info = await lstat(path);
  if (info.isDirectory()) await chownTree(path, uid, gid);
  else if (info.uid !== uid || info.gid !== gid) await lchown(path, uid, gid);
}
