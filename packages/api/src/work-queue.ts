/**
 * Work items of self-hosted environments as workers see them: the queue, its
 * leases and its state machine (§2.4), as used by the Work API routes. The
 * session side (enqueue, session and environment stops, the requeue a
 * stopped item owes its session) is session-work.ts, which this module uses
 * and which never imports it back.
 *
 * Every transition is one conditional UPDATE (`… WHERE <expected state> …
 * RETURNING`), so concurrent pollers, heartbeats and stops are decided by the
 * database on both engines. "Pending" (handed out by a poll, not yet acked) is
 * `state = 'queued'` with `polled_at` set; the wire shows it as `queued`.
 */
import { type Database, hashSecret, newSecret, toIso, type Unsubscribe, type WorkItemRow } from "@openma/storage";
import { deploymentId, SqlSandboxOwnership } from "@openma/storage/sandbox-owners";
import { type ExpressionBuilder, type Kysely, sql, type Transaction } from "kysely";
import { SESSIONS_TOKEN_PREFIX } from "./auth.ts";
import type { ApiDeps } from "./context.ts";
import { ApiError, notFound, permanentConflict } from "./errors.ts";
import { requeueUnserved } from "./session-work.ts";

export type WorkState = "queued" | "starting" | "active" | "stopping" | "stopped";

/** Default for `reclaim_older_than_ms`: a handed-out item not acked by then is offered again. */
export const DEFAULT_RECLAIM_MS = 5000;
/** The worker assumes a 90 s lease until its first successful heartbeat; the server grants the same. */
export const FIRST_BEAT_GRACE_MS = 90_000;
/** `workers_polling` counts worker ids seen within this window. */
export const WORKERS_POLLING_WINDOW_MS = 30_000;
/** Poller rows older than this are pruned (they no longer count for anything). */
const POLLER_RETENTION_MS = 60 * 60_000;
/** The literal the worker sends as `expected_last_heartbeat` on its first beat. */
export const NO_HEARTBEAT = "NO_HEARTBEAT";

/**
 * Abandoned stopping items one poll or stats call finishes off: housekeeping
 * stays bounded per request, and any rest waits for the next call.
 */
const SWEEP_BATCH = 10;

const LIVE_HELD: WorkState[] = ["starting", "active"];

type Db = Kysely<Database> | Transaction<Database>;

export function workTopic(environmentId: string): string {
  return `work:${environmentId}`;
}

/** Wakes long-polling workers of the environment. Call after the enqueuing transaction committed. */
export async function notifyWork(deps: Pick<ApiDeps, "storage">, environmentId: string): Promise<void> {
  await deps.storage.bus.publish(workTopic(environmentId));
}

export interface WorkObject {
  type: "work";
  id: string;
  environment_id: string;
  data: { type: "session"; id: string } | { type?: "healthcheck"; id: string };
  state: WorkState;
  secret: string | null;
  metadata: Record<string, string>;
  created_at: string;
  acknowledged_at: string | null;
  started_at: string | null;
  latest_heartbeat_at: string | null;
  stop_requested_at: string | null;
  stopped_at: string | null;
  /**
   * OpenMA extension, only with tracing on where the item was queued: the W3C
   * trace context of the request that queued it, which the runtime host's
   * `openma.host.run` continues (docs/operations.md, "Traces").
   */
  traceparent?: string;
}

export function renderWork(row: WorkItemRow, secret: string | null = null): WorkObject {
  return {
    type: "work",
    id: row.id,
    environment_id: row.environment_id,
    data: JSON.parse(row.data),
    state: row.state as WorkState,
    secret,
    metadata: JSON.parse(row.metadata),
    created_at: row.created_at,
    acknowledged_at: row.acknowledged_at,
    started_at: row.started_at,
    latest_heartbeat_at: row.latest_heartbeat_at,
    stop_requested_at: row.stop_requested_at,
    stopped_at: row.stopped_at,
    ...(row.traceparent ? { traceparent: row.traceparent } : {}),
  };
}

/** The per-item `secret` (§2.7): base64url of `{sessions_token, api_base_url?}`. */
export function encodeWorkSecret(sessionsToken: string, apiBaseUrl: string | undefined): string {
  const payload = apiBaseUrl ? { sessions_token: sessionsToken, api_base_url: apiBaseUrl } : { sessions_token: sessionsToken };
  return Buffer.from(JSON.stringify(payload), "utf8").toString("base64url");
}

