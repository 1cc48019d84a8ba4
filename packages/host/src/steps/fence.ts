/**
 * Steps `plan`, `acquire_fence` and `release_fence`: the only steps that run
 * outside a `RunContext`, because before the fence is held there is nothing
 * to clean up and no generation to name.
 *
 * Planning is pure and happens before anything is acquired, so a
 * composition that lacks a guarantee fails with no side effect. The fence is
 * acquired with a fresh owner id (one per attempt, never per process), and
 * its renewal starts the moment it is held.
 */
import {
  type ActivePublication,
  type ManagedRuntimeCapabilities,
  type ManagedRuntimePlan,
  type ManagedRuntimeProfile,
  type RuntimeResourceFence,
  type RuntimeResourceFencePort,
  type RuntimeResourceScope,
  resolveManagedRuntimePlan,
} from "@openma/contract";
import { describeError, type RunContext, type Trace } from "../context.ts";
import type { RuntimeRunResult } from "../types.ts";

type Refused = { ok: false; result: RuntimeRunResult };

export function planRun(
  profile: ManagedRuntimeProfile,
  capabilities: ManagedRuntimeCapabilities,
  trace: Trace,
): { ok: true; plan: ManagedRuntimePlan } | Refused {
  const planned = resolveManagedRuntimePlan(profile, capabilities);
  if (planned.type === "rejected") {
    trace.add("plan", "rejected", planned.error.message);
    return { ok: false, result: { type: "admission_error", error: planned.error, trace: trace.entries } };
  }
  const { plan } = planned;
  trace.add("plan", "ok", `workspace ${plan.workspace.strategy}, outputs ${plan.outputs?.strategy ?? "disabled"}`);
  return { ok: true, plan };
}

export async function acquireFence(
  input: { fences: RuntimeResourceFencePort; scope: RuntimeResourceScope; ownerId: string; ttlMs: number; signal: AbortSignal },
  trace: Trace,
): Promise<{ ok: true; fence: RuntimeResourceFence; active: ActivePublication | null } | Refused> {
  const { fences, ...request } = input;
  try {
    const result = await fences.acquire(request);
    if (result.type === "conflict") {
      trace.add("acquire_fence", "rejected", `held by another owner until ${result.holderExpiresAt}`);
      return { ok: false, result: { type: "conflict", holderExpiresAt: result.holderExpiresAt, trace: trace.entries } };
    }
    trace.add("acquire_fence", "ok", `generation ${result.fence.generation}`);
    return { ok: true, fence: result.fence, active: result.active };
  } catch (err) {
    trace.add("acquire_fence", "failed", describeError(err));
    const cleanup = { compute: "none" as const, orphanIds: [] };
    return {
      ok: false,
      result: { type: "failed", generation: null, stage: "acquire_fence", error: describeError(err), cleanup, trace: trace.entries },
    };
  }
}

/** Last item of every cleanup: stops renewing and ends the generation so the next owner need not wait. */
export async function releaseFence(ctx: RunContext): Promise<void> {
  const end = await ctx.held.release();
  if (end.type === "released") ctx.trace.add("release_fence", "ok", `generation ${ctx.generation}`);
  else ctx.trace.add("release_fence", "lost", describeError(ctx.held.signal.reason));
}
