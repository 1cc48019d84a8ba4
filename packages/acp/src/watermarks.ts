/**
 * The resume decision: resume natively only when both watermarks agree.
 *
 * - Canonical watermark: id of the input event of the last turn whose
 *   `session.status_idle` is in the Managed Agents event log.
 * - Native watermark: `last_completed_turn_id` in `acp-session.json`.
 *
 * Any disagreement (either side ahead, or no readable checkpoint while the
 * log has a completed turn) is `native-state-stale`; matching watermarks with
 * a required artifact absent is `native-state-missing`. Both mean: no stale
 * resume id is sent, one fresh `session/new` gets the recovery prompt.
 */
import type { AcpCheckpoint } from "./files.ts";
import type { AcpNativeState, AcpProbeResult } from "./native-state.ts";

export type AcpRecoveryReason = "native-state-stale" | "native-state-missing";

export type AcpResumePlan =
  /** Restore the declared artifacts into the live home, then session/resume (or session/load) this id. */
  | { type: "resume"; acpSessionId: string }
  /** session/new; when `recovery` is set, its first prompt is the bounded recovery prompt. */
  | { type: "new"; recovery: AcpRecoveryReason | null };

export interface CanonicalWatermark {
  /** Undefined when the log holds no completed turn yet. */
  completedTurnId: string | undefined;
}

export function decideResume(input: {
  checkpoint: AcpCheckpoint | null;
  canonical: CanonicalWatermark;
  resume: "native-and-acp" | "acp-only";
  probe: AcpProbeResult;
}): AcpResumePlan {
  const { checkpoint, canonical } = input;
  if (!checkpoint) {
    return { type: "new", recovery: canonical.completedTurnId === undefined ? null : "native-state-stale" };
  }
  if (checkpoint.lastCompletedTurnId !== canonical.completedTurnId) return { type: "new", recovery: "native-state-stale" };
  if (input.resume === "native-and-acp" && !input.probe.ok) return { type: "new", recovery: "native-state-missing" };
  return { type: "resume", acpSessionId: checkpoint.acpSessionId };
}

/** Reads the checkpoint, probes, decides; restores the artifacts when the plan is to resume. */
export async function prepareResume(
  state: AcpNativeState,
  canonical: CanonicalWatermark,
): Promise<{ plan: AcpResumePlan; checkpoint: AcpCheckpoint | null; probe: AcpProbeResult }> {
  const checkpoint = await state.readCheckpoint();
  const probe = checkpoint ? await state.probe() : { ok: false, missing: [] };
  const plan = decideResume({ checkpoint, canonical, resume: state.binding.resume, probe });
  if (plan.type === "resume") await state.restore();
  return { plan, checkpoint, probe };
}

/**
 * Input events: a turn is the latest of these before a `session.status_idle`.
 * (Tool confirmations and results resume a turn and so move the watermark too.)
 */
const INPUT_EVENTS = new Set([
  "user.message",
  "system.message",
  "user.tool_result",
  "user.custom_tool_result",
  "user.tool_confirmation",
  "user.define_outcome",
]);

/** The canonical watermark from the event log in ascending order. */
export function canonicalWatermark(events: readonly { id: string; type: string }[]): CanonicalWatermark {
  let latestInput: string | undefined;
  let completed: string | undefined;
  for (const e of events) {
    if (INPUT_EVENTS.has(e.type)) latestInput = e.id;
    else if (e.type === "session.status_idle" && latestInput !== undefined) completed = latestInput;
  }
  return { completedTurnId: completed };
}
