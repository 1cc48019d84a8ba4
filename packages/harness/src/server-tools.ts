/**
 * The contract between the agent loop and tools that run inside the server
 * (MCP toolsets, web_fetch, web_search). Implementations live in `./server-tools/`.
 *
 * How the loop uses an executor:
 * - an executor whose `id` names one of the agent's `mcp_servers` is that MCP
 *   server: its calls are recorded as `agent.mcp_tool_use` /
 *   `agent.mcp_tool_result` with `mcp_server_name = id`; any other executor
 *   (web_fetch) is a built-in tool, recorded as `agent.tool_use` /
 *   `agent.tool_result`;
 * - `listTools` runs before every model request (cache inside the executor);
 *   a throw is reported as a `session.error` and the request goes on without
 *   that executor's tools;
 * - `execute` is called once per allowed call with the name the model used;
 *   a throw becomes an `is_error` result (plus a `session.error` when the
 *   error describes itself with `toSessionError`).
 */
import type { SecretBox, Storage } from "@openma/storage";

export interface ModelToolDefinition {
  name: string;
  description?: string;
  input_schema: Record<string, unknown>;
}

export interface ServerToolContext {
  sessionId: string;
  /** The session's agent snapshot (BetaManagedAgentsSessionAgent). */
  agent: unknown;
  /** The environment body (BetaEnvironment). */
  environment: unknown;
  vaultIds: string[];
  storage: Storage;
  /** The server's vault key: opens (and re-seals) the credentials' secrets at rest. */
  secrets?: SecretBox | undefined;
}

/** What an exposed tool name stands for, when the executor renames tools (MCP: `<server>__<tool>`). */
export interface ServerToolBinding {
  /** The tool's own name: the `name` recorded on the tool-use event. */
  toolName: string;
  /** The tool's resolved permission policy, when the executor resolves it itself. */
  permissionPolicy?: { type: "always_allow" | "always_ask" | "auto" };
}

/** A `search_result` block (BetaManagedAgentsSearchResultBlock): what web_search returns per hit. */
export interface SearchResultBlock {
  type: "search_result";
  source: string;
  title: string;
  content: Array<{ type: "text"; text: string }>;
  citations: { enabled: boolean };
}

/** What a call returns: the content of its `agent.tool_result` (or `agent.mcp_tool_result`). */
export interface ServerToolResult {
  content: Array<{ type: "text"; text: string } | SearchResultBlock>;
  isError: boolean;
}

export interface ServerToolExecutor {
  /** e.g. "web_fetch" or an MCP server name */
  readonly id: string;
  listTools(ctx: ServerToolContext): Promise<ModelToolDefinition[]>;
  handles(toolName: string): boolean;
  execute(
    call: { name: string; input: unknown; toolUseId: string },
    ctx: ServerToolContext,
    signal: AbortSignal,
  ): Promise<ServerToolResult>;
  /**
   * Optional: the `usage.server_tool_use` counter each executed call bumps
   * (e.g. `web_fetch_requests`); priced by the list price table.
   */
  readonly usageCounter?: "web_fetch_requests" | "web_search_requests";
  /** Optional: the binding of an exposed name listed by `listTools` (absent: the exposed name is the tool's name). */
  binding?(exposedName: string): ServerToolBinding | undefined;
}

/**
 * Executors that belong to one session run (they depend on the agent, e.g.
 * one per MCP server with open connections): made when a run starts and
 * closed when it ends, also after a failure.
 */
export interface SessionToolSet {
  executors: ServerToolExecutor[];
  close(): Promise<void>;
}

/** An error that knows its `session.error` form (e.g. an unreachable MCP server). */
export interface DescribedError {
  toSessionError(retryStatus: "retrying" | "exhausted" | "terminal"): Record<string, unknown>;
}

export function isDescribedError(err: unknown): err is DescribedError {
  return !!err && typeof (err as Partial<DescribedError>).toSessionError === "function";
}
