/**
 * The runtime host's one scheduling authority: the official Environment
 * Work claim. `concurrency` official WorkPollers long-poll the self-hosted
 * environment with the environment key; each claimed item becomes one
 * Managed Runtime Host run for its session (fence, restore, sandbox,
 * worker, publish, terminate). The poller does not stop items itself
 * (`autoStop: false`): the worker inside the sandbox force-stops its item,
 * and an item whose run failed is left to be reclaimed and retried. A
 * session's runs here go one after the other, with a bounded wait
 * (`SessionRuns`).
 */
import Anthropic from "@anthropic-ai/sdk";
import { WorkPoller } from "@anthropic-ai/sdk/lib/environments/index";
import { sessionsTokenFromSecret } from "@anthropic-ai/sdk/lib/environments/worker";
import type { BetaSelfHostedWork } from "@anthropic-ai/sdk/resources/beta/environments/work";
import { type ManagedRuntimeProfile, type RuntimeResourceScope, runtimeScopeKey } from "@openma/contract";
import type { ManagedRuntimeHost, RuntimeRunResult } from "@openma/host";
import { inTraceOf } from "@openma/host/spans";
import type { Scheduler } from "@openma/time";
import type { WorkTicket } from "./ama-worker-runner.ts";
import { DEFAULT_RETRY_BACKOFF, RetryBackoff, type RetryBackoffOptions } from "./retry-backoff.ts";

export interface RuntimeHostLogger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/** The claimed item of each running scope: the runner reads it, the loop owns it. */
export class TicketBoard {
  readonly #tickets = new Map<string, WorkTicket>();
  get(scope: RuntimeResourceScope): WorkTicket | undefined {
    return this.#tickets.get(runtimeScopeKey(scope));
  }
  set(ticket: WorkTicket): void {
    this.#tickets.set(runtimeScopeKey(scopeOf(ticket)), ticket);
  }
  delete(ticket: WorkTicket): void {
    const key = runtimeScopeKey(scopeOf(ticket));
    if (this.#tickets.get(key) === ticket) this.#tickets.delete(key);
  }
  get size(): number {
    return this.#tickets.size;
  }
}

const scopeOf = (t: WorkTicket): RuntimeResourceScope => ({ environmentId: t.environmentId, sessionId: t.sessionId });

export interface WorkLoopOptions {
  apiUrl: string;
  environmentId: string;
  /** The environment's standing credential: polls and claims only; it never enters a sandbox. */
  environmentKey: string;
  host: Pick<ManagedRuntimeHost, "run">;
  profile: ManagedRuntimeProfile;
  tickets: TicketBoard;
  scheduler: Scheduler;
  logger: RuntimeHostLogger;
  concurrency: number;
  workerId: string;
  /** A fence still held by a crashed owner is waited out when it expires within this bound. */
  maxConflictWaitMs?: number;
  /** How long a session's new Work waits for the session's earlier run here to end (default 30 s; see SessionRuns). */
  maxEarlierRunWaitMs?: number;
  /** Every finished run (tests and metrics). */
  onResult?: (ticket: WorkTicket, result: RuntimeRunResult) => void;
  /** Delay before re-running a session whose runs here failed (default: 1 s doubling to 60 s). */
  retryBackoff?: RetryBackoffOptions;
}

export class WorkLoop {
  readonly #options: WorkLoopOptions;
  readonly #stop = new AbortController();
  readonly #backoff: RetryBackoff;
  #loops: Promise<void>[] = [];
  readonly #sessions: SessionRuns;

  constructor(options: WorkLoopOptions) {
    this.#options = options;
    this.#backoff = new RetryBackoff(options.retryBackoff ?? DEFAULT_RETRY_BACKOFF);
    this.#sessions = new SessionRuns(options.scheduler, options.maxEarlierRunWaitMs ?? DEFAULT_MAX_EARLIER_RUN_WAIT_MS);
  }

  start(): void {
    if (this.#loops.length > 0) return;
    const o = this.#options;
    const client = new Anthropic({ baseURL: o.apiUrl, apiKey: null, authToken: o.environmentKey, maxRetries: 2 });
    for (let i = 0; i < o.concurrency; i++) this.#loops.push(this.#poll(client, `${o.workerId}-${i}`));
  }

  /** Stops claiming; runs in flight are cancelled (cooperative stop, then hard kill) and awaited. */
  async stop(): Promise<void> {
    this.#stop.abort();
    await Promise.all(this.#loops);
    this.#loops = [];
  }

  async #poll(client: Anthropic, workerId: string): Promise<void> {
    const o = this.#options;
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      try {
        const poller = new WorkPoller({
          client,
          environmentId: o.environmentId,
          environmentKey: o.environmentKey,
          workerId,
          autoStop: false,
          signal,
        });
        for await (const work of poller) await this.serve(work);
      } catch (err) {
        if (signal.aborted) return;
        o.logger.warn({ err: errorText(err) }, "work polling failed; retrying");
        await o.scheduler.sleep(1_000, signal).catch(() => {});
      }
    }
  }

