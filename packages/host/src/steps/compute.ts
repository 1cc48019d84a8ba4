/**
 * Steps `restore_runtime_checkpoint`, `acquire_compute`, `attach`, and the
 * compute half of cleanup (`suspend_compute` / `terminate_compute` /
 * `enqueue_orphan`).
 *
 * A sandbox from a warm pool (`deps.warm`, ADR 0032) is asked for only here,
 * under the held fence and after the workspace was restored, and is killed
 * at the end like any compute (never suspended, never returned).
 *
 * A previously published runtime checkpoint is only an optimization: it is
 * restored only if `assessRestorableCheckpoint` accepts it for this
 * generation, this harness build and the workspace candidate just restored,
 * and any rejection or failure falls back to a cold acquire.
 *
 * A hard kill that fails, or does not answer within `terminateTimeoutMs`,
 * leaves compute we can no longer account for, so a token-free orphan record
 * is persisted for the reaper; the fence token is passed as a value to
 * redact, never stored.
 */
import {
  assessRestorableCheckpoint,
  harnessIdentityOf,
  type ManagedSandboxLease,
  type OrphanReason,
  type RuntimeCheckpointExpectation,
  type RuntimeCheckpointKind,
  type SandboxStopReason,
  type SessionOutputBinding,
  type WorkspaceBinding,
  type WorkspaceCandidateRef,
} from "@openma/contract";
import { describeError, fail, ok, type RunContext, type RunEnd, type Step } from "../context.ts";
import { withinDeadline } from "../deadline.ts";
import type { WarmCompute } from "../types.ts";

export interface Placement {
  attempt: number;
  workspace: WorkspaceBinding;
  restored: WorkspaceCandidateRef | null;
  outputs: SessionOutputBinding | null;
  lease: ManagedSandboxLease;
}

export function checkpointExpectation(
  ctx: RunContext,
  kind: RuntimeCheckpointKind,
  workspaceCandidateId: string | null,
): RuntimeCheckpointExpectation {
  return {
    provider: ctx.plan.provider,
    sessionId: ctx.scope.sessionId,
    generation: ctx.generation,
    kind,
    harness: harnessIdentityOf(ctx.plan.driver),
    workspaceCandidateId,
  };
}

type Bindings = Omit<Placement, "lease">;

export async function acquireCompute(ctx: RunContext, bindings: Bindings): Promise<Step<ManagedSandboxLease>> {
  const restored = await restoreRuntimeCheckpoint(ctx, bindings.restored);
  if (restored !== null) return ok(restored);
  const warm = await claimWarm(ctx, bindings);
  if (warm !== null) return warm;
  return ctx.guard("acquire_compute", async () => {
    const result = await ctx.deps.sandbox.acquire({
      scope: ctx.scope,
      fence: ctx.identity,
      plan: ctx.plan,
      workspace: bindings.workspace,
      outputs: bindings.outputs,
      idempotencyKey: ctx.key("sandbox-acquire", bindings.attempt),
      signal: ctx.signal,
    });
    if (result.type === "unavailable") {
      ctx.trace.add("acquire_compute", "failed", `unavailable: ${result.reason}`);
      return fail({ type: "failed", stage: "acquire_compute", error: `no compute available: ${result.reason}` });
    }
    adoptCompute(ctx, result.lease);
    ctx.trace.add("acquire_compute", "ok", result.lease.runtimeId);
    return ok(result.lease);
  });
}