export async function loadWorkRow(db: Db, environmentId: string, workId: string): Promise<WorkItemRow> {
  const row = await db
    .selectFrom("work_items")
    .selectAll()
    .where("id", "=", workId)
    .where("environment_id", "=", environmentId)
    .executeTakeFirst();
  if (!row) throw notFound("work item", workId);
  return row;
}

/**
 * Items a poll may hand out at `now`: queued and never handed out, handed out
 * but not acked before `reclaimCutoff`, or acked with an expired lease.
 */
function claimable(eb: ExpressionBuilder<Database, "work_items">, now: string, reclaimCutoff: string) {
  return eb.or([
    eb.and([eb("state", "=", "queued"), eb.or([eb("polled_at", "is", null), eb("polled_at", "<=", reclaimCutoff)])]),
    eb.and([eb("state", "in", LIVE_HELD), eb("lease_expires_at", "<=", now)]),
  ]);
}

/**
 * A stopping item whose holder is gone, by the rules `claimable` uses to
 * reclaim a live item: its lease ran out (a stopping item's heartbeats only
 * report, they no longer extend it), or it was handed out and not acked
 * before `reclaimCutoff`, or it was never handed out at all.
 */
function abandonedStopping(eb: ExpressionBuilder<Database, "work_items">, now: string, reclaimCutoff: string) {
  return eb.and([
    eb("state", "=", "stopping"),
    eb.or([
      eb("lease_expires_at", "<=", now),
      eb.and([eb("lease_expires_at", "is", null), eb.or([eb("polled_at", "is", null), eb("polled_at", "<=", reclaimCutoff)])]),
    ]),
  ]);
}

/**
 * Finishes off the environment's stopping items whose holder vanished. A
 * stopping item is otherwise finished only by its holder's force stop or by
 * the next enqueue for its session, so a crashed holder would leave it the
 * session's live item, and the session without work, until new input came. Each item becomes `stopped` in its own
 * transaction together with the requeue a force stop would do; the
 * conditional UPDATE lets exactly one of concurrent sweepers (or the holder's
 * own late stop) win. A failure is logged, never thrown: the poll or stats
 * call this runs in must not fail on housekeeping.
 */
async function sweepAbandonedStopping(deps: ApiDeps, environmentId: string, nowMs: number, reclaimOlderThanMs: number): Promise<void> {
  const { db } = deps.storage;
  const now = toIso(nowMs);
  const cutoff = toIso(nowMs - reclaimOlderThanMs);
  try {
    const abandoned = await db
      .selectFrom("work_items")
      .select("id")
      .where("environment_id", "=", environmentId)
      .where((eb) => abandonedStopping(eb, now, cutoff))
      .orderBy("created_at")
      .orderBy("id")
      .limit(SWEEP_BATCH)
      .execute();
    let requeuedAny = false;
    for (const { id } of abandoned) {
      const swept = await db.transaction().execute(async (trx) => {
        const row = await trx
          .updateTable("work_items")
          .set({ state: "stopped", stopped_at: now, lease_expires_at: null })
          .where("id", "=", id)
          .where((eb) => abandonedStopping(eb, now, cutoff))
          .returningAll()
          .executeTakeFirst();
        return row ? { row, requeued: await requeueUnserved(trx, deps, row) } : null;
      });
      if (!swept) continue;
      requeuedAny ||= swept.requeued !== null;
      deps.logger.info(
        { environment_id: environmentId, work_id: id, session_id: swept.row.session_id, requeued_work_id: swept.requeued?.workId ?? null },
        "stopped a stopping work item whose holder is gone",
      );
    }
    if (requeuedAny) await notifyWork(deps, environmentId);
  } catch (err) {
    deps.logger.warn({ err: (err as Error).message, environment_id: environmentId }, "sweeping abandoned stopping work items failed");
  }
}

/**
 * Hands out the oldest claimable item with a fresh sessions token. Handing an
 * item out again (reclaim) rotates the token, which fences the previous
 * holder out at once, and resets its lease so the new holder starts clean.
 * Stopping items whose holder vanished are finished off first, so work they
 * owe their session is among the candidates.
 */
