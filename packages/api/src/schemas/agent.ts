/**
 * Agent request schemas and their normalisation into the response shape.
 * Sessions reuse `normalizeAgentConfig` for `agent_with_overrides` and for
 * session-level tool swaps, so there is one place that defines an agent.
 */
import { z } from "zod";
import { type Multiagent, multiagentParam } from "./multiagent.ts";

const policy = z.discriminatedUnion("type", [
  z.object({ type: z.literal("always_allow") }),
  z.object({ type: z.literal("always_ask") }),
  z.object({ type: z.literal("auto") }),
]);
export type PermissionPolicy = z.infer<typeof policy>;

export const BUILTIN_TOOL_NAMES = ["bash", "read", "write", "edit", "glob", "grep", "web_fetch", "web_search"] as const;

/** web_search domain entries: a plain hostname, optionally with a path suffix (no scheme or port). */
const searchDomain = z
  .string()
  .max(2048)
  .regex(/^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(\/\S*)?$/i, "must be a hostname, optionally with a path");
const searchDomains = z.array(searchDomain).min(1, "must not be empty (omit it instead)").max(64);
const webSearchDomains = z
  .object({ allowed_domains: searchDomains.optional(), blocked_domains: searchDomains.optional() })
  .refine(
    (c) => c.allowed_domains === undefined || c.blocked_domains === undefined,
    "allowed_domains and blocked_domains cannot be combined",
  );

const toolsetConfigParam = z
  .object({
    name: z.enum(BUILTIN_TOOL_NAMES),
    type: z.enum(BUILTIN_TOOL_NAMES).optional(),
    enabled: z.boolean().nullish(),
    permission_policy: policy.nullish(),
  })
  .loose()
  .refine((c) => c.type === undefined || c.type === c.name, "type must equal name")
  .superRefine((c, ctx) => {
    if (c.name !== "web_search") return;
    const domains = webSearchDomains.safeParse(c);
    for (const issue of domains.success ? [] : domains.error.issues)
      ctx.addIssue({ code: "custom", path: issue.path, message: issue.message });
  });

const defaultConfigParam = z.object({ enabled: z.boolean().nullish(), permission_policy: policy.nullish() }).nullish();

const toolsetParam = z.object({
  type: z.literal("agent_toolset_20260401"),
  default_config: defaultConfigParam,
  configs: z.array(toolsetConfigParam).max(BUILTIN_TOOL_NAMES.length).optional(),
});

const mcpToolsetParam = z.object({
  type: z.literal("mcp_toolset"),
  mcp_server_name: z.string().min(1).max(255),
  default_config: defaultConfigParam,
  configs: z
    .array(z.object({ name: z.string().min(1).max(256), enabled: z.boolean().nullish(), permission_policy: policy.nullish() }))
    .max(256)
    .optional(),
});

const customToolParam = z.object({
  type: z.literal("custom"),
  name: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[A-Za-z0-9_-]+$/, "custom tool names use only letters, digits, _ and -"),
  description: z.string().max(10_000),
  input_schema: z
    .object({ type: z.literal("object"), properties: z.record(z.string(), z.unknown()).nullish(), required: z.array(z.string()).nullish() })
    .loose(),
});

export const toolParam = z.discriminatedUnion("type", [toolsetParam, mcpToolsetParam, customToolParam]);
export const toolsParam = z.array(toolParam).max(256);

export const skillParam = z.object({
  type: z.enum(["anthropic", "custom"]),
  skill_id: z.string().min(1).max(255),
  version: z.string().min(1).max(255).nullish(),
});

export const mcpServerParam = z.object({
  type: z.literal("url"),
  name: z.string().min(1).max(255),
  url: z.url({ protocol: /^https?$/ }),
});
export const mcpServersParam = z
  .array(mcpServerParam)
  .max(20)
  .refine((servers) => new Set(servers.map((s) => s.name)).size === servers.length, "mcp server names must be unique");

const effortName = z.enum(["low", "medium", "high", "xhigh", "max"]);
export const modelParam = z.union([
  z.string().min(1).max(256),
  z.object({
    id: z.string().min(1).max(256),
    effort: z.union([effortName, z.object({ type: effortName })]).nullish(),
    inference_geo: z.string().max(64).nullish(),
    speed: z.enum(["standard", "fast"]).nullish(),
  }),
]);

export const executionIdentityParam = z.discriminatedUnion("type", [
  z.object({ type: z.literal("service_account") }),
  z.object({ type: z.literal("aws_role"), role_arn: z.string().min(1).max(2048) }),
]);

const metadata = z.record(z.string().max(64), z.string().max(512)).refine((m) => Object.keys(m).length <= 16, "at most 16 metadata pairs");

