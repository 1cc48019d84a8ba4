/**
 * Which tools a session offers the model, who runs each one, and the
 * permission each call gets from the agent's `permission_policy`.
 *
 * - the six sandbox tools of `agent_toolset_20260401` run through the
 *   session's ToolSandboxPort (or the self-hosted worker), never offered in a
 *   sandbox-free (`config.type: "none"`) session;
 * - custom tools are answered by the client (`user.custom_tool_result`);
 * - server tools come from ServerToolExecutors: an executor whose `id` names
 *   one of the agent's `mcp_servers` is an MCP server (its calls are
 *   `agent.mcp_tool_use`, gated by that server's `mcp_toolset`); any other
 *   executor (web_fetch) is a built-in tool, gated by the toolset config of
 *   the tool's name.
 */
import type { ModelToolDefinition, ServerToolContext, ServerToolExecutor } from "./server-tools.ts";
import { SANDBOX_TOOL_DEFINITIONS, SANDBOX_TOOL_NAMES } from "./toolset/definitions.ts";

export type Policy = { type: "always_allow" } | { type: "always_ask" } | { type: "auto" };

export interface Permission {
  evaluated_permission: "allow" | "ask" | "deny";
  evaluation: Record<string, unknown>;
}

export type ToolRoute =
  | { type: "sandbox"; permission: Permission }
  | { type: "custom" }
  | {
      type: "server";
      executor: ServerToolExecutor;
      mcpServerName: string | null;
      /** The tool's own name (recorded on the event); the key of the route is the name the model sees. */
      toolName: string;
      permission: Permission;
    };

export interface SessionAgentView {
  id?: string;
  system?: string | null;
  model?: { id?: string } | string;
  tools?: unknown[];
  mcp_servers?: Array<{ name: string }>;
}

interface ToolsetEntry {
  type: string;
  mcp_server_name?: string;
  default_config?: { enabled?: boolean; permission_policy?: Policy };
  configs?: Array<{ name: string; enabled?: boolean; permission_policy?: Policy }>;
  name?: string;
  description?: string;
  input_schema?: Record<string, unknown>;
}

/** Tools that only read: `auto` lets them run; anything that changes state is held for the user. */
const READ_ONLY = new Set(["read", "glob", "grep", "web_fetch", "web_search"]);

export function evaluatePolicy(policy: Policy, toolName: string): Permission {
  if (policy.type === "always_ask") return { evaluated_permission: "ask", evaluation: { type: "always_ask" } };
  if (policy.type === "auto") {
    // No risk classifier runs here: auto means "allow what only reads, ask for the rest".
    return READ_ONLY.has(toolName)
      ? { evaluated_permission: "allow", evaluation: { type: "auto", evaluated_permission: { type: "allow" } } }
      : { evaluated_permission: "ask", evaluation: { type: "auto", evaluated_permission: { type: "ask", reason_code: "indeterminate" } } };
  }
  return { evaluated_permission: "allow", evaluation: { type: "always_allow" } };
}

function entries(agent: SessionAgentView): ToolsetEntry[] {
  return (Array.isArray(agent.tools) ? agent.tools : []) as ToolsetEntry[];
}

/** The toolset (or MCP toolset) setting for one tool name: enabled and its policy, or null when not enabled. */
function gate(entry: ToolsetEntry | undefined, name: string, fallback: Policy): Policy | null {
  if (!entry) return null;
  const config = entry.configs?.find((c) => c.name === name);
  const enabled = config?.enabled ?? entry.default_config?.enabled ?? true;
  if (!enabled) return null;
  return config?.permission_policy ?? entry.default_config?.permission_policy ?? fallback;
}

const ALLOW: Policy = { type: "always_allow" };
const ASK: Policy = { type: "always_ask" };

export function isMcpExecutor(agent: SessionAgentView, executor: ServerToolExecutor): boolean {
  return (agent.mcp_servers ?? []).some((s) => s.name === executor.id);
}

/** Policy of a toolset tool (sandbox or built-in server tool), or null when the agent does not enable it. */
export function toolsetPolicy(agent: SessionAgentView, name: string): Policy | null {
  return gate(
    entries(agent).find((t) => t.type === "agent_toolset_20260401"),
    name,
    ALLOW,
  );
}

