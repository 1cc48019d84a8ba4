/**
 * Steps `run_harness` (with the sandbox heartbeat monitor) and `drain`.
 *
 * Loss is handled cooperatively first: the harness's signal aborts (fence
 * lost, run cancelled, sandbox gone) and it gets `abortGraceMs` to stop.
 * After that the host stops waiting and the cleanup stack hard-kills the
 * compute, whatever the harness is doing. Turn commits are closed before the
 * step returns, so no live commit can race the final checkpoint; after a
 * lease loss or cancellation that wait is bounded by the same grace period,
 * because every step of a commit is abandoned once it is over (see
 * `RunContext.guard`): a publish hanging on a dead connection cannot keep
 * the sandbox alive. After a sandbox loss the fence is still ours, so the
 * host waits for the commit's answer before it places the harness again.
 */
import { describeError, fail, ok, type RunContext, type Step } from "../context.ts";
import type { HarnessRunResult } from "../types.ts";
import type { TurnCommits } from "./commit.ts";
import type { Placement } from "./compute.ts";

export type HarnessOutcome = { type: "completed" } | { type: "sandbox_lost"; reason: string };

export function runHarness(ctx: RunContext, placement: Placement, commits: TurnCommits): Promise<Step<HarnessOutcome>> {
  // The step bounds its own waits: it must stop the monitor and close the turn commits before it returns.
  return ctx.guard("run_harness", () => runPlacement(ctx, placement, commits), { boundsItsOwnWaits: true });
}

async function runPlacement(ctx: RunContext, placement: Placement, commits: TurnCommits): Promise<Step<HarnessOutcome>> {
  const lost = new AbortController();
  const settled = new AbortController();
  const signal = AbortSignal.any([ctx.signal, lost.signal]);
  // Armed before the harness starts, so an abort can never slip past it.
  const grace = graceExpiry(ctx, signal, settled.signal);
  void monitorSandbox(ctx, placement, lost, settled.signal);
  const running = ctx.deps.harness
    .run({
      scope: ctx.scope,
      fence: ctx.identity,
      plan: ctx.plan,
      sandbox: placement.lease,
      workspace: placement.workspace,
      outputs: placement.outputs,
      restored: placement.restored,
      attempt: placement.attempt,
      commitTurn: commits.open(placement),
      signal,
    })
    .catch((err: unknown): HarnessRunResult => ({ type: "failed", error: describeError(err) }));
  let result: HarnessRunResult;
  try {
    result = await Promise.race([running, grace]);
  } finally {
    settled.abort();
    // Unbounded only while the fence is ours; after an interruption the commit's steps give up at grace expiry.
    await commits.close();
  }
  const interrupted = ctx.interruption("run_harness");
  if (interrupted) {
    ctx.trace.add("run_harness", interrupted.type, describeResult(result));
    return fail(interrupted);
  }
  if (lost.signal.aborted) result = { type: "sandbox_lost", reason: describeError(lost.signal.reason) };
  if (result.type === "failed") {
    ctx.trace.add("run_harness", "failed", result.error);
    return fail({ type: "failed", stage: "run_harness", error: result.error });
  }
  ctx.trace.add("run_harness", result.type === "completed" ? "ok" : "lost", describeResult(result));
  return ok(result);
}

function describeResult(result: HarnessRunResult): string {
  return result.type === "completed" ? "harness completed" : result.type === "failed" ? result.error : result.reason;
}

/** Resolves `abortGraceMs` after `signal` aborts; rejects (ignored) once the harness settled. */
async function graceExpiry(ctx: RunContext, signal: AbortSignal, settled: AbortSignal): Promise<HarnessRunResult> {
  await new Promise<void>((resolve, reject) => {
    signal.addEventListener("abort", () => resolve(), { once: true, signal: settled });
    settled.addEventListener("abort", () => reject(settled.reason), { once: true });
  });
  await ctx.deps.scheduler.sleep(ctx.timings.abortGraceMs, settled);
  return { type: "failed", error: `harness did not stop within ${ctx.timings.abortGraceMs} ms of the abort; hard-killing` };
}

/** Heartbeats compute while the harness runs; a `lost` answer aborts the placement. Thrown heartbeats are transient. */
async function monitorSandbox(ctx: RunContext, placement: Placement, lost: AbortController, settled: AbortSignal): Promise<void> {
  const { scheduler, sandbox } = ctx.deps;
  for (;;) {
    try {
      await scheduler.sleep(ctx.timings.sandboxHeartbeatMs, settled);
    } catch {
      return;
    }
    try {
      const beat = await sandbox.heartbeat({ scope: ctx.scope, fence: ctx.identity, lease: placement.lease, signal: settled });
      if (beat.type === "lost") {
        ctx.trace.add("sandbox_heartbeat", "lost", beat.reason);
        lost.abort(new Error(`sandbox lost: ${beat.reason}`));
        return;
      }
    } catch (err) {
      ctx.trace.add("sandbox_heartbeat", "failed", describeError(err));
    }
  }
}

export function drain(ctx: RunContext, placement: Placement): Promise<Step<void>> {
  return ctx.guard("drain", async () => {
    const driver = ctx.plan.driver;
    const timeoutMs = driver.type === "openma_supervised" ? driver.drainTimeoutMs : ctx.timings.drainTimeoutMs;
    const done = new AbortController();
    const signal = AbortSignal.any([ctx.signal, done.signal]);
    const timeout = ctx.deps.scheduler
      .sleep(timeoutMs, signal)
      .then(() => ({ type: "failed" as const, error: `drain timed out after ${timeoutMs} ms` }));
    try {
      const result = await Promise.race([
        ctx.deps.harness.drain({ scope: ctx.scope, fence: ctx.identity, sandbox: placement.lease, signal }),
        timeout,
      ]);
      if (result.type === "failed") {
        ctx.trace.add("drain", "failed", result.error);
        return fail({ type: "failed", stage: "drain", error: result.error });
      }
      ctx.trace.add("drain", "ok");
      return ok(undefined);
    } finally {
      done.abort();
    }
  });
}
