/**
 * The two durable files of an ACP binding.
 *
 * - `session-binding.json`: the complete allowlist of native artifacts for
 *   this Session's agent, written before the agent starts.
 * - `acp-session.json`: the ACP session id and the completed-turn watermark,
 *   advanced *before* artifacts are copied and the idle is published, so a
 *   crash in between leaves the native marker ahead of canonical history
 *   (stale → recovery) rather than silently behind it.
 */
import { z } from "zod";
import type { AcpStateBinding } from "./binding.ts";

export function sessionBindingDocument(binding: AcpStateBinding): string {
  const doc = {
    version: 1,
    adapter_id: binding.profile.id,
    durability: binding.durability,
    resume: binding.resume,
    session_artifacts: binding.artifacts.map((a) => ({
      path: a.path,
      runtimePath: a.runtimePath,
      kind: a.kind,
      requiredForResume: a.requiredForResume,
    })),
  };
  return `${JSON.stringify(doc, null, 2)}\n`;
}

const NonEmpty = z.string().min(1);

const SessionBindingSchema = z.object({
  version: z.literal(1),
  adapter_id: NonEmpty,
  durability: z.enum(["native", "acp", "opaque"]),
  resume: z.enum(["native-and-acp", "acp-only"]),
  session_artifacts: z.array(
    z.object({
      path: NonEmpty,
      runtimePath: NonEmpty,
      kind: z.enum(["directory", "file", "sqlite"]),
      requiredForResume: z.boolean(),
    }),
  ),
});
export type SessionBindingDocument = z.infer<typeof SessionBindingSchema>;

export function parseSessionBinding(text: string): SessionBindingDocument | null {
  try {
    const parsed = SessionBindingSchema.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : null;
  } catch {
    return null;
  }
}

const CheckpointSchema = z.object({
  version: z.literal(1),
  adapter_id: NonEmpty,
  acp_session_id: NonEmpty,
  last_completed_turn_id: NonEmpty.optional(),
});

export interface AcpCheckpoint {
  adapterId: string;
  acpSessionId: string;
  /** Id of the canonical input event of the last turn whose idle we published (or are about to). */
  lastCompletedTurnId?: string;
}

export function checkpointDocument(checkpoint: AcpCheckpoint): string {
  const doc: z.infer<typeof CheckpointSchema> = {
    version: 1,
    adapter_id: checkpoint.adapterId,
    acp_session_id: checkpoint.acpSessionId,
  };
  if (checkpoint.lastCompletedTurnId !== undefined) doc.last_completed_turn_id = checkpoint.lastCompletedTurnId;
  return `${JSON.stringify(doc)}\n`;
}

/**
 * The checkpoint, or null when it is unreadable, another version, or written
 * for another adapter (a profile change must never resume a foreign id).
 */
export function parseCheckpoint(text: string, adapterId: string): AcpCheckpoint | null {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return null;
  }
  const parsed = CheckpointSchema.safeParse(raw);
  if (!parsed.success || parsed.data.adapter_id !== adapterId) return null;
  const out: AcpCheckpoint = { adapterId: parsed.data.adapter_id, acpSessionId: parsed.data.acp_session_id };
  if (parsed.data.last_completed_turn_id !== undefined) out.lastCompletedTurnId = parsed.data.last_completed_turn_id;
  return out;
}