function mcpPolicy(agent: SessionAgentView, server: string, name: string): Policy | null {
  return gate(
    entries(agent).find((t) => t.type === "mcp_toolset" && t.mcp_server_name === server),
    name,
    ASK,
  );
}

/** Policy for a server executor's tool, or null when the agent does not enable it. */
export function serverToolPolicy(agent: SessionAgentView, executor: ServerToolExecutor, name: string): Policy | null {
  if (isMcpExecutor(agent, executor)) return mcpPolicy(agent, executor.id, name);
  // Built-in server tools (web_fetch, web_search) are switched on in the agent toolset.
  return toolsetPolicy(agent, name);
}

export interface ToolCatalogue {
  definitions: ModelToolDefinition[];
  routes: Map<string, ToolRoute>;
  /** Executors whose tools could not be listed (e.g. an unreachable MCP server). */
  failures: Array<{ executor: ServerToolExecutor; mcp: boolean; error: unknown }>;
  /** The name the model sees for a recorded server tool use (`serverKey(server, toolName)` → exposed name). */
  exposed: Map<string, string>;
}

export function serverKey(mcpServerName: string | null, toolName: string): string {
  return `${mcpServerName ?? ""}\u0000${toolName}`;
}

/** Everything offered to the model for one request, by name (first definition of a name wins). */
export async function buildCatalogue(
  agent: SessionAgentView,
  sandboxFree: boolean,
  executors: readonly ServerToolExecutor[],
  ctx: ServerToolContext,
): Promise<ToolCatalogue> {
  const definitions: ModelToolDefinition[] = [];
  const routes = new Map<string, ToolRoute>();
  const failures: ToolCatalogue["failures"] = [];
  const exposed = new Map<string, string>();
  const offer = (def: ModelToolDefinition, route: ToolRoute): boolean => {
    if (routes.has(def.name)) return false;
    routes.set(def.name, route);
    definitions.push(def);
    return true;
  };
  if (!sandboxFree) {
    for (const def of SANDBOX_TOOL_DEFINITIONS) {
      const policy = toolsetPolicy(agent, def.name);
      if (policy) offer(def, { type: "sandbox", permission: evaluatePolicy(policy, def.name) });
    }
  }
  for (const tool of entries(agent)) {
    if (tool.type !== "custom" || !tool.name) continue;
    const def: ModelToolDefinition = { name: tool.name, input_schema: tool.input_schema ?? { type: "object" } };
    if (tool.description) def.description = tool.description;
    offer(def, { type: "custom" });
  }
  for (const executor of executors) {
    const mcp = isMcpExecutor(agent, executor);
    let listed: ModelToolDefinition[];
    try {
      listed = await executor.listTools(ctx);
    } catch (error) {
      failures.push({ executor, mcp, error });
      continue;
    }
    for (const def of listed) {
      const binding = executor.binding?.(def.name);
      const toolName = binding?.toolName ?? def.name;
      const policy = binding?.permissionPolicy ?? serverToolPolicy(agent, executor, toolName);
      if (!policy) continue;
      const mcpServerName = mcp ? executor.id : null;
      if (offer(def, { type: "server", executor, mcpServerName, toolName, permission: evaluatePolicy(policy, toolName) })) {
        exposed.set(serverKey(mcpServerName, toolName), def.name);
      }
    }
  }
  return { definitions, routes, failures, exposed };
}

/**
 * The name to call an executor with for a recorded tool use: the exposed
 * name it listed for that tool (listing first, so a fresh run knows its
 * bindings), or the recorded name when the executor does not rename tools.
 */
export async function exposedNameFor(executor: ServerToolExecutor, ctx: ServerToolContext, toolName: string): Promise<string> {
  if (!executor.binding) return toolName;
  const listed = await executor.listTools(ctx);
  return listed.find((def) => executor.binding?.(def.name)?.toolName === toolName)?.name ?? toolName;
}

export function isSandboxTool(name: string): boolean {
  return SANDBOX_TOOL_NAMES.has(name);
}
