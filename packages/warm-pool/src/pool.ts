/**
 * WarmPool: sandboxes of one environment started ahead of their sessions,
 * over any ManagedSandboxPort (docs/warm-pools.md, ADR 0027).
 *
 * A pooled sandbox is started before its session is known, so it is owned by
 * the pool under a pool scope (`{ environmentId, sessionId: "warm-pool:<slot>" }`),
 * with an owner record claimed before the driver is asked (a crash leaks
 * nothing: the record's lease lapses and the reaper ends the sandbox). At
 * claim the pool hands the sandbox out exactly once and forgets it; the
 * claimer rebinds the owner record to the session and from then on treats
 * it as the session's own sandbox, terminating it when the session is done.
 * There is no way to give a sandbox back: one that served a session is never
 * handed to another.
 *
 * A claim whose profile (driver, plan, and what else shapes the sandbox:
 * image, limits, network) differs from the pool's is refused without taking
 * anything: the caller starts a sandbox cold instead.
 *
 * Refills run as soon as a sandbox leaves the pool; a failed start is retried
 * after `retryMs` on the injected scheduler, so tests drive time by hand.
 */
import {
  canonicalJson,
  type FenceIdentity,
  type FlatMetadata,
  type ManagedRuntimePlan,
  type ManagedSandboxLease,
  type ManagedSandboxPort,
  type RuntimeResourceScope,
  type SandboxStopReason,
  type SessionOutputBinding,
  WARM_POOL_SESSION_PREFIX,
  type WorkspaceBinding,
} from "@openma/contract";
import type { Scheduler } from "@openma/time";

/** Session ids of pool scopes start with this; real session ids never contain a colon. */
export const POOL_SESSION_PREFIX = WARM_POOL_SESSION_PREFIX;

export function poolScope(environmentId: string, slotId: string): RuntimeResourceScope {
  return { environmentId, sessionId: `${POOL_SESSION_PREFIX}${slotId}` };
}

export function isPoolScope(scope: RuntimeResourceScope): boolean {
  return scope.sessionId.startsWith(POOL_SESSION_PREFIX);
}

/** Everything that shapes a sandbox; two sandboxes with equal profiles are interchangeable before use. */
export interface WarmProfile {
  provider: string;
  plan: ManagedRuntimePlan;
  /** The rest: image, limits, network, extra binds (never secrets). */
  variant: FlatMetadata;
}

export function warmProfileKey(profile: WarmProfile): string {
  return canonicalJson(profile);
}

/** The owner record of one pooled sandbox (the serve lane's OwnerHandle is one). */
export interface PoolOwner {
  readonly id: string;
  /** Records the driver's lease; false when the record was taken meanwhile (a reaper owns the sandbox then). */
  attach(lease: ManagedSandboxLease): Promise<boolean>;
  /** The sandbox is gone: delete the record. */
  release(): Promise<void>;
  /** The sandbox could not be killed: let the record lapse now, for a reaper. */
  abandon(): Promise<void>;
}

/** Where a pooled sandbox's workspace and outputs are bound until a session claims it. */
export interface PoolSlot {
  workspace: WorkspaceBinding;
  outputs: SessionOutputBinding | null;
}

export interface WarmSandbox<O extends PoolOwner> {
  slotId: string;
  /** The pool scope it was acquired under. */
  scope: RuntimeResourceScope;
  fence: FenceIdentity;
  lease: ManagedSandboxLease;
  owner: O;
  slot: PoolSlot;
  createdAt: number;
}

export type WarmClaim<O extends PoolOwner> = { type: "warm"; sandbox: WarmSandbox<O> } | { type: "miss"; reason: string };

export interface WarmPoolStats {
  environmentId: string;
  target: number;
  /** Started and waiting for a session. */
  ready: number;
  /** Being started now. */
  starting: number;
  /** Handed to sessions since the pool opened. */
  claimed: number;
  /** Started since the pool opened. */
  created: number;
  /** Terminated without serving (dead at claim, or drained). */
  discarded: number;
  /** Starts that failed. */
  failed: number;
  draining: boolean;
}

