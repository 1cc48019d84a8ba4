/**
 * The resource fence held through the one lease controller of the system
 * (`@openma/leases`): renewals, transient-failure tolerance up to the safety
 * margin, loss and release follow exactly the policy every other lease uses.
 *
 * The adapter maps a thrown renewal (database unreachable) to `transient`
 * rather than loss, so a blip does not abort a run while the fence is still
 * provably ours; a `stale` answer is final loss.
 */
import type { RuntimeResourceFence, RuntimeResourceFencePort } from "@openma/contract";
import { type HeldLease, holdLease, type LeaseStore } from "@openma/leases";
import type { Scheduler } from "@openma/time";
import { describeError } from "./context.ts";
import type { HostTimings } from "./types.ts";

export function fenceLeaseStore(fences: RuntimeResourceFencePort, ttlMs: number): LeaseStore<RuntimeResourceFence> {
  return {
    async renew(fence, signal) {
      try {
        const result = await fences.renew({ fence, ttlMs, signal });
        if (result.type === "renewed") return { type: "renewed", lease: result.fence, expiresAt: result.fence.expiresAt };
        return { type: "lost", reason: `fence ${result.reason}` };
      } catch (err) {
        return { type: "transient", error: describeError(err) };
      }
    },
    async release(fence, signal) {
      await fences.release({ fence, signal });
    },
  };
}

/** Starts renewing a freshly acquired fence at once: ownership begins at acquire, not when compute is ready. */
export function holdFence(
  fences: RuntimeResourceFencePort,
  fence: RuntimeResourceFence,
  timings: HostTimings,
  scheduler: Scheduler,
): HeldLease<RuntimeResourceFence> {
  return holdLease(
    fenceLeaseStore(fences, timings.leaseTtlMs),
    { lease: fence, expiresAt: fence.expiresAt },
    { renewEveryMs: timings.renewEveryMs, safetyMarginMs: timings.safetyMarginMs, renewTimeoutMs: timings.renewTimeoutMs },
    scheduler,
  );
}
