/**
 * An Environment Work item held through the official Work API, as a
 * `LeaseStore` for the one lease controller (`holdLease`). This is how a
 * runtime host holds a self-hosted Work item: the same renew/loss/release
 * semantics as the session execution queue, with the wire protocol of §2.4:
 *  - renew = heartbeat CAS with the sessions token, echoing the previous
 *    `last_heartbeat` verbatim (`NO_HEARTBEAT` before the first beat);
 *  - 412 → lost (another holder has the lease); `state: stopping|stopped` or
 *    `lease_extended: false` → lost (the item is being taken away); any other
 *    4xx except 408/409/429 → lost (rejected); network, 408/409/429, 5xx →
 *    transient (the controller retries until the lease would be unsafe);
 *  - release = `stop({force: true})`, where 409 (already stopped) is success.
 *
 * The client is the official SDK's `client.beta.environments.work` (typed
 * structurally so this package does not load the SDK). The sessions token is
 * a bearer secret: it lives only inside the client and is never logged.
 */
import type { Scheduler } from "@openma/time";
import type { LeaseStore, RenewResult } from "./controller.ts";

/** The literal the Work API takes as `expected_last_heartbeat` before any beat was stored. */
export const NO_HEARTBEAT = "NO_HEARTBEAT";

/** Loss reason when the server asked the holder to stop: the holder should wind down and still force-stop. */
export const STOP_REQUESTED = "the work item is stopping";

export interface WorkLease {
  environmentId: string;
  workId: string;
  /** The last `last_heartbeat` the server returned, or `NO_HEARTBEAT`. */
  lastHeartbeat: string;
}

interface HeartbeatResponse {
  last_heartbeat: string;
  lease_extended: boolean;
  state: string;
  ttl_seconds: number;
}

type RequestOptions = { signal?: AbortSignal | null; maxRetries?: number };

/** The subset of `client.beta.environments.work` used here. */
export interface WorkApi {
  heartbeat(
    workId: string,
    params: { environment_id: string; expected_last_heartbeat?: string | null; desired_ttl_seconds?: number | null },
    options?: RequestOptions,
  ): PromiseLike<HeartbeatResponse>;
  stop(workId: string, params: { environment_id: string; force?: boolean | null }, options?: RequestOptions): PromiseLike<unknown>;
}

export interface WorkHeartbeatStoreOptions {
  /** Sent as `desired_ttl_seconds` (the server may clamp it). */
  desiredTtlSeconds?: number;
}