export async function claimWork(
  deps: ApiDeps,
  environmentId: string,
  opts: { reclaimOlderThanMs: number; workerId: string | undefined },
): Promise<{ row: WorkItemRow; sessionsToken: string } | null> {
  const { db } = deps.storage;
  const nowMs = deps.clock.now();
  const now = toIso(nowMs);
  const cutoff = toIso(nowMs - opts.reclaimOlderThanMs);
  await sweepAbandonedStopping(deps, environmentId, nowMs, opts.reclaimOlderThanMs);
  // A candidate taken by a concurrent poll fails its conditional UPDATE; try the next ones.
  for (let round = 0; round < 3; round++) {
    const candidates = await db
      .selectFrom("work_items")
      .select("id")
      .where("environment_id", "=", environmentId)
      .where((eb) => claimable(eb, now, cutoff))
      .orderBy("created_at")
      .orderBy("id")
      .limit(5)
      .execute();
    if (candidates.length === 0) return null;
    for (const { id } of candidates) {
      const sessionsToken = newSecret(SESSIONS_TOKEN_PREFIX);
      const row = await db
        .updateTable("work_items")
        .set({
          state: "queued",
          polled_at: now,
          polled_by: opts.workerId ?? null,
          token_hash: hashSecret(sessionsToken),
          acknowledged_at: null,
          started_at: null,
          latest_heartbeat_at: null,
          last_heartbeat: null,
          lease_expires_at: null,
        })
        .where("id", "=", id)
        .where((eb) => claimable(eb, now, cutoff))
        .returningAll()
        .executeTakeFirst();
      if (row) return { row, sessionsToken };
    }
  }
  return null;
}

/** Records that a worker polled, for `workers_polling`; prunes long-gone workers. */
export async function recordPoller(deps: ApiDeps, environmentId: string, workerId: string): Promise<void> {
  const nowMs = deps.clock.now();
  const now = toIso(nowMs);
  const { db } = deps.storage;
  await db
    .insertInto("work_pollers")
    .values({ environment_id: environmentId, worker_id: workerId, last_seen_at: now })
    .onConflict((oc) => oc.columns(["environment_id", "worker_id"]).doUpdateSet({ last_seen_at: now }))
    .execute();
  await db
    .deleteFrom("work_pollers")
    .where("environment_id", "=", environmentId)
    .where("last_seen_at", "<", toIso(nowMs - POLLER_RETENTION_MS))
    .execute();
}

/**
 * Long-poll: tries `claim`, and while it finds nothing waits for a wake-up on
 * the bus (or the `blockMs` deadline, or the client going away). It subscribes
 * before the first try so an enqueue between a try and the wait is not missed.
 * The wait is real time on purpose: `block_ms` is a wire-level wait, not a
 * lease computation, so it does not go through the injected clock.
 */
export async function waitForWork<T>(opts: {
  subscribe: (wake: () => void) => Unsubscribe;
  claim: () => Promise<T | null>;
  blockMs: number;
  signal?: AbortSignal | undefined;
}): Promise<T | null> {
  let expired = opts.blockMs <= 0;
  let woken = false;
  let resume: (() => void) | null = null;
  const kick = () => {
    const r = resume;
    resume = null;
    r?.();
  };
  const unsubscribe = opts.subscribe(() => {
    woken = true;
    kick();
  });
  const onEnd = () => {
    expired = true;
    kick();
  };
  const timer = expired ? undefined : setTimeout(onEnd, opts.blockMs);
  opts.signal?.addEventListener("abort", onEnd);
  try {
    for (;;) {
      woken = false;
      const item = await opts.claim();
      if (item !== null) return item;
      if (expired || opts.signal?.aborted) return null;
      if (!woken) {
        await new Promise<void>((resolve) => {
          resume = resolve;
        });
        // Timed out (or the client left) with no wake-up: nothing new to look at.
        if (!woken) return null;
      }
    }
  } finally {
    clearTimeout(timer);
    unsubscribe();
    opts.signal?.removeEventListener("abort", onEnd);
  }
}

/** queued → starting; the first lease lasts until the worker's first heartbeat is due. */
export async function ackWork(deps: ApiDeps, environmentId: string, workId: string): Promise<WorkItemRow> {
  const nowMs = deps.clock.now();
  const row = await deps.storage.db
    .updateTable("work_items")
    .set({ state: "starting", acknowledged_at: toIso(nowMs), lease_expires_at: toIso(nowMs + FIRST_BEAT_GRACE_MS) })
    .where("id", "=", workId)
    .where("environment_id", "=", environmentId)
    .where("state", "=", "queued")
    .returningAll()
    .executeTakeFirst();
  if (row) return row;
  const current = await loadWorkRow(deps.storage.db, environmentId, workId);
  // A retried ack (or one for an item being stopped) reports the item as it is.
  if (current.state === "stopped") throw permanentConflict(`work item ${JSON.stringify(workId)} is already stopped`);
  return current;
}

