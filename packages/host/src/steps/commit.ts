/**
 * Committing candidates: checkpoint → (runtime checkpoint) → collect and
 * finalize outputs → publish. The final stage and live turn-boundary commits
 * share this sequence; they differ only in their idempotency keys
 * (`<generation>:final:*` vs `<generation>:turn:<id>:*`) and in that only the
 * final stage (after drain) may capture a runtime checkpoint.
 */
import {
  type ActivePublication,
  isRuntimeIdentifier,
  type OutputManifestRef,
  type OutputViolation,
  type PublicationPointers,
  type RuntimeCheckpointRef,
  type WorkspaceCandidateRef,
} from "@openma/contract";
import { ok, type RunContext, type Step } from "../context.ts";
import type { TurnCommitResult } from "../types.ts";
import { checkpointRuntime, checkpointWorkspace } from "./checkpoint.ts";
import type { Placement } from "./compute.ts";
import { collectOutputs } from "./outputs.ts";
import { publish } from "./publish.ts";

export interface Committed {
  /** `null` when there was nothing to publish. */
  publication: ActivePublication | null;
  replayed: boolean;
  rejectedOutputs: OutputViolation[];
}

export async function commitCandidates(
  ctx: RunContext,
  placement: Placement,
  opts: { stage: string; runtimeCheckpoint: boolean },
): Promise<Step<Committed>> {
  const workspace = await checkpointWorkspace(ctx, placement, opts.stage);
  if (!workspace.ok) return workspace;
  const runtime = opts.runtimeCheckpoint ? await checkpointRuntime(ctx, placement, workspace.value) : ok(null);
  if (!runtime.ok) return runtime;
  const outputs = placement.outputs ? await collectOutputs(ctx, placement.outputs, placement.lease, opts.stage) : ok(null);
  if (!outputs.ok) return outputs;
  const pointers = pointersOf(workspace.value, runtime.value, outputs.value?.manifest ?? null);
  const rejectedOutputs = outputs.value?.rejected ?? [];
  if (pointers === null) {
    ctx.trace.add("publish", "skipped", "nothing to publish (ephemeral workspace, no outputs)");
    return ok({ publication: null, replayed: false, rejectedOutputs });
  }
  const published = await publish(ctx, pointers, ctx.key(opts.stage, "publish"));
  if (!published.ok) return published;
  return ok({ ...published.value, rejectedOutputs });
}

/**
 * A new workspace always carries its runtime-checkpoint pointer, `null`
 * included: an older process checkpoint belongs to an older workspace and
 * must stop being advertised.
 */
function pointersOf(
  workspace: WorkspaceCandidateRef | null,
  runtimeCheckpoint: RuntimeCheckpointRef | null,
  outputs: OutputManifestRef | null,
): PublicationPointers | null {
  const pointers: PublicationPointers = {};
  if (workspace) pointers.workspace = workspace;
  if (workspace || runtimeCheckpoint) pointers.runtimeCheckpoint = runtimeCheckpoint;
  if (outputs) pointers.outputs = outputs;
  return Object.keys(pointers).length > 0 ? pointers : null;
}

const MAX_TURN_ID_LENGTH = 128;

/**
 * Live turn-boundary commits requested by the running harness. They are
 * serialized (a checkpoint never races another), accepted only while the
 * placement that asked is running, and remembered per turn id, so a harness
 * retrying a commit gets the same answer instead of a second revision.
 */
export class TurnCommits {
  #open: Placement | null = null;
  #tail: Promise<unknown> = Promise.resolve();
  readonly #committed = new Map<string, TurnCommitResult>();

  constructor(private readonly ctx: RunContext) {}

  open(placement: Placement): (turnId: string) => Promise<TurnCommitResult> {
    this.#open = placement;
    return (turnId) => {
      const next = this.#tail.then(() => this.#commit(placement, turnId));
      this.#tail = next;
      return next;
    };
  }

  /**
   * No new commits from now on; resolves when the one in flight (if any) is
   * done. After a lease loss or cancellation that is at most the grace
   * period: a step still pending then is abandoned and the commit is refused.
   */
  async close(): Promise<void> {
    this.#open = null;
    await this.#tail;
  }

  async #commit(placement: Placement, turnId: string): Promise<TurnCommitResult> {
    const { ctx } = this;
    if (!isRuntimeIdentifier(turnId) || turnId.length > MAX_TURN_ID_LENGTH) return { type: "rejected", reason: "invalid_turn_id" };
    if (this.#open !== placement) return { type: "rejected", reason: "not_running" };
    const previous = this.#committed.get(turnId);
    if (previous) return previous;
    // An interrupted run refuses at the first step: the guards check before they start.
    const committed = await commitCandidates(ctx, placement, { stage: `turn:${turnId}`, runtimeCheckpoint: false });
    if (!committed.ok) {
      const { end } = committed;
      const refused: TurnCommitResult =
        end.type === "failed"
          ? { type: "failed", error: end.error }
          : { type: "rejected", reason: end.type === "lease_lost" ? "lease_lost" : "not_running" };
      ctx.trace.add("commit_turn", refused.type === "failed" ? "failed" : "rejected", turnId);
      return refused;
    }
    const result: TurnCommitResult = {
      type: "committed",
      revision: committed.value.publication?.revision ?? null,
      replayed: committed.value.replayed,
    };
    this.#committed.set(turnId, result);
    ctx.trace.add("commit_turn", "ok", turnId);
    return result;
  }
}