export interface WarmPoolOptions<O extends PoolOwner> {
  driver: ManagedSandboxPort;
  environmentId: string;
  /** Sandboxes kept ready (0 keeps none). */
  target: number;
  profile: WarmProfile;
  scheduler: Scheduler;
  /** Claims the owner record of a sandbox about to start, under its pool scope. */
  claimOwner(scope: RuntimeResourceScope): Promise<O>;
  /** The bindings a new slot's sandbox starts with (host directories for local drivers). */
  slot(slotId: string): Promise<PoolSlot>;
  /** A never-claimed slot's sandbox is gone: its bindings may go too. */
  discardSlot?(slotId: string): Promise<void>;
  newSlotId(): string;
  /** Wait after a failed start before trying again (default 5 s). */
  retryMs?: number;
  /** Bound on each driver call (default 60 s). */
  callTimeoutMs?: number;
  onError?(err: unknown, context: { environmentId: string; slotId: string; step: string }): void;
}

/** Far enough that the synthetic fence of a pool (no publication authority) never lapses. */
const POOL_FENCE_TTL_MS = 3650 * 86_400_000;

export class WarmPool<O extends PoolOwner> {
  readonly #options: WarmPoolOptions<O>;
  readonly #key: string;
  readonly #ready: WarmSandbox<O>[] = [];
  readonly #inflight = new Set<Promise<void>>();
  /** Aborts the retry wait on drain; in-flight starts are awaited, not interrupted, so none is left half made. */
  readonly #stop = new AbortController();
  #starting = 0;
  #retrying = false;
  #counts = { claimed: 0, created: 0, discarded: 0, failed: 0 };

  constructor(options: WarmPoolOptions<O>) {
    if (!Number.isSafeInteger(options.target) || options.target < 0) throw new RangeError("target: must be a non-negative integer");
    this.#options = options;
    this.#key = warmProfileKey(options.profile);
  }

  get environmentId(): string {
    return this.#options.environmentId;
  }

  /** Starts filling up to the target. */
  start(): void {
    this.#fill();
  }