  /** Runs one claimed item to its end (the pollers call it; tests call it with an item of their own). */
  async serve(work: BetaSelfHostedWork): Promise<void> {
    const o = this.#options;
    if (work.data.type !== "session") {
      o.logger.warn({ work_id: work.id, type: work.data.type }, "ignoring a work item that is not a session");
      return;
    }
    const log = { work_id: work.id, session_id: work.data.id };
    const sessionsToken = sessionsTokenFromSecret(work.secret);
    if (!work.secret || sessionsToken === null) {
      // Without a per-item token the worker would need the environment key inside the sandbox: refused.
      o.logger.error(log, "work item carries no sessions token; not running it in a sandbox");
      return;
    }
    const ticket: WorkTicket = {
      workId: work.id,
      environmentId: work.environment_id,
      sessionId: work.data.id,
      secret: work.secret,
      sessionsToken,
    };
    const delay = this.#backoff.delayFor(ticket.sessionId);
    if (delay > 0) {
      o.logger.info({ ...log, delay_ms: delay }, "earlier runs of this session failed here; waiting before the next");
      await o.scheduler.sleep(delay, this.#stop.signal).catch(() => {});
      // Stopping: the item is left to be reclaimed.
      if (this.#stop.signal.aborted) return;
    }
    const result = await this.#sessions.run(
      ticket.sessionId,
      async () => {
        // On the board only from its start: until then the earlier run of the session (a cold restart
        // re-reads it) keeps its own item.
        o.tickets.set(ticket);
        try {
          // The run's `openma.host.run` continues the trace of the request that queued the item.
          return await inTraceOf(queuedTrace(work), () => this.#runWaitingOutStaleFence(ticket));
        } finally {
          o.tickets.delete(ticket);
        }
      },
      {
        signal: this.#stop.signal,
        onWait: (waitMs) => o.logger.info({ ...log, max_wait_ms: waitMs }, "waiting for the session's earlier run here to end"),
        onOverdue: (waitedMs) =>
          o.logger.warn({ ...log, waited_ms: waitedMs }, "the session's earlier run here has not ended; starting anyway"),
      },
    );
    // Stopping while it waited: the item is left to be reclaimed.
    if (result === null) return;
    // Only the host's own failures count; a lost lease, a cancellation or a held fence are someone else's doing.
    if (result.type === "completed") this.#backoff.succeeded(ticket.sessionId);
    else if (result.type === "failed" || result.type === "admission_error") this.#backoff.failed(ticket.sessionId);
    o.onResult?.(ticket, result);
    const summary = { ...log, result: result.type, ...("generation" in result ? { generation: result.generation } : {}) };
    if (result.type === "completed") o.logger.info({ ...summary, revision: result.publication?.revision ?? null }, "session run completed");
    else if (result.type === "admission_error")
      o.logger.error({ ...summary, error: result.error.message }, "the runtime profile cannot be met");
    else o.logger.warn({ ...summary, ...("error" in result ? { error: result.error } : {}) }, "session run ended early");
  }

  async #runWaitingOutStaleFence(ticket: WorkTicket): Promise<RuntimeRunResult> {
    const o = this.#options;
    const scope = scopeOf(ticket);
    return runWaitingOutStaleFence((signal) => o.host.run({ scope, profile: o.profile, signal }), o.scheduler, {
      maxConflictWaitMs: o.maxConflictWaitMs ?? DEFAULT_MAX_CONFLICT_WAIT_MS,
      signal: this.#stop.signal,
      onWait: (waitMs) => o.logger.info({ session_id: ticket.sessionId, wait_ms: waitMs }, "waiting out a stale fence"),
    });
  }
}

/** OpenMA's Work extension: the W3C trace context of the traced request that queued the item (absent otherwise). */
function queuedTrace(work: BetaSelfHostedWork): string | null {
  const value = (work as { traceparent?: unknown }).traceparent;
  return typeof value === "string" ? value : null;
}

/**
 * How long a session's new Work waits by default for the session's earlier run here. Nothing
 * heartbeats the new item meanwhile, so its first-heartbeat grace (90 s at the API) must still
 * cover this wait plus the run's own start (restore, compute, worker) and any failure backoff;
 * past that grace the item is reclaimed with a new secret and the wait was for nothing.
 */
export const DEFAULT_MAX_EARLIER_RUN_WAIT_MS = 30_000;

interface SessionRunHooks {
  /** Stops the waiting: the run is then not started (`null`). */
  signal: AbortSignal;
  /** There is an earlier run to wait for; called with the bound. */
  onWait?: (maxWaitMs: number) => void;
  /** The earlier run outlived the bound; the run starts anyway. */
  onOverdue?: (waitedMs: number) => void;
}

/**
 * A session's runs on this host, one after the other, with a bounded wait.
 *
 * A session's next Work can arrive while its previous run here is still
 * winding down (its worker exiting, the final checkpoint and publish, the
 * compute terminated, the fence not yet released): the API keeps one live
 * item per session, so the earlier item is stopped or was reclaimed by
 * then. Started at once, the new run would meet that live fence and end as
 * a `conflict`, its Work waiting a whole lease for the next reclaim. So it
 * waits for the earlier run, but only up to `maxWaitMs` of the scheduler's
 * time: an earlier run that never ends (a port call that hangs, an exit
 * that is never reported) must not hold the session's new Work with it.
 * The earlier run is never cancelled here (its final commit may carry the
 * last turn's workspace); the new run then starts and takes the fence
 * path: it acquires the fence if the earlier run no longer holds it, and
 * otherwise waits out or gives up on that fence as after a crash.
 */
class SessionRuns {
  /** Per session, the newest run here: settles when that run has ended (or was never started). */
  readonly #latest = new Map<string, Promise<void>>();

