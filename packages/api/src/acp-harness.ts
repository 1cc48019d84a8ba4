/**
 * The ACP harness extension (docs/api.md, docs/acp.md "Selecting an agent",
 * ADR 0033): `metadata["openma.acp_agent"]` on an agent (or, as a default for
 * its sessions, an environment) names an ACP agent release (`codex-acp` or
 * `codex-acp@0.16.0`). Metadata, because the official SDK carries it on every
 * agent and environment call without casts, versions it with the agent, and
 * shows it on reads.
 *
 * The release is resolved once, when a session is created, and pinned on the
 * session (`sessions.acp_release`, migration 0022): a later change to the
 * agent or environment does not touch a live session, and a session's own
 * metadata may not carry the key (its harness cannot be changed).
 */
import type { PinnedAcpRelease } from "@openma/acp";
import type { Database } from "@openma/storage";
import type { Kysely } from "kysely";
import type { ApiDeps } from "./context.ts";
import { badRequest } from "./errors.ts";

export const ACP_AGENT_KEY = "openma.acp_agent";

const refusal = (field: string, message: string) => badRequest(`${field}: ${message}`, { error_code: "invalid_acp_agent" });

/** Agent and environment writes: a selection this server cannot run is a 400 now, not at the first session. */
export function checkAcpSelection(deps: ApiDeps, metadata: Readonly<Record<string, string>>, root: string): void {
  const value = metadata[ACP_AGENT_KEY];
  if (value === undefined) return;
  const field = `${root}.${ACP_AGENT_KEY}`;
  if (!deps.acpReleases) throw refusal(field, "this server runs no ACP agents");
  const problem = deps.acpReleases.check(value);
  if (problem) throw refusal(field, problem);
}

/** Session metadata (create or update) may not name a harness: it is chosen by the agent or environment and pinned. */
export function refuseSessionAcpSelection(metadata: Readonly<Record<string, string | null>> | null | undefined, creating: boolean): void {
  if (!metadata || !(ACP_AGENT_KEY in metadata)) return;
  throw refusal(
    `metadata.${ACP_AGENT_KEY}`,
    creating
      ? "a session's ACP agent is chosen by its agent or environment"
      : "a session's ACP agent is pinned when the session is created and cannot be changed",
  );
}

/** The release a new session pins: the agent's selection, else the environment's, else none (the default harness). */
export async function pinAcpRelease(
  deps: ApiDeps,
  agentMetadata: Readonly<Record<string, string>>,
  environmentMetadata: Readonly<Record<string, string>>,
): Promise<PinnedAcpRelease | null> {
  const fromAgent = agentMetadata[ACP_AGENT_KEY];
  const value = fromAgent ?? environmentMetadata[ACP_AGENT_KEY];
  if (value === undefined) return null;
  const field = fromAgent !== undefined ? `agent.metadata.${ACP_AGENT_KEY}` : `environment.metadata.${ACP_AGENT_KEY}`;
  if (!deps.acpReleases) throw refusal(field, "this server runs no ACP agents");
  const pinned = await deps.acpReleases.pin(value);
  if ("error" in pinned) throw refusal(field, pinned.error);
  return pinned;
}

/** The release a session pinned at creation, or null (the default harness). */
export async function pinnedAcpRelease(db: Kysely<Database>, sessionId: string): Promise<PinnedAcpRelease | null> {
  const row = await db.selectFrom("sessions").select("acp_release").where("id", "=", sessionId).executeTakeFirst();
  return row?.acp_release ? (JSON.parse(row.acp_release) as PinnedAcpRelease) : null;
}

/**
 * The model id of the agent a session runs (its agent version's snapshot on
 * the session, so a later agent update does not change it), or null when it
 * names none. An ACP agent asks its model for this id.
 */
export async function sessionAgentModel(db: Kysely<Database>, sessionId: string): Promise<string | null> {
  const row = await db.selectFrom("sessions").select("body").where("id", "=", sessionId).executeTakeFirst();
  const model = row ? (JSON.parse(row.body) as { agent?: { model?: string | { id?: string } } }).agent?.model : undefined;
  return (typeof model === "string" ? model : model?.id) || null;
}
