/**
 * The Managed Runtime Host transaction, as named steps:
 *
 *   plan → acquire fence (+ renewal through the lease controller) →
 *   materialize workspace → prepare outputs → acquire compute → attach →
 *   run harness → drain → checkpoint → collect and finalize outputs →
 *   publish → (cleanup) terminate or suspend → release bindings → release fence
 *
 * Each step lives in `steps/` with a typed input and output and records
 * itself in the trace. A step that cannot continue returns how the run ends;
 * the cleanup stack then undoes exactly what was acquired, in reverse. After
 * a lease loss or cancellation no step is waited for longer than
 * `abortGraceMs`, so the hard kill comes on time even when a port hangs. The
 * failure behaviour is the seed's asymmetric table; see docs/runtime-host.md.
 */
import { composeCapabilities, type ManagedRuntimeCapabilities } from "@openma/contract";
import { fail, ok, RunContext, type RunEnd, type Step, Trace } from "./context.ts";
import { holdFence } from "./fence-lease.ts";
import { inHostSpan, settle } from "./spans.ts";
import { commitCandidates, TurnCommits } from "./steps/commit.ts";
import { acquireCompute, attach, type Placement } from "./steps/compute.ts";
import { acquireFence, planRun, releaseFence } from "./steps/fence.ts";
import { drain, runHarness } from "./steps/harness.ts";
import { prepareOutputs } from "./steps/outputs.ts";
import { materializeWorkspace } from "./steps/workspace.ts";
import { resolveTimings } from "./timings.ts";
import type { HostTimings, ManagedRuntimeHostDeps, RunInput, RuntimeRunResult } from "./types.ts";

export class ManagedRuntimeHost {
  readonly #deps: ManagedRuntimeHostDeps;
  readonly #timings: HostTimings;

  constructor(deps: ManagedRuntimeHostDeps) {
    this.#deps = deps;
    this.#timings = resolveTimings(deps.timings);
  }

  /** What this composition can guarantee, as the planner and the conformance table see it. */
  get capabilities(): ManagedRuntimeCapabilities {
    const { sandbox, workspace, outputs, runtimeCheckpoint, lanes } = this.#deps;
    return composeCapabilities({ sandbox, workspace, outputs, runtimeCheckpoint, lanes });
  }

  /** Runs one generation for a scope. Never throws: every outcome is a `RuntimeRunResult`. */
  run(input: RunInput): Promise<RuntimeRunResult> {
    const attributes = { "openma.session_id": input.scope.sessionId, "openma.environment_id": input.scope.environmentId };
    return inHostSpan("openma.host.run", attributes, async (span) => {
      const result = await this.#run(input);
      settle(span, result.type === "completed" ? "ok" : result.type);
      return result;
    });
  }

  async #run(input: RunInput): Promise<RuntimeRunResult> {
    const deps = this.#deps;
    const trace = new Trace();
    const planned = planRun(input.profile, this.capabilities, trace);
    if (!planned.ok) return planned.result;
    const external = input.signal ?? new AbortController().signal;
    const acquired = await acquireFence(
      { fences: deps.fences, scope: input.scope, ownerId: deps.newOwnerId(), ttlMs: this.#timings.leaseTtlMs, signal: external },
      trace,
    );
    if (!acquired.ok) return acquired.result;
    trace.redact(acquired.fence.token);
    const held = holdFence(deps.fences, acquired.fence, this.#timings, deps.scheduler);
    const ctx = new RunContext(deps, this.#timings, input.scope, planned.plan, trace, held, acquired.active, external);
    ctx.cleanup.push(() => releaseFence(ctx));
    const end = await transaction(ctx);
    ctx.endTransaction();
    await ctx.cleanup.close(end);
    // Copies: an abandoned call answering later must not change a result already handed out.
    const cleanup = { compute: ctx.summary.compute, orphanIds: [...ctx.summary.orphanIds] };
    return { ...end, generation: ctx.generation, cleanup, trace: trace.seal() };
  }
}

async function transaction(ctx: RunContext): Promise<RunEnd> {
  const commits = new TurnCommits(ctx);
  const placed = await placeAndRun(ctx, commits);
  if (!placed.ok) return placed.end;
  const drained = await drain(ctx, placed.value);
  if (!drained.ok) return drained.end;
  const committed = await commitCandidates(ctx, placed.value, { stage: "final", runtimeCheckpoint: true });
  if (!committed.ok) return committed.end;
  return { type: "completed", publication: committed.value.publication, rejectedOutputs: committed.value.rejectedOutputs };
}

/**
 * Places the harness and runs it. When the sandbox disappears, this
 * attempt's compute and bindings are unwound and the placement is redone
 * cold: a fresh runtime, restored from the newest publication (which may be
 * a turn commit of the lost attempt), with the attempt number telling the
 * harness to replay Session events.
 */
async function placeAndRun(ctx: RunContext, commits: TurnCommits): Promise<Step<Placement>> {
  for (let attempt = 1; ; attempt++) {
    const mark = ctx.cleanup.depth;
    const placed = await place(ctx, attempt);
    if (!placed.ok) return placed;
    const ran = await runHarness(ctx, placed.value, commits);
    if (!ran.ok) return ran;
    if (ran.value.type === "completed") return ok(placed.value);
    const end: RunEnd = { type: "failed", stage: "run_harness", error: ran.value.reason };
    if (attempt > ctx.timings.maxColdRestarts) return fail(end);
    await ctx.cleanup.unwind(end, mark);
  }
}

async function place(ctx: RunContext, attempt: number): Promise<Step<Placement>> {
  const workspace = await materializeWorkspace(ctx, attempt);
  if (!workspace.ok) return workspace;
  const outputs = await prepareOutputs(ctx, attempt);
  if (!outputs.ok) return outputs;
  const bindings = { attempt, workspace: workspace.value.binding, restored: workspace.value.restored, outputs: outputs.value };
  const lease = await acquireCompute(ctx, bindings);
  if (!lease.ok) return lease;
  const placement: Placement = { ...bindings, lease: lease.value };
  const attached = await attach(ctx, placement);
  if (!attached.ok) return attached;
  return ok(placement);
}
