/**
 * The host's own vocabulary: the harness runner port, timings, the named
 * steps of the transaction and the result union a run returns. Every
 * expected outcome (admission refused, fence held elsewhere, lease lost, a
 * port failing) is a value of `RuntimeRunResult`; `run()` does not throw.
 */
import type {
  ActivePublication,
  FenceIdentity,
  HarnessDriverType,
  ManagedRuntimeAdmissionError,
  ManagedRuntimePlan,
  ManagedRuntimeProfile,
  ManagedSandboxLease,
  ManagedSandboxPort,
  OutputViolation,
  RuntimeCheckpointPort,
  RuntimeOrphanPort,
  RuntimeResourceFencePort,
  RuntimeResourceScope,
  SessionOutputBinding,
  SessionOutputPort,
  WorkspaceBinding,
  WorkspaceCandidateRef,
  WorkspacePersistencePort,
} from "@openma/contract";
import type { Scheduler } from "@openma/time";

/** Outcome of a live turn-boundary commit requested by the running harness. */
export type TurnCommitResult =
  /** `revision` is `null` when there was nothing to publish (ephemeral workspace, outputs disabled). */
  | { type: "committed"; revision: number | null; replayed: boolean }
  | { type: "rejected"; reason: "invalid_turn_id" | "not_running" | "lease_lost" }
  /** The candidates could not be written or published; the run goes on and the previous revision stays active. */
  | { type: "failed"; error: string };

export interface HarnessRunInput {
  scope: RuntimeResourceScope;
  fence: FenceIdentity;
  plan: ManagedRuntimePlan;
  sandbox: ManagedSandboxLease;
  workspace: WorkspaceBinding;
  outputs: SessionOutputBinding | null;
  /** The candidate `/workspace` was restored from (`null`: empty workspace). */
  restored: WorkspaceCandidateRef | null;
  /** 1 for the first placement of this generation; higher after a cold restart, when Session events must be replayed. */
  attempt: number;
  /** Checkpoints and publishes under the host's fence; the harness never sees the token. */
  commitTurn(turnId: string): Promise<TurnCommitResult>;
  /** Aborted on lease loss, sandbox loss or cancellation: stop cooperatively, the host hard-kills after a grace period. */
  signal: AbortSignal;
}

export type HarnessRunResult = { type: "completed" } | { type: "failed"; error: string } | { type: "sandbox_lost"; reason: string };

/**
 * Drives one harness placement inside acquired compute. The ama_worker and
 * openma_supervised drivers implement it; the host only needs "run until
 * done" and "stop writing so the workspace can be checkpointed".
 */
export interface HarnessRunner {
  run(input: HarnessRunInput): Promise<HarnessRunResult>;
  /** Quiesces every writer (ACP writer, tool processes) before the final checkpoint. */
  drain(input: {
    scope: RuntimeResourceScope;
    fence: FenceIdentity;
    sandbox: ManagedSandboxLease;
    signal: AbortSignal;
  }): Promise<{ type: "drained" } | { type: "failed"; error: string }>;
}

export interface HostTimings {
  /** Fence lease length requested on acquire and on every renewal. */
  leaseTtlMs: number;
  renewEveryMs: number;
  /** The fence counts as lost this long before its recorded expiry (clock skew, slow statements). */
  safetyMarginMs: number;
  renewTimeoutMs: number;
  sandboxHeartbeatMs: number;
  /** After a cooperative abort, how long the harness may take to stop before compute is hard-killed. */
  abortGraceMs: number;
  /** Drain bound for `ama_worker` (supervised drivers carry their own `drainTimeoutMs`). */
  drainTimeoutMs: number;
  /**
   * Bound on each compute-ending cleanup call (`suspend`, `terminate`). A call
   * still pending then is abandoned as failed: a hung kill becomes an orphan
   * record for the reaper instead of holding the run's cleanup forever.
   */
  terminateTimeoutMs: number;
  /** Publish attempts with the same idempotency key before the outcome is reported as unknown. */
  publishAttempts: number;
  publishRetryDelayMs: number;
  /** Cold acquire + restore attempts after the sandbox disappears. */
  maxColdRestarts: number;
  /** Publication history read when the newest workspace candidate fails verification. */
  fallbackDepth: number;
}

export const DEFAULT_HOST_TIMINGS: HostTimings = {
  leaseTtlMs: 90_000,
  renewEveryMs: 30_000,
  safetyMarginMs: 10_000,
  renewTimeoutMs: 10_000,
  sandboxHeartbeatMs: 30_000,
  abortGraceMs: 15_000,
  drainTimeoutMs: 60_000,
  terminateTimeoutMs: 60_000,
  publishAttempts: 3,
  publishRetryDelayMs: 1_000,
  maxColdRestarts: 1,
  fallbackDepth: 50,
};