export const agentCreateSchema = z.object({
  name: z.string().min(1).max(256),
  model: modelParam,
  system: z.string().max(100_000).nullish(),
  description: z.string().max(2048).nullish(),
  tools: toolsParam.optional(),
  skills: z.array(skillParam).max(64).optional(),
  mcp_servers: mcpServersParam.optional(),
  metadata: metadata.optional(),
  multiagent: multiagentParam.nullish(),
  execution_identity: executionIdentityParam.nullish(),
});

export const agentUpdateSchema = z.object({
  version: z.number().int().min(1).optional(),
  name: z.string().min(1).max(256).optional(),
  model: modelParam.optional(),
  system: z.string().max(100_000).nullish(),
  description: z.string().max(2048).nullish(),
  tools: toolsParam.nullish(),
  skills: z.array(skillParam).max(64).nullish(),
  mcp_servers: mcpServersParam.nullish(),
  metadata: z.record(z.string().max(64), z.string().max(512).nullable()).nullish(),
  multiagent: multiagentParam.nullish(),
  execution_identity: executionIdentityParam.nullish(),
});

export type AgentCreate = z.infer<typeof agentCreateSchema>;

/** The configurable part of an agent, in response shape. */
export interface AgentConfig {
  name: string;
  description: string | null;
  system: string | null;
  model: { id: string; effort?: { type: string }; inference_geo?: string; speed?: "standard" | "fast" };
  tools: unknown[];
  skills: Array<{ type: "anthropic" | "custom"; skill_id: string; version: string }>;
  mcp_servers: Array<{ type: "url"; name: string; url: string }>;
  multiagent: Multiagent | null;
  execution_identity: { type: "service_account" } | { type: "aws_role"; role_arn: string };
}

export function normalizeModel(model: z.infer<typeof modelParam>): AgentConfig["model"] {
  if (typeof model === "string") return { id: model };
  const out: AgentConfig["model"] = { id: model.id };
  if (model.effort) out.effort = typeof model.effort === "string" ? { type: model.effort } : model.effort;
  if (model.inference_geo) out.inference_geo = model.inference_geo;
  if (model.speed) out.speed = model.speed;
  return out;
}

const ALLOW: PermissionPolicy = { type: "always_allow" };
const ASK: PermissionPolicy = { type: "always_ask" };

export function normalizeTools(tools: z.infer<typeof toolsParam>): unknown[] {
  return tools.map((tool) => {
    if (tool.type === "custom") {
      return { type: "custom", name: tool.name, description: tool.description, input_schema: tool.input_schema };
    }
    // Built-in tools default to always_allow; MCP tools reach third parties, so they default to always_ask.
    const fallback = tool.type === "mcp_toolset" ? ASK : ALLOW;
    const defaults = {
      enabled: tool.default_config?.enabled ?? true,
      permission_policy: tool.default_config?.permission_policy ?? fallback,
    };
    const configs = (tool.configs ?? []).map((cfg) => {
      const { type: _type, enabled, permission_policy, ...rest } = cfg as typeof cfg & { type?: string };
      return {
        ...rest,
        ...(tool.type === "agent_toolset_20260401" ? { type: cfg.name } : {}),
        name: cfg.name,
        enabled: enabled ?? defaults.enabled,
        permission_policy: permission_policy ?? defaults.permission_policy,
      };
    });
    if (tool.type === "mcp_toolset") {
      return { type: "mcp_toolset", mcp_server_name: tool.mcp_server_name, default_config: defaults, configs };
    }
    return { type: tool.type, default_config: defaults, configs };
  });
}

export function normalizeSkills(skills: z.infer<typeof skillParam>[]): AgentConfig["skills"] {
  return skills.map((s) => ({ type: s.type, skill_id: s.skill_id, version: s.version ?? "latest" }));
}

/** Checks cross-field rules zod cannot express alone. Returns an error message or null. */
export function agentConfigProblem(config: Pick<AgentConfig, "tools" | "mcp_servers">): string | null {
  const servers = new Set(config.mcp_servers.map((s) => s.name));
  const customNames = new Set<string>();
  for (const tool of config.tools as Array<{ type: string; name?: string; mcp_server_name?: string }>) {
    if (tool.type === "mcp_toolset" && !servers.has(tool.mcp_server_name ?? "")) {
      return `tools: mcp_toolset references unknown mcp server ${JSON.stringify(tool.mcp_server_name)}`;
    }
    if (tool.type === "custom") {
      if (customNames.has(tool.name ?? "")) return `tools: duplicate custom tool name ${JSON.stringify(tool.name)}`;
      customNames.add(tool.name ?? "");
    }
  }
  return null;
}
