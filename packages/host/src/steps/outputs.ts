/**
 * Steps `prepare_outputs`, `collect_outputs` and `finalize_outputs`. The
 * manifest they produce is a candidate only: it becomes visible through the
 * fenced publication, and a binding whose run did not complete is aborted
 * (its partial blobs stay inactive until GC sweeps them).
 */
import type { ManagedSandboxLease, OutputManifestRef, OutputViolation, SessionOutputBinding, SessionOutputPort } from "@openma/contract";
import { ok, type RunContext, type RunEnd, type Step } from "../context.ts";

export interface CollectedOutputs {
  manifest: OutputManifestRef;
  rejected: OutputViolation[];
}

/** The plan only selects an output strategy when the composition has an output port. */
function port(ctx: RunContext): SessionOutputPort {
  return ctx.deps.outputs!;
}

export async function prepareOutputs(ctx: RunContext, attempt: number): Promise<Step<SessionOutputBinding | null>> {
  const planned = ctx.plan.outputs;
  if (planned === null) return ok(null);
  return ctx.guard("prepare_outputs", async () => {
    const binding = await port(ctx).prepare({
      scope: ctx.scope,
      fence: ctx.identity,
      strategy: planned.strategy,
      idempotencyKey: ctx.key("outputs-prepare", attempt),
      previous: ctx.active?.outputs ?? null,
      signal: ctx.signal,
    });
    ctx.cleanup.push((end) => finishOutputs(ctx, binding, end));
    ctx.trace.add("prepare_outputs", "ok", binding.bindingId);
    return ok(binding);
  });
}

export async function collectOutputs(
  ctx: RunContext,
  binding: SessionOutputBinding,
  sandbox: ManagedSandboxLease,
  stage: string,
): Promise<Step<CollectedOutputs>> {
  const collected = await ctx.guard("collect_outputs", async () => {
    const result = await port(ctx).collect({ scope: ctx.scope, fence: ctx.identity, binding, sandbox, signal: ctx.signal });
    ctx.trace.add("collect_outputs", "ok", `${result.entries.length} entries, ${result.rejected.length} refused`);
    return ok(result);
  });
  if (!collected.ok) return collected;
  return ctx.guard("finalize_outputs", async () => {
    const manifest = await port(ctx).finalize({
      scope: ctx.scope,
      fence: ctx.identity,
      binding,
      entries: collected.value.entries,
      idempotencyKey: ctx.key(stage, "outputs-finalize"),
      signal: ctx.signal,
    });
    ctx.trace.add("finalize_outputs", "ok", manifest.id);
    return ok({ manifest, rejected: collected.value.rejected });
  });
}

async function finishOutputs(ctx: RunContext, binding: SessionOutputBinding, end: RunEnd): Promise<void> {
  const base = { scope: ctx.scope, fence: ctx.identity, binding, signal: ctx.cleanupSignal };
  if (end.type === "completed") {
    await ctx.bestEffort("release_outputs", async () => {
      await port(ctx).release(base);
      return binding.bindingId;
    });
    return;
  }
  await ctx.bestEffort("abort_outputs", async () => {
    await port(ctx).abort({ ...base, reason: end.type === "lease_lost" ? "lease_lost" : "failed" });
    return binding.bindingId;
  });
}