/**
 * Sandboxes started ahead of their sessions (a warm pool, ADR 0032). The host
 * asks only while it holds the generation's fence, after `/workspace` and the
 * outputs are materialized, and only for a run's first placement: the port
 * binds one started sandbox to this scope and these bindings (its owner
 * record moves to the session; the restored workspace becomes what the
 * sandbox sees at `/workspace`) or answers a miss, and the host acquires
 * cold. A claimed sandbox is this generation's compute: hard-killed at the
 * end like any other, never suspended and never returned.
 */
export interface WarmComputePort {
  claim(input: {
    scope: RuntimeResourceScope;
    fence: FenceIdentity;
    plan: ManagedRuntimePlan;
    workspace: WorkspaceBinding;
    outputs: SessionOutputBinding | null;
    signal: AbortSignal;
  }): Promise<WarmComputeClaim>;
}

export type WarmComputeClaim = { type: "claimed"; compute: WarmCompute } | { type: "miss"; reason: string };

export interface WarmCompute {
  lease: ManagedSandboxLease;
  /**
   * After the run's hard kill: `terminated` ends the sandbox's owner record; `not_terminated` (the kill failed and an
   * orphan record was written) lets it lapse for a reaper. Never throws.
   */
  settle(end: "terminated" | "not_terminated"): Promise<void>;
}

export interface ManagedRuntimeHostDeps {
  fences: RuntimeResourceFencePort;
  orphans: RuntimeOrphanPort;
  sandbox: ManagedSandboxPort;
  /** Sandboxes started ahead; absent: every placement acquires cold. */
  warm?: WarmComputePort;
  workspace: WorkspacePersistencePort;
  outputs?: SessionOutputPort;
  runtimeCheckpoint?: RuntimeCheckpointPort;
  harness: HarnessRunner;
  /** Driver lanes the harness runner implements. */
  lanes: readonly HarnessDriverType[];
  scheduler: Scheduler;
  /** Unique per call: a fence owner id names one attempt, never a process. */
  newOwnerId: () => string;
  timings?: Partial<HostTimings>;
}

export interface RunInput {
  scope: RuntimeResourceScope;
  profile: ManagedRuntimeProfile;
  /** Cancels the run (Work stopped): cooperative abort, hard kill, nothing published after it. */
  signal?: AbortSignal;
}

export type StepName =
  | "plan"
  | "acquire_fence"
  | "materialize_workspace"
  | "prepare_outputs"
  | "restore_runtime_checkpoint"
  | "acquire_compute"
  | "attach"
  | "run_harness"
  | "sandbox_heartbeat"
  | "drain"
  | "checkpoint_workspace"
  | "checkpoint_runtime"
  | "collect_outputs"
  | "finalize_outputs"
  | "publish"
  | "commit_turn"
  | "suspend_compute"
  | "terminate_compute"
  | "enqueue_orphan"
  | "discard_runtime_checkpoint"
  | "release_outputs"
  | "abort_outputs"
  | "release_workspace"
  | "release_fence";

export type StepStatus = "ok" | "failed" | "rejected" | "fallback" | "retried" | "skipped" | "lost" | "lease_lost" | "cancelled";

export interface TraceEntry {
  step: StepName;
  status: StepStatus;
  /** Short, token-free explanation (ids, reasons, error text). */
  detail?: string;
}

/** What became of the compute this run acquired, after cleanup. */
export type ComputeEnd =
  | "none"
  | "terminated"
  | "suspended"
  /** Hard kill failed; a token-free orphan record was persisted for the reaper. */
  | "orphaned"
  /** Hard kill failed and the orphan record could not be written either: an operator must look. */
  | "leaked";

export interface CleanupSummary {
  compute: ComputeEnd;
  orphanIds: string[];
}

export type RuntimeRunResult =
  | {
      type: "completed";
      generation: number;
      /** `null` when there was nothing to publish (ephemeral workspace, outputs disabled). */
      publication: ActivePublication | null;
      rejectedOutputs: OutputViolation[];
      cleanup: CleanupSummary;
      trace: TraceEntry[];
    }
  | { type: "admission_error"; error: ManagedRuntimeAdmissionError; trace: TraceEntry[] }
  | { type: "conflict"; holderExpiresAt: number; trace: TraceEntry[] }
  /** The fence was lost (or found stale): nothing more was published, compute was hard-killed. */
  | { type: "lease_lost"; generation: number; stage: StepName; reason: string; cleanup: CleanupSummary; trace: TraceEntry[] }
  | { type: "cancelled"; generation: number; stage: StepName; cleanup: CleanupSummary; trace: TraceEntry[] }
  /** Active pointers are unchanged by the final stage (earlier turn commits stay published). */
  | { type: "failed"; generation: number | null; stage: StepName; error: string; cleanup: CleanupSummary; trace: TraceEntry[] };