/** HTTP status of an SDK error, or undefined for connection errors, aborts and anything else. */
function statusOf(err: unknown): number | undefined {
  const status = (err as { status?: unknown } | null)?.status;
  return typeof status === "number" ? status : undefined;
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Statuses worth retrying (the SDK worker's own rule): everything else in 4xx is final. */
function isTransientStatus(status: number): boolean {
  return status === 408 || status === 409 || status === 429 || status >= 500;
}

export class WorkHeartbeatStore implements LeaseStore<WorkLease> {
  constructor(
    private readonly work: WorkApi,
    private readonly scheduler: Scheduler,
    private readonly options: WorkHeartbeatStoreOptions = {},
  ) {}

  async renew(lease: WorkLease, signal: AbortSignal): Promise<RenewResult<WorkLease>> {
    // The lease runs from when the beat was sent, not when its answer arrived: never overestimate it.
    const sentAt = this.scheduler.now();
    let beat: HeartbeatResponse;
    try {
      beat = await this.work.heartbeat(
        lease.workId,
        {
          environment_id: lease.environmentId,
          expected_last_heartbeat: lease.lastHeartbeat,
          ...(this.options.desiredTtlSeconds ? { desired_ttl_seconds: this.options.desiredTtlSeconds } : {}),
        },
        // The controller owns retries and timeouts; the SDK must not retry behind its back.
        { signal, maxRetries: 0 },
      );
    } catch (err) {
      const status = statusOf(err);
      if (status === 412) return { type: "lost", reason: "heartbeat precondition failed: another holder has the lease" };
      if (status !== undefined && !isTransientStatus(status)) return { type: "lost", reason: `heartbeat rejected with status ${status}` };
      return { type: "transient", error: status === undefined ? messageOf(err) : `heartbeat failed with status ${status}` };
    }
    if (beat.state === "stopping" || beat.state === "stopped") return { type: "lost", reason: STOP_REQUESTED };
    if (!beat.lease_extended) return { type: "lost", reason: "the server did not extend the lease" };
    if (!(Number.isFinite(beat.ttl_seconds) && beat.ttl_seconds > 0)) return { type: "lost", reason: "the server returned no lease TTL" };
    return {
      type: "renewed",
      lease: { ...lease, lastHeartbeat: beat.last_heartbeat },
      expiresAt: sentAt + beat.ttl_seconds * 1000,
    };
  }

  async release(lease: WorkLease, signal: AbortSignal): Promise<void> {
    try {
      await this.work.stop(lease.workId, { environment_id: lease.environmentId, force: true }, { signal, maxRetries: 0 });
    } catch (err) {
      if (statusOf(err) === 409) return; // already stopped: released is released
      throw err;
    }
  }
}

/** What `claimWorkItem` hands over: the item, its sessions token, and a lease ready for `holdLease`. */
export interface ClaimedWork<W> {
  work: W;
  /** Bearer for this item's session and Work calls. Secret: never log it. */
  sessionsToken: string;
  store: WorkHeartbeatStore;
  claimed: { lease: WorkLease; expiresAt: number };
}

interface PolledWork {
  id: string;
  environment_id: string;
  secret: string | null;
}

/** The fleet side of `client.beta.environments.work` (environment key): poll and ack. */
export interface WorkFleetApi<W extends PolledWork> {
  poll(
    environmentId: string,
    params?: { block_ms?: number | null; reclaim_older_than_ms?: number | null; "Anthropic-Worker-ID"?: string },
    options?: RequestOptions,
  ): PromiseLike<W | null>;
  ack(workId: string, params: { environment_id: string }, options?: RequestOptions): PromiseLike<unknown>;
}

/** The Work API's first-beat grace: a worker may assume 90 s before its first successful heartbeat. */
const FIRST_BEAT_GRACE_MS = 90_000;

/** Decodes the item's `secret` (base64url or base64 JSON) to its sessions token, or null. */
export function sessionsTokenOf(secret: string | null): string | null {
  if (!secret) return null;
  try {
    const json = JSON.parse(Buffer.from(secret.replace(/-/g, "+").replace(/_/g, "/"), "base64").toString("utf8")) as unknown;
    const token = (json as { sessions_token?: unknown } | null)?.sessions_token;
    return typeof token === "string" && token.length > 0 ? token : null;
  } catch {
    return null;
  }
}

/**
 * The Work queue's claim: poll (environment key), ack, then the first
 * heartbeat with the item's sessions token, which establishes the lease.
 * Returns null when nothing was handed out, the item carries no sessions
 * token, or another holder won the first beat. A first beat that fails
 * transiently still returns the claim, valid for the first-beat grace.
 */
export async function claimWorkItem<W extends PolledWork>(opts: {
  fleet: WorkFleetApi<W>;
  environmentId: string;
  /** A Work API client authenticated with the item's sessions token. */
  holderFor(sessionsToken: string): WorkApi;
  scheduler: Scheduler;
  workerId?: string;
  blockMs?: number;
  signal?: AbortSignal;
  storeOptions?: WorkHeartbeatStoreOptions;
}): Promise<ClaimedWork<W> | null> {
  const signal = opts.signal ?? null;
  const work = await opts.fleet.poll(
    opts.environmentId,
    { ...(opts.blockMs ? { block_ms: opts.blockMs } : {}), ...(opts.workerId ? { "Anthropic-Worker-ID": opts.workerId } : {}) },
    { signal, maxRetries: 0 },
  );
  if (!work) return null;
  const sessionsToken = sessionsTokenOf(work.secret);
  if (!sessionsToken) return null;
  const ackedAt = opts.scheduler.now();
  await opts.fleet.ack(work.id, { environment_id: work.environment_id }, { signal, maxRetries: 0 });
  const store = new WorkHeartbeatStore(opts.holderFor(sessionsToken), opts.scheduler, opts.storeOptions);
  const initial: WorkLease = { environmentId: work.environment_id, workId: work.id, lastHeartbeat: NO_HEARTBEAT };
  const first = await store.renew(initial, signal ?? new AbortController().signal);
  if (first.type === "lost") return null;
  const claimed = first.type === "renewed" ? first : { lease: initial, expiresAt: ackedAt + FIRST_BEAT_GRACE_MS };
  return { work, sessionsToken, store, claimed: { lease: claimed.lease, expiresAt: claimed.expiresAt } };
}