export interface HeartbeatResponse {
  type: "work_heartbeat";
  last_heartbeat: string;
  lease_extended: boolean;
  state: WorkState;
  ttl_seconds: number;
}

function reportOnly(row: WorkItemRow): HeartbeatResponse {
  return {
    type: "work_heartbeat",
    last_heartbeat: row.last_heartbeat ?? "",
    lease_extended: false,
    state: row.state as WorkState,
    ttl_seconds: row.ttl_seconds,
  };
}

function preconditionFailed(row: WorkItemRow): ApiError {
  return new ApiError(
    412,
    "invalid_request_error",
    "expected_last_heartbeat does not match the work item's last heartbeat: the lease was lost",
    {
      error_code: "heartbeat_precondition_failed",
      current_state: {
        last_heartbeat: row.last_heartbeat,
        lease_extended: false,
        state: row.state,
        ttl_seconds: row.ttl_seconds,
      },
    },
  );
}

/**
 * Lease CAS (§2.4). `expected` is `NO_HEARTBEAT` for "no beat stored yet" or
 * the previous response's `last_heartbeat`, compared verbatim; omitted means
 * "the value I last read". Each stored beat is strictly later than the one
 * before it, so a stale echo can never match again, even within one ms.
 * Items that are stopping or stopped only report their state.
 */
export async function heartbeatWork(
  deps: ApiDeps,
  environmentId: string,
  workId: string,
  opts: { expected: string | undefined; desiredTtlSeconds: number | undefined },
): Promise<HeartbeatResponse> {
  const { db } = deps.storage;
  const current = await loadWorkRow(db, environmentId, workId);
  if (current.state === "stopping" || current.state === "stopped") return reportOnly(current);
  const expected = opts.expected === undefined ? (current.last_heartbeat ?? NO_HEARTBEAT) : opts.expected;
  const nowMs = deps.clock.now();
  const previousMs = expected === NO_HEARTBEAT ? Number.NaN : Date.parse(expected);
  const beatMs = Number.isFinite(previousMs) ? Math.max(nowMs, previousMs + 1) : nowMs;
  const beat = toIso(beatMs);
  const ttl = Math.max(1, Math.min(opts.desiredTtlSeconds ?? deps.workTtlSeconds, deps.workTtlSeconds));
  const row = await db
    .updateTable("work_items")
    .set({
      state: "active",
      started_at: sql<string>`coalesce(started_at, ${beat})`,
      latest_heartbeat_at: beat,
      last_heartbeat: beat,
      lease_expires_at: toIso(nowMs + ttl * 1000),
      ttl_seconds: ttl,
    })
    .where("id", "=", workId)
    .where("environment_id", "=", environmentId)
    .where("state", "in", ["queued", "starting", "active"])
    .where((eb) => (expected === NO_HEARTBEAT ? eb("last_heartbeat", "is", null) : eb("last_heartbeat", "=", expected)))
    .returningAll()
    .executeTakeFirst();
  if (row) return { type: "work_heartbeat", last_heartbeat: beat, lease_extended: true, state: "active", ttl_seconds: ttl };
  const now = await loadWorkRow(db, environmentId, workId);
  if (now.state === "stopping" || now.state === "stopped") return reportOnly(now);
  throw preconditionFailed(now);
}

/**
 * `force:false` → stopping (the holder learns it from its next heartbeat);
 * `force:true` → stopped, and in the same transaction a new item when the
 * session has input this item did not serve (see `requeueUnserved`).
 */
export async function stopWork(deps: ApiDeps, environmentId: string, workId: string, force: boolean): Promise<WorkItemRow> {
  if (!force) return stopWorkIn(deps.storage.db, deps, environmentId, workId, false);
  const { row, requeued } = await deps.storage.db.transaction().execute(async (trx) => {
    const stopped = await stopWorkIn(trx, deps, environmentId, workId, true);
    return { row: stopped, requeued: await requeueUnserved(trx, deps, stopped) };
  });
  if (requeued) {
    await notifyWork(deps, requeued.environmentId).catch((err: Error) => {
      deps.logger.warn({ err: err.message, environment_id: requeued.environmentId }, "work notification failed");
    });
  }
  return row;
}

