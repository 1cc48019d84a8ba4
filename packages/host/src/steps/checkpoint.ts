/**
 * Steps `checkpoint_workspace` and `checkpoint_runtime`. Both create
 * immutable candidates that stay inactive until published.
 *
 * A runtime checkpoint is validated before it may be published (an adapter
 * returning another runtime's or generation's state would otherwise become
 * this generation's truth). When it cannot be created or fails validation,
 * `required` fails the run closed and `optional` falls back to the workspace
 * path by publishing no runtime checkpoint.
 */
import {
  assessCreatedCheckpoint,
  harnessIdentityOf,
  type RuntimeCheckpointPort,
  type RuntimeCheckpointRef,
  type WorkspaceCandidateRef,
} from "@openma/contract";
import { describeError, fail, ok, type RunContext, type RunEnd, type Step } from "../context.ts";
import { checkpointExpectation, type Placement } from "./compute.ts";

export async function checkpointWorkspace(
  ctx: RunContext,
  placement: Placement,
  stage: string,
): Promise<Step<WorkspaceCandidateRef | null>> {
  if (ctx.plan.workspace.strategy === "ephemeral") return ok(null);
  return ctx.guard("checkpoint_workspace", async () => {
    const { candidate } = await ctx.deps.workspace.checkpoint({
      scope: ctx.scope,
      fence: ctx.identity,
      binding: placement.workspace,
      sandbox: placement.lease,
      idempotencyKey: ctx.key(stage, "workspace-checkpoint"),
      signal: ctx.signal,
    });
    ctx.trace.add("checkpoint_workspace", "ok", candidate.id);
    return ok(candidate);
  });
}

export async function checkpointRuntime(
  ctx: RunContext,
  placement: Placement,
  workspace: WorkspaceCandidateRef | null,
): Promise<Step<RuntimeCheckpointRef | null>> {
  const planned = ctx.plan.runtimeCheckpoint;
  if (planned === null) return ok(null);
  return ctx.guard("checkpoint_runtime", async () => {
    const port = ctx.deps.runtimeCheckpoint!;
    const expected = checkpointExpectation(ctx, planned.kind, workspace?.id ?? null);
    const created = await port
      .create({
        scope: ctx.scope,
        fence: ctx.identity,
        sandbox: placement.lease,
        kind: planned.kind,
        workspace,
        harness: harnessIdentityOf(ctx.plan.driver),
        signal: ctx.signal,
      })
      .catch((err: unknown) => ({ type: "failed" as const, error: describeError(err) }));
    let problem: string;
    if (created.type === "created") {
      const assessment = assessCreatedCheckpoint(created.ref, { ...expected, runtimeId: placement.lease.runtimeId });
      if (assessment.type === "accepted") {
        ctx.cleanup.push((end) => discardUnpublished(ctx, port, assessment.ref, end));
        ctx.trace.add("checkpoint_runtime", "ok", assessment.ref.checkpointId);
        return ok(assessment.ref);
      }
      problem = `created checkpoint rejected: ${assessment.reason}`;
      await discard(ctx, port, created.ref);
    } else {
      problem = created.error;
    }
    if (planned.requirement === "required") {
      ctx.trace.add("checkpoint_runtime", "failed", problem);
      return fail({ type: "failed", stage: "checkpoint_runtime", error: `required runtime checkpoint unavailable: ${problem}` });
    }
    ctx.trace.add("checkpoint_runtime", "fallback", `${problem}; workspace path only`);
    return ok(null);
  });
}

/**
 * A created checkpoint the run did not get to publish is garbage, unless a
 * publish whose answer was lost did commit it: the active pointer decides.
 */
async function discardUnpublished(ctx: RunContext, port: RuntimeCheckpointPort, ref: RuntimeCheckpointRef, end: RunEnd): Promise<void> {
  if (end.type === "completed") return;
  const active = await ctx.deps.fences.active({ scope: ctx.scope, signal: ctx.cleanupSignal }).catch(() => undefined);
  if (active === undefined) {
    ctx.trace.add("discard_runtime_checkpoint", "skipped", `${ref.checkpointId}: publication state unknown; left for GC`);
    return;
  }
  if (active?.runtimeCheckpoint?.checkpointId === ref.checkpointId) {
    ctx.trace.add("discard_runtime_checkpoint", "skipped", `${ref.checkpointId}: published`);
    return;
  }
  await discard(ctx, port, ref);
}

async function discard(ctx: RunContext, port: RuntimeCheckpointPort, ref: RuntimeCheckpointRef): Promise<void> {
  await ctx.bestEffort("discard_runtime_checkpoint", async () => {
    const result = await port.discard({ ref, signal: ctx.cleanupSignal });
    return `${ref.checkpointId}: ${result.type}`;
  });
}