/** A restored runtime, or `null` to acquire cold. Never fails the run. */
async function restoreRuntimeCheckpoint(ctx: RunContext, workspace: WorkspaceCandidateRef | null): Promise<ManagedSandboxLease | null> {
  const planned = ctx.plan.runtimeCheckpoint;
  const ref = ctx.active?.runtimeCheckpoint ?? null;
  if (planned === null || ref === null) return null;
  const assessment = assessRestorableCheckpoint(ref, checkpointExpectation(ctx, planned.kind, workspace?.id ?? null));
  if (assessment.type === "rejected") {
    ctx.trace.add("restore_runtime_checkpoint", "rejected", `${ref.checkpointId}: ${assessment.reason}; cold start`);
    return null;
  }
  try {
    const restoring = ctx.deps
      .runtimeCheckpoint!.restore({ scope: ctx.scope, fence: ctx.identity, ref, signal: ctx.signal })
      .then((result) => {
        // Adopted even when the answer comes after the grace period: the (then closed) cleanup stack kills it at once.
        if (result.type === "restored") adoptCompute(ctx, result.lease);
        return result;
      });
    const result = await ctx.untilGrace(restoring);
    if (result.type === "restored") {
      ctx.trace.add("restore_runtime_checkpoint", "ok", `${ref.checkpointId} -> ${result.lease.runtimeId}`);
      return result.lease;
    }
    ctx.trace.add("restore_runtime_checkpoint", "failed", `${result.error}; cold start`);
  } catch (err) {
    ctx.trace.add("restore_runtime_checkpoint", "failed", `${describeError(err)}; cold start`);
  }
  return null;
}

/**
 * A sandbox from the warm pool, or `null` to acquire cold. Asked only under the held fence (the fence is the
 * transaction's first acquisition), for the first placement, and never for a retained runtime (a pooled sandbox is
 * killed at the end, not kept). A miss means a cold start; a claim that throws may have spoiled the bindings (a
 * half-moved workspace), so the run fails instead (it published nothing; the next generation restores afresh).
 */
async function claimWarm(ctx: RunContext, bindings: Bindings): Promise<Step<ManagedSandboxLease> | null> {
  const warm = ctx.deps.warm;
  if (warm === undefined || bindings.attempt !== 1 || ctx.plan.workspace.strategy === "retained_runtime") return null;
  // Interrupted: the cold path's guard reports it.
  if (ctx.interruption("acquire_compute") !== null) return null;
  try {
    const claiming = warm
      .claim({
        scope: ctx.scope,
        fence: ctx.identity,
        plan: ctx.plan,
        workspace: bindings.workspace,
        outputs: bindings.outputs,
        signal: ctx.signal,
      })
      .then((claim) => {
        // Adopted even when the answer comes after the grace period: the (then closed) cleanup stack kills it at once.
        if (claim.type === "claimed") adoptCompute(ctx, claim.compute.lease, claim.compute);
        return claim;
      });
    const claim = await ctx.untilGrace(claiming);
    if (claim.type === "claimed") {
      ctx.trace.add("acquire_compute", "ok", `warm ${claim.compute.lease.runtimeId}`);
      return ok(claim.compute.lease);
    }
    ctx.trace.add("acquire_compute", "skipped", `no warm sandbox (${claim.reason}); cold start`);
    return null;
  } catch (err) {
    const end = ctx.interruption("acquire_compute") ?? {
      type: "failed",
      stage: "acquire_compute",
      error: `warm pool: ${describeError(err)}`,
    };
    ctx.trace.add("acquire_compute", end.type, `warm pool: ${describeError(err)}`);
    return fail(end);
  }
}

function adoptCompute(ctx: RunContext, lease: ManagedSandboxLease, warm?: WarmCompute): void {
  ctx.cleanup.push((end) => releaseCompute(ctx, lease, end, warm));
}

export function attach(ctx: RunContext, placement: Placement): Promise<Step<void>> {
  return ctx.guard("attach", async () => {
    const base = { scope: ctx.scope, fence: ctx.identity, sandbox: placement.lease, signal: ctx.signal };
    await ctx.deps.workspace.attach({ ...base, binding: placement.workspace });
    if (placement.outputs) await ctx.deps.outputs!.attach({ ...base, binding: placement.outputs });
    ctx.trace.add("attach", "ok");
    return ok(undefined);
  });
}

