/**
 * Lease records for a cloud driver that cannot list what it holds (the
 * Cloudflare bridge and our Worker: no labels, no listing), ADR 0028. The
 * runtime host's start-up sweep finds a dead predecessor's runtimes by its
 * label; such a driver answers that listing with nothing, so the host keeps
 * its own inventory instead, in the database's sandbox owner table:
 *
 * - before each acquire, a record under this host's deployment key
 *   (`rh-<host id>`), so no runtime of this host exists without one; the
 *   driver's serialized lease is attached once the acquire answers;
 * - a terminate or reap that ended the runtime deletes its record;
 * - at start, every record under this host's key belongs to a process of
 *   this host that is gone (one process per host, as the label sweep
 *   assumes): its lease is reaped through the driver and the record
 *   deleted. A reap that fails keeps the record for the next start, and
 *   the orphan store is not involved.
 *
 * Where the driver derives the runtime's id from the acquire (the bridge
 * does), the lease is attached before the acquire runs, so a process
 * killed mid-acquire still leaves a lease to reap. Otherwise a process
 * killed between the claim and the attach leaves a record with no lease:
 * nothing can be reaped from it, so the sweep only deletes it.
 */
import { randomBytes } from "node:crypto";
import type {
  ManagedSandboxLease,
  OrphanReapInput,
  SandboxAcquireResult,
  SandboxOwnerRecord,
  SandboxOwnershipPort,
  SandboxTerminateResult,
} from "@openma/contract";
import { plannedLeaseOf } from "@openma/driver-kit/remote";
import type { RemoteSandboxDriver } from "./remote.ts";

/** What the records need of the owner table (`SqlSandboxOwnership`). */
export interface LeaseRecordStore extends Pick<SandboxOwnershipPort, "claim" | "attach" | "release"> {
  /** Every record of a deployment and driver, live or not, oldest first. */
  listAll(input: { deployment: string; driver: string; limit: number; signal: AbortSignal }): Promise<SandboxOwnerRecord[]>;
}

/** The records never lapse by time: only this host's next process judges them (see the module comment). */
const FOREVER_MS = 7 * 86_400_000;
const SWEEP_BATCH = 1000;

export interface RecordedSandbox {
  sandbox: RemoteSandboxDriver;
  /** Reaps every runtime a previous process of this host recorded; returns how many records it cleared. */
  sweep(): Promise<number>;
}

export function recordLeases(sandbox: RemoteSandboxDriver, options: { store: LeaseRecordStore; deployment: string }): RecordedSandbox {
  const { store, deployment } = options;
  const driver = sandbox.capabilities.provider;
  /** Runtime id → its record, for the terminate or reap of this process. */
  const records = new Map<string, string>();
  const forget = async (lease: ManagedSandboxLease) => {
    const id = records.get(lease.runtimeId);
    if (id === undefined) return;
    records.delete(lease.runtimeId);
    await store.release({ id, signal: AbortSignal.timeout(30_000) });
  };

  const recorded: RemoteSandboxDriver = {
    capabilities: sandbox.capabilities,
    async acquire(input): Promise<SandboxAcquireResult> {
      const id = `lr-${randomBytes(12).toString("hex")}`;
      // Where the lease is known before the acquire, a process killed mid-acquire still leaves it to reap.
      const planned = plannedLeaseOf(sandbox, input);
      try {
        await store.claim({ id, scope: input.scope, driver, deployment, leaseTtlMs: FOREVER_MS, idleMs: FOREVER_MS, signal: input.signal });
        if (planned !== null) await store.attach({ id, lease: planned, signal: input.signal });
      } catch (err) {
        return {
          type: "unavailable",
          reason: `recording the lease failed: ${err instanceof Error ? err.message : String(err)}`,
          retryable: true,
        };
      }
      const result = await sandbox.acquire(input);
      if (result.type === "acquired") {
        await store.attach({ id, lease: result.lease, signal: AbortSignal.timeout(30_000) });
        records.set(result.lease.runtimeId, id);
      } else {
        await store.release({ id, signal: AbortSignal.timeout(30_000) });
      }
      return result;
    },
    heartbeat: (input) => sandbox.heartbeat(input),
    suspend: (input) => sandbox.suspend(input),
    async terminate(input): Promise<SandboxTerminateResult> {
      const result = await sandbox.terminate(input);
      if (result.type === "terminated") await forget(input.lease);
      return result;
    },
    inspect: (input) => sandbox.inspect(input),
    async reap(input: OrphanReapInput) {
      const result = await sandbox.reap(input);
      if (result.type !== "failed") await forget(input.lease);
      return result;
    },
    listOwned: (input) => sandbox.listOwned(input),
    toolSandbox: (lease) => sandbox.toolSandbox(lease),
    processes: () => sandbox.processes(),
    close: () => sandbox.close(),
  };

  return {
    sandbox: recorded,
    async sweep() {
      const signal = AbortSignal.timeout(60_000);
      let cleared = 0;
      for (const record of await store.listAll({ deployment, driver, limit: SWEEP_BATCH, signal })) {
        if (record.lease !== null) {
          const reaped = await sandbox.reap({
            scope: record.scope,
            lease: record.lease,
            reason: "host_recovery",
            signal: AbortSignal.timeout(60_000),
          });
          if (reaped.type === "failed") continue;
        }
        await store.release({ id: record.id, signal });
        cleared += 1;
      }
      return cleared;
    },
  };
}