  constructor(
    private readonly scheduler: Scheduler,
    private readonly maxWaitMs: number,
  ) {}

  /** `start()` once the session's earlier run here has ended or the bound passed; `null` when `hooks.signal` stopped the wait. */
  async run<T>(sessionId: string, start: () => Promise<T>, hooks: SessionRunHooks): Promise<T | null> {
    const earlier = this.#latest.get(sessionId);
    let ended!: () => void;
    const mine = new Promise<void>((resolve) => {
      ended = resolve;
    });
    this.#latest.set(sessionId, mine);
    try {
      if (earlier !== undefined) {
        hooks.onWait?.(this.maxWaitMs);
        const startedAt = this.scheduler.now();
        const inTime = await this.#endsWithin(earlier, hooks.signal);
        if (hooks.signal.aborted) return null;
        if (!inTime) hooks.onOverdue?.(this.scheduler.now() - startedAt);
      }
      return await start();
    } finally {
      ended();
      if (this.#latest.get(sessionId) === mine) this.#latest.delete(sessionId);
    }
  }

  /** Whether `earlier` settles within the bound (false also when `signal` aborts first). */
  async #endsWithin(earlier: Promise<void>, signal: AbortSignal): Promise<boolean> {
    const settled = new AbortController();
    try {
      return await Promise.race([
        earlier.then(() => true),
        this.scheduler.sleep(this.maxWaitMs, AbortSignal.any([signal, settled.signal])).then(
          () => false,
          () => false,
        ),
      ]);
    } finally {
      // The bound's timer is not left behind once the earlier run ended in time.
      settled.abort();
    }
  }
}

/** How long a run waits for a crashed owner's fence by default. */
export const DEFAULT_MAX_CONFLICT_WAIT_MS = 60_000;
/** Retry just after the recorded expiry rather than exactly at it, so the old fence has surely lapsed. */
const FENCE_EXPIRY_MARGIN_MS = 250;

export interface StaleFenceWaitLimits {
  /** A fence expiring further out than this is not waited for: the `conflict` is returned. */
  maxConflictWaitMs: number;
  /** Stops the waiting (and is handed to every run). */
  signal: AbortSignal;
  /** Called before each wait with its length. */
  onWait?: (waitMs: number) => void;
}

/**
 * After a crash the previous owner's fence lives until its TTL; the item
 * was reclaimed sooner. Waiting for a fence that expires soon beats
 * dropping the item and waiting for another reclaim. Returns the first
 * result that is not a `conflict`, or the `conflict` that is not worth
 * waiting for (too far out, or the signal aborted).
 */
export async function runWaitingOutStaleFence(
  run: (signal: AbortSignal) => Promise<RuntimeRunResult>,
  scheduler: Scheduler,
  limits: StaleFenceWaitLimits,
): Promise<RuntimeRunResult> {
  for (;;) {
    const result = await run(limits.signal);
    if (result.type !== "conflict") return result;
    const wait = result.holderExpiresAt - scheduler.now() + FENCE_EXPIRY_MARGIN_MS;
    if (wait > limits.maxConflictWaitMs || limits.signal.aborted) return result;
    limits.onWait?.(wait);
    await scheduler.sleep(Math.max(0, wait), limits.signal).catch(() => {});
    // Stopped while waiting: the conflict stands; a run started now would only be cancelled.
    if (limits.signal.aborted) return result;
  }
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
