/**
 * SandboxOwnershipPort: the database record of who owns each serve-lane
 * sandbox (see docs/serve-sandboxes.md, ADR 0005). A record is made before
 * the sandbox is started, so no sandbox of the lane ever exists without one;
 * its id is the owner id the driver writes on the sandbox (label or
 * metadata `openma.owner`), next to `openma.lane=serve` and the deployment
 * id, so any process listing a driver (`SandboxInventoryPort.listOwned`) can
 * look the owner up.
 *
 * The owner holds the record through a lease it renews (the lease
 * controller of `@openma/leases`); the record also stores when the sandbox
 * was last used and so when it falls idle. Both are stored times: a server
 * that restarts, or any other server of the deployment, judges them the same
 * way the dead owner would have.
 *
 * Records carry no credential: ids, the driver name and the serialized lease
 * (checked with `sandboxLeaseIssues`, which every driver's lease passes).
 */
import type { ManagedSandboxLease } from "./sandbox.ts";
import type { RuntimeResourceScope } from "./scope.ts";

/** Labels (or metadata) naming a serve-lane sandbox's owner record, written by the driver at acquire. */
export const SANDBOX_OWNER_LABELS = {
  lane: "openma.lane",
  deployment: "openma.deployment",
} as const;

export const SERVE_LANE = "serve";

export interface SandboxOwnerRecord {
  /** The owner id written on the sandbox. */
  id: string;
  scope: RuntimeResourceScope;
  driver: string;
  /** The deployment (one database) whose servers may judge it. */
  deployment: string;
  /** Null until the driver has answered the acquire. */
  lease: ManagedSandboxLease | null;
  createdAt: number;
  lastUsedAt: number;
  /** `lastUsedAt` plus the idle timeout in force when it was last used. */
  idleDeadlineAt: number;
  /** The owner's lease; renewed while the owning server lives. */
  leaseExpiresAt: number;
}

/**
 * How a reaper judges one listed sandbox:
 * - `live`: its owner's lease holds and it is not idle; never touched.
 * - `expired`: its owner stopped renewing (crashed, killed, lost the database).
 * - `idle`: unused past its stored idle deadline (the owner's own idle timer should have ended it).
 * - `unowned`: no record names it (the record was released, or never committed).
 */
export type SandboxOwnerVerdict = "live" | "expired" | "idle" | "unowned";

export function sandboxOwnerVerdict(record: SandboxOwnerRecord | null, now: number): SandboxOwnerVerdict {
  if (record === null) return "unowned";
  if (record.leaseExpiresAt <= now) return "expired";
  if (record.idleDeadlineAt <= now) return "idle";
  return "live";
}

export interface SandboxOwnerClaimInput {
  id: string;
  scope: RuntimeResourceScope;
  driver: string;
  deployment: string;
  leaseTtlMs: number;
  idleMs: number;
  signal: AbortSignal;
}

export type SandboxOwnerRenewResult = { type: "renewed"; expiresAt: number } | { type: "lost" };

/**
 * Per driver, for `openma doctor` and the environment stats. `orphaned` counts pending and dead-letter orphan records;
 * `pooled` the owned sandboxes still waiting in a warm pool (their scope is a pool scope, docs/warm-pools.md).
 */
export interface SandboxDriverStats {
  driver: string;
  owned: number;
  idle: number;
  orphaned: number;
  pooled: number;
}

/** Session ids of warm-pool scopes start with this (a real session id never holds a colon). */
export const WARM_POOL_SESSION_PREFIX = "warm-pool:";

export interface SandboxOwnershipPort {
  /** Records a new owner before its sandbox is started; the lease runs from now. */
  claim(input: SandboxOwnerClaimInput): Promise<SandboxOwnerRecord>;
  /** Stores the driver's lease once acquired; false when the record is gone (reaped meanwhile). */
  attach(input: { id: string; lease: ManagedSandboxLease; signal: AbortSignal }): Promise<boolean>;
  /** Extends a lease that has not expired; `lost` once it has (a reaper may be taking it). */
  renew(input: { id: string; leaseTtlMs: number; signal: AbortSignal }): Promise<SandboxOwnerRenewResult>;
  /** The sandbox is used now: moves its idle deadline. False when the record is gone or no longer live. */
  touch(input: { id: string; idleMs: number; signal: AbortSignal }): Promise<boolean>;
  /**
   * A warm pool's sandbox is claimed by a session: moves a live record from its pool scope to the session's scope and
   * marks it used now. One conditional statement; false when the record is gone or no longer live (a reaper may be
   * taking it), so the sandbox must not be used.
   */
  rebind(input: { id: string; scope: RuntimeResourceScope; idleMs: number; signal: AbortSignal }): Promise<boolean>;
  /** Lets the lease lapse at once (the owner could not kill its sandbox; a reaper will). */
  abandon(input: { id: string; signal: AbortSignal }): Promise<void>;
  /** Deletes the record (its sandbox is gone). */
  release(input: { id: string; signal: AbortSignal }): Promise<void>;
  /** The records with these ids (missing ones are omitted). */
  get(input: { ids: readonly string[]; signal: AbortSignal }): Promise<SandboxOwnerRecord[]>;
  /**
   * Takes a record away from its owner for reaping: deletes it only when it
   * is not live at `now` (one conditional statement, so a concurrent renew or
   * touch and this never both win). `absent`: no such record.
   */
  takeOver(input: { id: string; signal: AbortSignal }): Promise<"taken" | "live" | "absent">;
  /** Records of this deployment and driver that are not live, oldest first (stale ones whose sandbox is already gone). */
  listStale(input: { deployment: string; driver: string; limit: number; signal: AbortSignal }): Promise<SandboxOwnerRecord[]>;
  /**
   * Per driver: this deployment's owned and idle sandboxes, and the orphan records (pending or dead-letter) of its
   * provider; with `environmentId`, only those of that environment's sessions.
   */
  stats(input: { deployment: string; environmentId?: string; signal: AbortSignal }): Promise<SandboxDriverStats[]>;
}
