/**
 * The execution queue's lease, held by the one lease controller
 * (`holdLease` in @openma/leases): renew is the conditional UPDATE matching
 * owner + token, release writes the disposition the worker chose for the
 * finished attempt. A database error while renewing is transient (the
 * controller retries until the lease would be unsafe), a missing match is a
 * loss.
 */
import type { LeaseStore, RenewResult } from "@openma/leases";
import type { Database } from "@openma/storage";
import type { Scheduler } from "@openma/time";
import type { Kysely } from "kysely";
import { type ExecutionClaim, type ReleaseDisposition, releaseClaim, renewClaim } from "./queue.ts";

export class ExecutionLeaseStore implements LeaseStore<ExecutionClaim> {
  /** What `release` writes; the worker sets it once the attempt's outcome is known. */
  disposition: ReleaseDisposition = { type: "settle" };
  /** The state the release wrote (null: the lease was already gone); undefined until released. */
  releasedAs: "idle" | "pending" | null | undefined;

  constructor(
    private readonly db: Kysely<Database>,
    private readonly scheduler: Scheduler,
    private readonly ttlMs: number,
    /** Observes every renewal result (metrics, tests). */
    private readonly onRenew: (result: RenewResult<ExecutionClaim>) => void = () => {},
  ) {}

  async renew(lease: ExecutionClaim, signal: AbortSignal): Promise<RenewResult<ExecutionClaim>> {
    const result = await this.#renew(lease, signal);
    this.onRenew(result);
    return result;
  }

  async #renew(lease: ExecutionClaim, signal: AbortSignal): Promise<RenewResult<ExecutionClaim>> {
    if (signal.aborted) return { type: "transient", error: "renewal abandoned" };
    let expiresAt: number | null;
    try {
      expiresAt = await renewClaim(this.db, lease, this.scheduler.now(), this.ttlMs);
    } catch (err) {
      return { type: "transient", error: err instanceof Error ? err.message : String(err) };
    }
    if (expiresAt === null) return { type: "lost", reason: "the execution lease was reclaimed, released or its session deleted" };
    return { type: "renewed", lease: { ...lease, expiresAt }, expiresAt };
  }

  async release(lease: ExecutionClaim): Promise<void> {
    this.releasedAs = await releaseClaim(this.db, lease, this.disposition);
  }
}