async function stopWorkIn(db: Db, deps: ApiDeps, environmentId: string, workId: string, force: boolean): Promise<WorkItemRow> {
  const now = toIso(deps.clock.now());
  const row = force
    ? await db
        .updateTable("work_items")
        .set({
          state: "stopped",
          stopped_at: now,
          stop_requested_at: sql<string>`coalesce(stop_requested_at, ${now})`,
          lease_expires_at: null,
        })
        .where("id", "=", workId)
        .where("environment_id", "=", environmentId)
        .where("state", "!=", "stopped")
        .returningAll()
        .executeTakeFirst()
    : await db
        .updateTable("work_items")
        .set({ state: "stopping", stop_requested_at: now })
        .where("id", "=", workId)
        .where("environment_id", "=", environmentId)
        .where("state", "in", ["queued", "starting", "active"])
        .returningAll()
        .executeTakeFirst();
  if (row) return row;
  const current = await loadWorkRow(db, environmentId, workId);
  if (current.state === "stopped") throw permanentConflict(`work item ${JSON.stringify(workId)} is already stopped`);
  return current; // already stopping: a repeated graceful stop changes nothing
}

/**
 * Applies a metadata patch (API key update). Conditional on the metadata that
 * was read, so two concurrent patches cannot silently drop each other's keys.
 */
export async function patchWorkMetadata(
  deps: ApiDeps,
  environmentId: string,
  workId: string,
  patch: (current: Record<string, string>) => Record<string, string>,
): Promise<WorkItemRow> {
  const { db } = deps.storage;
  for (let attempt = 0; attempt < 5; attempt++) {
    const current = await loadWorkRow(db, environmentId, workId);
    const next = JSON.stringify(patch(JSON.parse(current.metadata)));
    const row = await db
      .updateTable("work_items")
      .set({ metadata: next })
      .where("id", "=", workId)
      .where("metadata", "=", current.metadata)
      .returningAll()
      .executeTakeFirst();
    if (row) return row;
  }
  throw new ApiError(409, "conflict_error", "work item metadata was modified concurrently; retry");
}

export interface QueueStats {
  type: "work_queue_stats";
  depth: number;
  pending: number;
  oldest_queued_at: string | null;
  workers_polling: number | null;
  /**
   * OpenMA extension: the environment's session sandboxes per driver, from their owner records (owned = a live
   * server holds it, idle = past its idle deadline, orphaned = could not be killed yet, pooled = of those owned, waiting
   * in a warm pool for a session, docs/warm-pools.md). Empty when none.
   */
  sandboxes: { driver: string; owned: number; idle: number; orphaned: number; pooled: number }[];
}

/**
 * `depth`: items a default poll would hand out now (waiting, including
 * abandoned hand-outs and expired leases); `pending`: handed out within the
 * default reclaim window and not yet acked. Sweeps abandoned stopping items
 * first (as a default poll would), so `depth` counts the work they owe.
 */
export async function queueStats(deps: ApiDeps, environmentId: string): Promise<QueueStats> {
  const { db } = deps.storage;
  const nowMs = deps.clock.now();
  const now = toIso(nowMs);
  const cutoff = toIso(nowMs - DEFAULT_RECLAIM_MS);
  await sweepAbandonedStopping(deps, environmentId, nowMs, DEFAULT_RECLAIM_MS);
  const waiting = await db
    .selectFrom("work_items")
    .select((eb) => [eb.fn.countAll<number>().as("n"), eb.fn.min<string | null>("created_at").as("oldest")])
    .where("environment_id", "=", environmentId)
    .where((eb) => claimable(eb, now, cutoff))
    .executeTakeFirstOrThrow();
  const pending = await db
    .selectFrom("work_items")
    .select((eb) => eb.fn.countAll<number>().as("n"))
    .where("environment_id", "=", environmentId)
    .where("state", "=", "queued")
    .where("polled_at", ">", cutoff)
    .executeTakeFirstOrThrow();
  const workers = await db
    .selectFrom("work_pollers")
    .select((eb) => eb.fn.countAll<number>().as("n"))
    .where("environment_id", "=", environmentId)
    .where("last_seen_at", ">=", toIso(nowMs - WORKERS_POLLING_WINDOW_MS))
    .executeTakeFirstOrThrow();
  const owners = new SqlSandboxOwnership(db, { clock: deps.clock });
  const sandboxes = await owners.stats({ deployment: await deploymentId(db), environmentId, signal: new AbortController().signal });
  return {
    type: "work_queue_stats",
    depth: Number(waiting.n),
    pending: Number(pending.n),
    oldest_queued_at: waiting.oldest ?? null,
    workers_polling: Number(workers.n),
    sandboxes,
  };
}
