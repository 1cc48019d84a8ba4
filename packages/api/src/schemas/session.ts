/**
 * Session request schemas (§4.3, §4.4) and the pure helpers that shape the
 * stored response objects: the agent snapshot, resources and mount paths,
 * and what an update changes.
 */
import { z } from "zod";
import { badRequest } from "../errors.ts";
import { applyMetadataPatch, metadataPatchSchema, metadataSchema, queryArray, queryBool, queryInt } from "../validate.ts";
import { type AgentConfig, agentConfigProblem, mcpServersParam, modelParam, normalizeTools, skillParam, toolsParam } from "./agent.ts";
import { initialEventsSchema } from "./events.ts";

export const SESSION_STATUSES = ["rescheduling", "running", "idle", "terminated"] as const;
export type SessionStatus = (typeof SESSION_STATUSES)[number];

const id = z.string().min(1).max(256);
const INT4_MAX = 2 ** 31 - 1;

/** An absolute container path without `.`/`..` segments. */
export const mountPathSchema = z
  .string()
  .max(1024)
  .regex(/^\/[^\0]*$/, "mount_path must be an absolute path")
  .refine((p) => !p.split("/").some((seg) => seg === "." || seg === ".."), "mount_path must not contain . or .. segments");

const checkoutSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("branch"), name: z.string().min(1).max(255) }),
  z.object({ type: z.literal("commit"), sha: z.string().regex(/^[0-9a-fA-F]{4,64}$/, "sha must be a hexadecimal commit id") }),
]);

export const githubResourceParam = z.object({
  type: z.literal("github_repository"),
  url: z.url({ protocol: /^https$/ }).max(2048),
  authorization_token: z.string().min(1).max(4096).optional(),
  checkout: checkoutSchema.nullish(),
  mount_path: mountPathSchema.nullish(),
});

export const fileResourceParam = z.object({ type: z.literal("file"), file_id: id, mount_path: mountPathSchema.nullish() });

export const memoryStoreResourceParam = z.object({
  type: z.literal("memory_store"),
  memory_store_id: id,
  access: z.enum(["read_write", "read_only"]).nullish(),
  instructions: z.string().max(4096).nullish(),
});

export const resourceParam = z.discriminatedUnion("type", [githubResourceParam, fileResourceParam, memoryStoreResourceParam]);
export type ResourceParam = z.infer<typeof resourceParam>;

export const budgetSchema = z.object({
  type: z.literal("limit"),
  max_list_cost: z.object({
    // Integer minor units as a string, no leading zeros; bounded so it fits any numeric column later.
    amount: z.string().regex(/^(0|[1-9]\d{0,17})$/, "amount must be an integer string of minor units"),
    currency: z.literal("USD"),
  }),
});
export type Budget = z.infer<typeof budgetSchema>;

const agentRefParam = z.union([
  id,
  z.object({ type: z.literal("agent"), id, version: z.number().int().min(1).max(INT4_MAX).optional() }),
  z.object({
    type: z.literal("agent_with_overrides"),
    id,
    version: z.number().int().min(1).max(INT4_MAX).optional(),
    model: modelParam.optional(),
    system: z.string().max(100_000).nullish(),
    tools: toolsParam.optional(),
    skills: z.array(skillParam).max(64).optional(),
    mcp_servers: mcpServersParam.optional(),
  }),
]);
export type AgentRefParam = z.infer<typeof agentRefParam>;

const vaultIds = z.array(id).max(64);

export const sessionCreateSchema = z.object({
  agent: agentRefParam,
  environment_id: id,
  initial_events: initialEventsSchema.optional(),
  resources: z.array(resourceParam).max(100).optional(),
  vault_ids: vaultIds.optional(),
  metadata: metadataSchema.optional(),
  title: z.string().max(1024).nullish(),
  budget: budgetSchema.optional(),
});

export const sessionUpdateSchema = z.object({
  title: z.string().max(1024).nullish(),
  metadata: metadataPatchSchema.nullish(),
  budget: budgetSchema.nullish(),
  vault_ids: vaultIds.optional(),
  agent: z.object({ tools: toolsParam.optional(), mcp_servers: mcpServersParam.optional() }).optional(),
});
export type SessionUpdate = z.infer<typeof sessionUpdateSchema>;

const timestamp = z.iso.datetime({ offset: true });

export const sessionListQuery = z.object({
  agent_id: id.optional(),
  agent_version: queryInt(1, INT4_MAX).optional(),
  "created_at[gt]": timestamp.optional(),
  "created_at[gte]": timestamp.optional(),
  "created_at[lt]": timestamp.optional(),
  "created_at[lte]": timestamp.optional(),
  deployment_id: id.optional(),
  include_archived: queryBool.optional(),
  memory_store_id: id.optional(),
  order: z.enum(["asc", "desc"]).optional(),
  statuses: queryArray(z.enum(SESSION_STATUSES)).optional(),
});

export const resourceAddSchema = fileResourceParam;
export const resourceUpdateSchema = z.object({ authorization_token: z.string().min(1).max(4096) });