  /**
   * Takes one ready sandbox whose profile is `profile`, or says why not.
   * The sandbox leaves the pool before anything is awaited, so two claims
   * never get the same one; a dead one is discarded and the next tried.
   */
  async claim(input: { profile: WarmProfile; signal: AbortSignal }): Promise<WarmClaim<O>> {
    if (this.#stop.signal.aborted) return { type: "miss", reason: "the pool is draining" };
    if (warmProfileKey(input.profile) !== this.#key)
      return { type: "miss", reason: "the session's sandbox profile differs from the pool's" };
    for (;;) {
      const sandbox = this.#ready.shift();
      if (sandbox === undefined) return { type: "miss", reason: "no warm sandbox is ready" };
      this.#fill();
      const beat = await this.#options.driver
        .heartbeat({ scope: sandbox.scope, fence: sandbox.fence, lease: sandbox.lease, signal: input.signal })
        .catch((err: unknown) => ({ type: "lost" as const, reason: String(err) }));
      if (beat.type === "alive") {
        this.#counts.claimed += 1;
        return { type: "warm", sandbox };
      }
      this.#track(this.#discard(sandbox, "failed"));
    }
  }

  stats(): WarmPoolStats {
    return {
      environmentId: this.#options.environmentId,
      target: this.#options.target,
      ready: this.#ready.length,
      starting: this.#starting,
      ...this.#counts,
      draining: this.#stop.signal.aborted,
    };
  }

  /** Stops refilling, waits for starts in flight and terminates every sandbox still in the pool. */
  async drain(): Promise<void> {
    this.#stop.abort(new Error("warm pool drained"));
    while (this.#inflight.size > 0) await Promise.all([...this.#inflight]);
    const left = this.#ready.splice(0);
    await Promise.all(left.map((sandbox) => this.#discard(sandbox, "cancelled")));
  }

  #fill(): void {
    while (!this.#stop.signal.aborted && !this.#retrying && this.#ready.length + this.#starting < this.#options.target) {
      this.#starting += 1;
      this.#track(
        this.#startOne().finally(() => {
          this.#starting -= 1;
          this.#fill();
        }),
      );
    }
  }

  #track(work: Promise<void>): void {
    const tracked = work.catch((err: unknown) => this.#report(err, "?", "pool"));
    this.#inflight.add(tracked);
    void tracked.finally(() => this.#inflight.delete(tracked));
  }

  async #startOne(): Promise<void> {
    const { driver, environmentId, profile, scheduler } = this.#options;
    const slotId = this.#options.newSlotId();
    const scope = poolScope(environmentId, slotId);
    let owner: O;
    try {
      // The record first: no pooled sandbox ever exists without an owner record naming it.
      owner = await this.#options.claimOwner(scope);
    } catch (err) {
      return this.#failed(err, slotId, "owner");
    }
    const fence: FenceIdentity = { scope, ownerId: owner.id, generation: 1, expiresAt: scheduler.now() + POOL_FENCE_TTL_MS };
    let slot: PoolSlot | null = null;
    let result: Awaited<ReturnType<ManagedSandboxPort["acquire"]>>;
    try {
      slot = await this.#options.slot(slotId);
      result = await driver.acquire({
        scope,
        fence,
        plan: profile.plan,
        workspace: slot.workspace,
        outputs: slot.outputs,
        idempotencyKey: owner.id,
        signal: AbortSignal.timeout(this.#options.callTimeoutMs ?? 60_000),
      });
    } catch (err) {
      result = { type: "unavailable", reason: String(err), retryable: true };
    }
    if (result.type !== "acquired" || slot === null) {
      // Nothing was started (or a half-start is unowned now, which the reaper ends): the record goes.
      await owner.release().catch((err: unknown) => this.#report(err, slotId, "release"));
      await this.#options.discardSlot?.(slotId).catch((err: unknown) => this.#report(err, slotId, "slot"));
      return this.#failed(result.type === "unavailable" ? new Error(result.reason) : new Error("no slot"), slotId, "acquire");
    }
    const sandbox: WarmSandbox<O> = { slotId, scope, fence, lease: result.lease, owner, slot, createdAt: scheduler.now() };
    this.#counts.created += 1;
    if (!(await owner.attach(result.lease).catch(() => false))) {
      // The record was taken while the sandbox started: the sandbox is not the pool's to hand out.
      await this.#discard(sandbox, "failed");
      return this.#failed(new Error("the owner record was taken while the sandbox started"), slotId, "attach");
    }
    if (this.#stop.signal.aborted) return this.#discard(sandbox, "cancelled");
    this.#ready.push(sandbox);
  }

  #failed(err: unknown, slotId: string, step: string): void {
    this.#counts.failed += 1;
    this.#report(err, slotId, step);
    if (this.#retrying || this.#stop.signal.aborted) return;
    this.#retrying = true;
    this.#options.scheduler.sleep(this.#options.retryMs ?? 5_000, this.#stop.signal).then(
      () => {
        this.#retrying = false;
        this.#fill();
      },
      () => {}, // drained while waiting
    );
  }

  /** Terminates a sandbox that never served; a failed kill leaves its record to lapse for the reaper. */
  async #discard(sandbox: WarmSandbox<O>, reason: SandboxStopReason): Promise<void> {
    const { driver } = this.#options;
    const result = await driver
      .terminate({
        scope: sandbox.scope,
        fence: sandbox.fence,
        lease: sandbox.lease,
        reason,
        signal: AbortSignal.timeout(this.#options.callTimeoutMs ?? 60_000),
      })
      .catch((err: unknown) => ({ type: "failed" as const, error: String(err) }));
    this.#counts.discarded += 1;
    if (result.type === "failed") {
      this.#report(new Error(result.error), sandbox.slotId, "terminate");
      await sandbox.owner.abandon().catch((err: unknown) => this.#report(err, sandbox.slotId, "abandon"));
      return;
    }
    await sandbox.owner.release().catch((err: unknown) => this.#report(err, sandbox.slotId, "release"));
    await this.#options.discardSlot?.(sandbox.slotId).catch((err: unknown) => this.#report(err, sandbox.slotId, "slot"));
  }

  #report(err: unknown, slotId: string, step: string): void {
    this.#options.onError?.(err, { environmentId: this.#options.environmentId, slotId, step });
  }
}
