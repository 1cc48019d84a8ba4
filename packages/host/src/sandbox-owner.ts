/**
 * One sandbox's owner record, held while the sandbox is its owner's
 * (ADR 0005): claimed in the database before the sandbox is started, its
 * lease renewed by the lease controller (`@openma/leases`), deleted when the
 * sandbox is gone or let lapse when it could not be killed, so a reaper takes
 * it. `openma serve`'s session sandboxes and the runtime host's warm pool
 * (ADR 0032) both hold their sandboxes this way; the SandboxReaper judges
 * the records.
 */
import { randomBytes } from "node:crypto";
import type { ManagedSandboxLease, RuntimeResourceScope, SandboxOwnershipPort } from "@openma/contract";
import { holdLease, type LeaseEnd } from "@openma/leases";
import type { Scheduler } from "@openma/time";

export interface SandboxOwnerHandle {
  /** The owner id written on the sandbox. */
  readonly id: string;
  /** Aborted when the lease is lost: a reaper may be taking the sandbox. */
  readonly signal: AbortSignal;
  /** Records the driver's lease; false when the record was taken meanwhile. */
  attach(lease: ManagedSandboxLease): Promise<boolean>;
  /** The sandbox is used now (moves the stored idle deadline); false when it is no longer ours to use. */
  touch(idleMs: number): Promise<boolean>;
  /** A warm pool's sandbox now serves this session: the record moves to its scope (false: no longer ours to use). */
  rebind(scope: RuntimeResourceScope, idleMs: number): Promise<boolean>;
  /** The sandbox is gone: stop renewing and delete the record. */
  release(): Promise<void>;
  /** The sandbox could not be killed: stop renewing and let the lease lapse now, for a reaper. */
  abandon(): Promise<void>;
}

export interface ClaimSandboxOwnerInput {
  port: SandboxOwnershipPort;
  deployment: string;
  driver: string;
  scope: RuntimeResourceScope;
  leaseTtlMs: number;
  idleMs: number;
  scheduler: Scheduler;
  /** The lease ended otherwise than by `release`/`abandon` (lost, or renewals failed past the margin). */
  onLost?(end: LeaseEnd): void;
}

export async function claimSandboxOwner(input: ClaimSandboxOwnerInput): Promise<SandboxOwnerHandle> {
  const { port, leaseTtlMs: ttl } = input;
  // Renewed three times per TTL and given up a sixth of it early: a blip of the database is survived, a dead owner is not.
  const policy = { renewEveryMs: Math.floor(ttl / 3), safetyMarginMs: Math.floor(ttl / 6), renewTimeoutMs: Math.floor(ttl / 6) };
  const quiet = new AbortController().signal;
  const id = `sbo_${randomBytes(12).toString("hex")}`;
  const record = await port.claim({
    id,
    scope: input.scope,
    driver: input.driver,
    deployment: input.deployment,
    leaseTtlMs: ttl,
    idleMs: input.idleMs,
    signal: quiet,
  });
  const held = holdLease<string>(
    {
      async renew(lease, signal) {
        try {
          const result = await port.renew({ id: lease, leaseTtlMs: ttl, signal });
          return result.type === "renewed"
            ? { type: "renewed", lease, expiresAt: result.expiresAt }
            : { type: "lost", reason: "owner lease expired" };
        } catch (err) {
          return { type: "transient", error: String(err) };
        }
      },
      // The handle ends the record itself: deleted when the sandbox is gone, expired when it could not be killed.
      release: async () => {},
    },
    { lease: id, expiresAt: record.leaseExpiresAt },
    policy,
    input.scheduler,
  );
  void held.ended.then((end) => {
    if (end.type !== "released") input.onLost?.(end);
  });
  return {
    id,
    signal: held.signal,
    attach: (lease) => port.attach({ id, lease, signal: quiet }),
    async touch(idle) {
      if (held.signal.aborted) return false;
      // A database that does not answer says nothing about the sandbox; the lease decides.
      return port.touch({ id, idleMs: idle, signal: quiet }).catch(() => true);
    },
    async rebind(session, idle) {
      if (held.signal.aborted) return false;
      return port.rebind({ id, scope: session, idleMs: idle, signal: quiet });
    },
    async release() {
      await held.release();
      await port.release({ id, signal: quiet });
    },
    async abandon() {
      await held.release();
      await port.abandon({ id, signal: quiet });
    },
  };
}