/** The agent as a session sees it (BetaManagedAgentsSessionAgent). */
export interface SessionAgent extends AgentConfig {
  type: "agent";
  id: string;
  version: number;
}

export interface Session {
  type: "session";
  id: string;
  status: SessionStatus;
  agent: SessionAgent;
  environment_id: string;
  title: string | null;
  metadata: Record<string, string>;
  resources: Record<string, unknown>[];
  vault_ids: string[];
  budget: Budget | null;
  usage: Record<string, unknown>;
  stats: Record<string, unknown>;
  outcome_evaluations: unknown[];
  created_at: string;
  updated_at: string;
  archived_at: string | null;
  deployment_id: string | null;
}

/** Only the snapshot fields of an agent (no metadata or timestamps). */
export function agentSnapshot(agent: AgentConfig & { id: string; version: number }): SessionAgent {
  return {
    type: "agent",
    id: agent.id,
    version: agent.version,
    name: agent.name,
    description: agent.description,
    system: agent.system,
    model: agent.model,
    tools: agent.tools,
    skills: agent.skills,
    mcp_servers: agent.mcp_servers,
    multiagent: agent.multiagent,
    execution_identity: agent.execution_identity,
  };
}

/** `/mnt/memory/<slug>`: the name lower-cased, each run of non-alphanumerics replaced by `-`. */
export function memoryMountPath(name: string, taken: ReadonlySet<string> = new Set()): string {
  const slug = name.toLowerCase().replace(/[^a-z0-9]+/g, "-") || "memory";
  // The worker refuses a mount folder that already exists, so two stores never share one.
  let path = `/mnt/memory/${slug}`;
  for (let n = 2; taken.has(path); n++) path = `/mnt/memory/${slug}-${n}`;
  return path;
}

/** `/workspace/<repo-name>` for `https://github.com/owner/repo(.git)`. */
export function defaultRepoMountPath(url: string): string {
  const last =
    new URL(url).pathname
      .split("/")
      .filter((s) => s !== "")
      .pop() ?? "repo";
  return `/workspace/${last.replace(/\.git$/, "") || "repo"}`;
}

export function defaultFileMountPath(fileId: string): string {
  return `/mnt/session/uploads/${fileId}`;
}

export interface UpdatePlan {
  next: Session;
  /** The fields a `session.updated` event carries (only those that changed). */
  changed: Record<string, unknown>;
  modified: boolean;
}

function planBudget(current: Session, input: SessionUpdate, plan: UpdatePlan): void {
  if (input.budget === undefined) return;
  if (current.status === "terminated") throw badRequest("budget: the session is terminated");
  if (input.budget === null) {
    if (current.budget === null) return;
    plan.next.budget = null;
    plan.changed.budget = null;
    return;
  }
  if (current.budget === null) {
    throw badRequest("budget: a budget cannot be added to a session created without one, or re-added once removed", {
      error_code: "budget_create_only",
    });
  }
  if (JSON.stringify(current.budget) === JSON.stringify(input.budget)) return;
  plan.next.budget = input.budget;
  plan.changed.budget = input.budget;
}

function planAgent(current: Session, input: SessionUpdate, plan: UpdatePlan): void {
  if (!input.agent || (input.agent.tools === undefined && input.agent.mcp_servers === undefined)) return;
  if (current.status === "running") throw badRequest("agent: the session's agent cannot be changed while it is running");
  const agent: SessionAgent = { ...current.agent };
  if (input.agent.tools !== undefined) agent.tools = normalizeTools(input.agent.tools);
  if (input.agent.mcp_servers !== undefined) agent.mcp_servers = input.agent.mcp_servers;
  const problem = agentConfigProblem(agent);
  if (problem) throw badRequest(`agent.${problem}`);
  if (JSON.stringify(agent) === JSON.stringify(current.agent)) return;
  plan.next.agent = agent;
  plan.changed.agent = agent;
}

/** What an update changes; the event carries only changed fields (metadata only when non-empty). */
export function planUpdate(current: Session, input: SessionUpdate, vaultIds: string[] | undefined): UpdatePlan {
  const plan: UpdatePlan = { next: { ...current }, changed: {}, modified: false };
  if (input.title !== undefined && (input.title ?? null) !== current.title) {
    plan.next.title = input.title ?? null;
    plan.changed.title = plan.next.title;
  }
  if (input.metadata !== undefined) {
    const metadata = applyMetadataPatch(current.metadata, input.metadata);
    if (JSON.stringify(metadata) !== JSON.stringify(current.metadata)) {
      plan.next.metadata = metadata;
      plan.modified = true;
      if (Object.keys(metadata).length > 0) plan.changed.metadata = metadata;
    }
  }
  planBudget(current, input, plan);
  planAgent(current, input, plan);
  if (vaultIds !== undefined && JSON.stringify(vaultIds) !== JSON.stringify(current.vault_ids)) {
    plan.next.vault_ids = vaultIds;
    plan.modified = true;
  }
  plan.modified ||= Object.keys(plan.changed).length > 0;
  return plan;
}
