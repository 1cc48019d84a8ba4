/** What the loop reads about the session besides its log: the agent snapshot and the environment. */
import type { SecretBox, Storage } from "@openma/storage";
import type { ServerToolContext } from "./server-tools.ts";
import { type Scope, threadAgent } from "./threads.ts";
import type { SessionAgentView } from "./tools.ts";

export interface SessionContext {
  sessionId: string;
  /** The thread this context runs (null: the primary thread). */
  threadId: string | null;
  agent: SessionAgentView;
  environmentId: string;
  /** The environment body, or null when the environment row is gone. */
  environment: unknown;
  /** `self_hosted`, `cloud`, `none`; undefined when the environment is gone. */
  envType: string | undefined;
  vaultIds: string[];
  archived: boolean;
  /** The session's spend ceiling, or null. */
  budget: SessionBudget | null;
}

export interface SessionBudget {
  type: "limit";
  max_list_cost: { amount: string; currency: string };
}

/** The context of the primary thread, or of `scope`'s thread: its own agent, archived with the session or on its own. */
export async function loadContext(storage: Storage, sessionId: string, scope: Scope = null): Promise<SessionContext | null> {
  const row = await storage.db
    .selectFrom("sessions")
    .select(["body", "environment_id", "archived_at", "status"])
    .where("id", "=", sessionId)
    .executeTakeFirst();
  if (!row) return null;
  const body = JSON.parse(row.body) as { agent?: SessionAgentView; vault_ids?: string[]; budget?: SessionBudget | null };
  const env = await storage.db
    .selectFrom("environments")
    .select(["config_type", "body"])
    .where("id", "=", row.environment_id)
    .executeTakeFirst();
  const thread = scope ? await threadAgent(storage, scope.id) : null;
  if (scope && !thread) return null;
  return {
    sessionId,
    threadId: scope?.id ?? null,
    agent: (thread?.agent as SessionAgentView | undefined) ?? body.agent ?? {},
    environmentId: row.environment_id,
    environment: env ? (JSON.parse(env.body) as unknown) : null,
    envType: env?.config_type,
    vaultIds: Array.isArray(body.vault_ids) ? body.vault_ids : [],
    // A thread's log has no session.status_terminated: the session row says when it ended.
    archived: row.archived_at !== null || (thread ? thread.archived || row.status === "terminated" : false),
    budget: body.budget ?? null,
  };
}

export function serverToolContext(deps: { storage: Storage; secrets?: SecretBox | undefined }, ctx: SessionContext): ServerToolContext {
  const { storage, secrets } = deps;
  return { sessionId: ctx.sessionId, agent: ctx.agent, environment: ctx.environment, vaultIds: ctx.vaultIds, storage, secrets };
}

export function modelIdOf(agent: SessionAgentView): string {
  return typeof agent.model === "string" ? agent.model : (agent.model?.id ?? "");
}