const STOP_REASON: Record<RunEnd["type"], SandboxStopReason> = {
  completed: "completed",
  failed: "failed",
  lease_lost: "lease_lost",
  cancelled: "cancelled",
};

/**
 * Suspend (retained runtime after a completed run) or hard-kill. A failed
 * (or timed-out) suspend falls back to a kill: an unaccounted-for runtime is
 * worse than a cold start next time. Each call gets its own bound, so a
 * retained runtime's cleanup waits at most twice `terminateTimeoutMs`.
 */
async function releaseCompute(ctx: RunContext, lease: ManagedSandboxLease, end: RunEnd, warm?: WarmCompute): Promise<void> {
  const retain = warm === undefined && end.type === "completed" && ctx.plan.workspace.strategy === "retained_runtime";
  if (retain && (await suspend(ctx, lease))) return;
  const error = await terminate(ctx, lease, end);
  if (error === null) {
    ctx.summary.compute = "terminated";
    await warm?.settle("terminated");
    return;
  }
  const reason: OrphanReason = retain ? "suspend_failed" : end.type === "lease_lost" ? "lease_lost" : "terminate_failed";
  await enqueueOrphan(ctx, lease, reason, error);
  await warm?.settle("not_terminated");
}

async function suspend(ctx: RunContext, lease: ManagedSandboxLease): Promise<boolean> {
  try {
    const result = await withinTerminateBound(ctx, (signal) =>
      ctx.deps.sandbox.suspend({ scope: ctx.scope, fence: ctx.identity, lease, signal }),
    );
    if (result.type === "suspended") {
      ctx.summary.compute = "suspended";
      ctx.trace.add("suspend_compute", "ok", result.lease.runtimeId);
      return true;
    }
    ctx.trace.add("suspend_compute", "failed", result.error);
  } catch (err) {
    ctx.trace.add("suspend_compute", "failed", describeError(err));
  }
  return false;
}

/**
 * A compute-ending call bounded by `terminateTimeoutMs`: past it the call is
 * abandoned as failed, so a hung provider becomes an orphan record for the
 * reaper instead of holding the run's cleanup (and its fence) forever. Its
 * late answer is dropped: the run never acts on it and never kills twice.
 */
function withinTerminateBound<T>(ctx: RunContext, call: (signal: AbortSignal) => Promise<T>): Promise<T> {
  return withinDeadline(ctx.deps.scheduler, ctx.timings.terminateTimeoutMs, call);
}

/** `null` when the runtime is gone, otherwise why the hard kill failed. */
async function terminate(ctx: RunContext, lease: ManagedSandboxLease, end: RunEnd): Promise<string | null> {
  let error: string;
  try {
    const result = await withinTerminateBound(ctx, (signal) =>
      ctx.deps.sandbox.terminate({ scope: ctx.scope, fence: ctx.identity, lease, reason: STOP_REASON[end.type], signal }),
    );
    if (result.type === "terminated") {
      ctx.trace.add("terminate_compute", "ok", lease.runtimeId);
      return null;
    }
    error = result.error;
  } catch (err) {
    error = describeError(err);
  }
  ctx.trace.add("terminate_compute", "failed", error);
  return error;
}

async function enqueueOrphan(ctx: RunContext, lease: ManagedSandboxLease, reason: OrphanReason, error: string): Promise<void> {
  try {
    const record = await ctx.deps.orphans.enqueue({
      scope: ctx.scope,
      generation: ctx.generation,
      lease,
      reason,
      error,
      redact: [ctx.fence.token],
      signal: ctx.cleanupSignal,
    });
    ctx.summary.compute = "orphaned";
    ctx.summary.orphanIds.push(record.id);
    ctx.trace.add("enqueue_orphan", "ok", `${record.id} (${reason})`);
  } catch (err) {
    ctx.summary.compute = "leaked";
    ctx.trace.add("enqueue_orphan", "failed", describeError(err));
  }
}
