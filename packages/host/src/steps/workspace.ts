/**
 * Step `materialize_workspace`: restore the last published candidate into a
 * fresh binding. A candidate that fails verification is rejected in favour
 * of the previous published revisions, newest first; an empty workspace is
 * used only when the profile explicitly asked for an `ephemeral` one (or the
 * session never published a workspace). A session with a durable workspace
 * never silently restarts from nothing.
 */
import type { WorkspaceBinding, WorkspaceCandidateRef } from "@openma/contract";
import { fail, ok, type RunContext, type Step } from "../context.ts";

export interface MaterializedWorkspace {
  binding: WorkspaceBinding;
  restored: WorkspaceCandidateRef | null;
}

export function materializeWorkspace(ctx: RunContext, attempt: number): Promise<Step<MaterializedWorkspace>> {
  return ctx.guard("materialize_workspace", async () => {
    const { workspace } = ctx.deps;
    const strategy = ctx.plan.workspace.strategy;
    const queue: Array<WorkspaceCandidateRef | null> = [strategy === "ephemeral" ? null : (ctx.active?.workspace ?? null)];
    const rejected: string[] = [];
    for (let n = 0; n < queue.length; n++) {
      const candidate = queue[n]!;
      const result = await workspace.materialize({
        scope: ctx.scope,
        fence: ctx.identity,
        strategy,
        candidate,
        idempotencyKey: ctx.key("workspace-materialize", attempt, n),
        signal: ctx.signal,
      });
      if (result.type === "materialized") {
        const { binding } = result;
        ctx.cleanup.push(() => releaseWorkspace(ctx, binding));
        ctx.trace.add(
          "materialize_workspace",
          n === 0 ? "ok" : "fallback",
          `restored ${result.restored?.id ?? "nothing (empty workspace)"}`,
        );
        return ok({ binding, restored: result.restored });
      }
      ctx.trace.add("materialize_workspace", "rejected", `${result.candidate.id}: ${result.reason}`);
      rejected.push(result.candidate.id);
      if (n === 0) {
        queue.push(...(await olderCandidates(ctx, result.candidate)));
        if (ctx.plan.workspace.requirement === "ephemeral") queue.push(null);
      }
    }
    const error = `no published workspace revision passed verification (rejected: ${rejected.join(", ")}); refusing to start from an empty workspace`;
    ctx.trace.add("materialize_workspace", "failed", error);
    return fail({ type: "failed", stage: "materialize_workspace", error });
  });
}

/** Distinct workspace candidates of earlier publications, newest first. */
async function olderCandidates(ctx: RunContext, rejected: WorkspaceCandidateRef): Promise<WorkspaceCandidateRef[]> {
  const history = await ctx.deps.fences.history({ scope: ctx.scope, limit: ctx.timings.fallbackDepth, signal: ctx.signal });
  const seen = new Set([rejected.id]);
  const older: WorkspaceCandidateRef[] = [];
  for (const record of history) {
    if (record.workspace === null || seen.has(record.workspace.id)) continue;
    seen.add(record.workspace.id);
    older.push(record.workspace);
  }
  return older;
}

async function releaseWorkspace(ctx: RunContext, binding: WorkspaceBinding): Promise<void> {
  await ctx.bestEffort("release_workspace", async () => {
    await ctx.deps.workspace.release({ scope: ctx.scope, fence: ctx.identity, binding, signal: ctx.cleanupSignal });
    return binding.bindingId;
  });
}
