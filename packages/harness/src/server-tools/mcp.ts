/**
 * MCP toolsets run from the server: each `mcp_servers` entry that an
 * `mcp_toolset` references is connected over streamable HTTP with
 * `@modelcontextprotocol/sdk`, its enabled tools are offered to the model
 * under `<server>__<tool>` names, and calls are forwarded.
 *
 * `createMcpExecutors(agent)` makes one executor per server (its `id` is the
 * server name) for one session run; they share credentials, connections and
 * the name registry. Call `close()` when the run ends (also after a
 * failure). Connections open on the first `listTools` and are reused by
 * `execute`. The model sees `<server>__<tool>`; `binding(name)` maps it back
 * to the server, the MCP tool name (the `agent.mcp_tool_use` `name`) and the
 * tool's own `permission_policy`.
 *
 * Failures of a server as a whole (unreachable, HTTP error, timeout while
 * connecting, rejected or unusable credential) throw `McpServerError`; the
 * loop turns it into a `session.error` with `toSessionError()`. A failing
 * tool (the server's `isError`, a JSON-RPC error, a call timeout) is an
 * ordinary `{ isError: true }` result for the model. An abort by the
 * caller's signal rethrows the signal's reason.
 */
import { createHash } from "node:crypto";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js";
import { z } from "zod";
import type { ModelToolDefinition, ServerToolContext, ServerToolExecutor } from "../server-tools.ts";
import { CredentialAuthError, SessionCredentials, type StoredCredential } from "./vault-credentials.ts";

export type McpErrorType = "mcp_connection_failed_error" | "mcp_authentication_failed_error";
export type RetryStatus = "retrying" | "exhausted" | "terminal";

/** A whole MCP server failed; maps 1:1 to a §5.5 `session.error` object. */
export class McpServerError extends Error {
  constructor(
    readonly errorType: McpErrorType,
    readonly mcpServerName: string,
    message: string,
  ) {
    super(message);
    this.name = "McpServerError";
  }

  toSessionError(retryStatus: RetryStatus = "terminal") {
    return { type: this.errorType, message: this.message, mcp_server_name: this.mcpServerName, retry_status: { type: retryStatus } };
  }
}

export function isMcpServerError(err: unknown): err is McpServerError {
  return err instanceof McpServerError;
}

export type PermissionPolicy = { type: "always_allow" } | { type: "always_ask" } | { type: "auto" };

export interface McpToolBinding {
  /** The name the model sees. */
  exposedName: string;
  /** `mcp_server_name` for `agent.mcp_tool_use`. */
  serverName: string;
  /** The tool's own name on the MCP server (the event's `name`). */
  toolName: string;
  permissionPolicy: PermissionPolicy;
}

export interface McpExecutorOptions {
  /** Bound on connecting (initialize handshake) and on listing tools. Default 15 s. */
  connectTimeoutMs?: number;
  /** Bound on one tool call. Default 120 s. */
  callTimeoutMs?: number;
  /** Cap on the text returned for one call. Default 100 000 characters. */
  maxResultChars?: number;
  /** Clock for OAuth expiry. */
  now?: () => number;
  /** fetch used for OAuth token refresh. */
  fetch?: typeof fetch;
}

/** The Messages API accepts `^[a-zA-Z0-9_-]{1,64}$` for tool names in every version we target. */
const MAX_TOOL_NAME = 64;
const MAX_TOOLS_PER_SERVER = 1000;
const MAX_LIST_PAGES = 50;
const MAX_DESCRIPTION = 10_000;
const BUILTIN_NAMES = ["bash", "read", "write", "edit", "glob", "grep", "web_fetch", "web_search"];

const policySchema = z.object({ type: z.enum(["always_allow", "always_ask", "auto"]) });
const toolConfig = z.object({ enabled: z.boolean().nullish(), permission_policy: policySchema.nullish() });
const mcpToolsetSchema = z.object({
  type: z.literal("mcp_toolset"),
  mcp_server_name: z.string().min(1),
  default_config: toolConfig.nullish(),
  configs: z.array(toolConfig.extend({ name: z.string() })).nullish(),
});
const agentSchema = z.object({
  tools: z.array(z.unknown()).nullish(),
  mcp_servers: z.array(z.object({ name: z.string().min(1), url: z.string().min(1) })).nullish(),
});

type McpToolset = z.infer<typeof mcpToolsetSchema>;

interface ServerPlan {
  name: string;
  url: string;
  toolset: McpToolset;
}

/** The servers an agent's mcp_toolsets reference (first toolset per server wins), plus names already taken. */
export function planMcpServers(agent: unknown): { servers: ServerPlan[]; takenNames: Set<string> } {
  const parsed = agentSchema.safeParse(agent);
  const takenNames = new Set(BUILTIN_NAMES);
  if (!parsed.success) return { servers: [], takenNames };
  const byName = new Map((parsed.data.mcp_servers ?? []).map((s) => [s.name, s.url]));
  const servers: ServerPlan[] = [];
  for (const tool of parsed.data.tools ?? []) {
    const custom = tool as { type?: unknown; name?: unknown };
    if (custom.type === "custom" && typeof custom.name === "string") takenNames.add(custom.name);
    const toolset = mcpToolsetSchema.safeParse(tool);
    if (!toolset.success) continue;
    const url = byName.get(toolset.data.mcp_server_name);
    if (url === undefined || servers.some((s) => s.name === toolset.data.mcp_server_name)) continue;
    servers.push({ name: toolset.data.mcp_server_name, url, toolset: toolset.data });
  }
  return { servers, takenNames };
}

function toolSettings(toolset: McpToolset, toolName: string): { enabled: boolean; permissionPolicy: PermissionPolicy } {
  const cfg = toolset.configs?.find((c) => c.name === toolName);
  return {
    enabled: cfg?.enabled ?? toolset.default_config?.enabled ?? true,
    // MCP tools reach third parties: ask unless configured otherwise (the agent schema's default too).
    permissionPolicy: cfg?.permission_policy ?? toolset.default_config?.permission_policy ?? { type: "always_ask" },
  };
}

/** `<server>__<tool>` restricted to the Messages API name alphabet and length; hashed when long or taken. */
export function exposedToolName(serverName: string, toolName: string, taken: ReadonlySet<string>): string {
  const clean = (s: string) => s.replace(/[^A-Za-z0-9_-]/g, "_");
  const plain = `${clean(serverName)}__${clean(toolName)}`;
  if (plain.length <= MAX_TOOL_NAME && !taken.has(plain)) return plain;
  const hash = createHash("sha256").update(`${serverName}\u0000${toolName}`).digest("hex").slice(0, 8);
  for (let n = 0; ; n++) {
    const suffix = n === 0 ? `_${hash}` : `_${hash}_${n}`;
    const name = `${plain.slice(0, MAX_TOOL_NAME - suffix.length)}${suffix}`;
    if (!taken.has(name)) return name;
  }
}

interface Connection {
  client: Client;
  transport: StreamableHTTPClientTransport;
}

function clamp(value: number | undefined, fallback: number): number {
  if (value === undefined || !Number.isFinite(value)) return fallback;
  return Math.min(Math.max(Math.trunc(value), 1), 600_000);
}

function networkReason(err: unknown): string {
  const cause = (err as { cause?: { code?: unknown } }).cause;
  if (cause && typeof cause.code === "string" && /^[A-Z_]{2,40}$/.test(cause.code)) return cause.code;
  return (err as Error)?.name ?? "error";
}

/**
 * The shared state of one session run: credentials, one connection per
 * server, and the names handed out so far (unique across servers).
 */
class McpRun {
  sessionId: string | null = null;
  credentials: SessionCredentials | null = null;
  readonly connections = new Map<string, Connection>();
  private readonly connecting = new Map<string, Promise<Connection>>();
  readonly takenNames: Set<string>;
  readonly bindings = new Map<string, McpToolBinding>();
  closed = false;
  readonly connectTimeoutMs: number;
  readonly callTimeoutMs: number;
  readonly maxResultChars: number;

  constructor(
    readonly options: McpExecutorOptions,
    takenNames: Set<string>,
  ) {
    this.takenNames = takenNames;
    this.connectTimeoutMs = clamp(options.connectTimeoutMs, 15_000);
    this.callTimeoutMs = clamp(options.callTimeoutMs, 120_000);
    this.maxResultChars = clamp(options.maxResultChars, 100_000);
  }

  bind(ctx: ServerToolContext): void {
    if (this.closed) throw new Error("MCP executors are closed");
    if (this.sessionId === null) this.sessionId = ctx.sessionId;
    else if (this.sessionId !== ctx.sessionId) throw new Error("MCP executors serve one session run; create them per session");
  }

  async loadCredentials(ctx: ServerToolContext): Promise<SessionCredentials> {
    if (!this.credentials) {
      const { now, fetch: fetchImpl } = this.options;
      this.credentials = await SessionCredentials.load(ctx.storage, ctx.vaultIds, {
        secrets: ctx.secrets,
        ...(now ? { now } : {}),
        ...(fetchImpl ? { fetch: fetchImpl } : {}),
      });
    }
    return this.credentials;
  }

  redact(text: string): string {
    return this.credentials ? this.credentials.redactor.redact(text) : text;
  }

  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.connections.values()];
    this.connections.clear();
    await Promise.all(all.map((c) => c.client.close().catch(() => undefined)));
  }

  /** The open connection to `plan`, opening it once even when several callers ask at the same time. */
  async connection(plan: ServerPlan, credentials: SessionCredentials): Promise<Connection> {
    const existing = this.connections.get(plan.name);
    if (existing) return existing;
    let pending = this.connecting.get(plan.name);
    if (!pending) {
      pending = this.open(plan, credentials).finally(() => this.connecting.delete(plan.name));
      this.connecting.set(plan.name, pending);
    }
    return pending;
  }

  private async open(plan: ServerPlan, credentials: SessionCredentials): Promise<Connection> {
    const credential = credentials.mcpCredentialFor(plan.url);
    let url: URL;
    try {
      url = new URL(plan.url);
    } catch {
      throw new McpServerError("mcp_connection_failed_error", plan.name, `MCP server ${plan.name} has an invalid URL`);
    }
    // One retry after a 401: an mcp_oauth credential may refresh a token the server no longer accepts.
    for (let attempt = 0; ; attempt++) {
      const headers = await this.authHeaders(plan.name, credential, credentials, attempt > 0);
      const client = new Client({ name: "openma", version: "0.1.0" });
      // Transport errors surface through the rejected request; nothing is logged (messages can carry server text).
      client.onerror = () => undefined;
      const transport = new StreamableHTTPClientTransport(url, {
        requestInit: { headers },
        reconnectionOptions: { maxRetries: 0, initialReconnectionDelay: 1000, maxReconnectionDelay: 1000, reconnectionDelayGrowFactor: 1 },
      });
      try {
        await client.connect(transport, { timeout: this.connectTimeoutMs });
        if (this.closed) throw new McpServerError("mcp_connection_failed_error", plan.name, `MCP server ${plan.name}: the run was closed`);
        const conn = { client, transport };
        this.connections.set(plan.name, conn);
        return conn;
      } catch (err) {
        await client.close().catch(() => undefined);
        const failure = this.serverError(plan.name, err, "connecting");
        const canRefresh = credential?.auth.type === "mcp_oauth" && !!credential.auth.refresh;
        if (failure.errorType === "mcp_authentication_failed_error" && canRefresh && attempt === 0) continue;
        throw failure;
      }
    }
  }

  private async authHeaders(
    serverName: string,
    credential: StoredCredential | undefined,
    credentials: SessionCredentials,
    forceRefresh: boolean,
  ): Promise<Record<string, string>> {
    if (!credential) return {};
    try {
      const token = await credentials.bearerToken(credential, { forceRefresh });
      return { authorization: `Bearer ${token}` };
    } catch (err) {
      throw this.serverError(serverName, err, "authenticating");
    }
  }

  serverError(serverName: string, err: unknown, phase: string): McpServerError {
    if (err instanceof McpServerError) return err;
    const auth = (why: string) =>
      new McpServerError(
        "mcp_authentication_failed_error",
        serverName,
        `MCP server ${serverName} authentication failed while ${phase} (${why})`,
      );
    if (err instanceof CredentialAuthError) return auth(this.redact(err.message));
    if (err instanceof UnauthorizedError) return auth("unauthorized");
    if (err instanceof StreamableHTTPError && (err.code === 401 || err.code === 403)) return auth(`HTTP ${err.code}`);
    let reason: string;
    if (err instanceof StreamableHTTPError) reason = err.code !== undefined && err.code > 0 ? `HTTP ${err.code}` : "unexpected response";
    else if (err instanceof McpError) reason = err.code === ErrorCode.RequestTimeout ? "timed out" : `protocol error ${err.code}`;
    else reason = networkReason(err);
    return new McpServerError("mcp_connection_failed_error", serverName, `MCP server ${serverName} failed while ${phase} (${reason})`);
  }
}

type ToolResult = { content: Array<{ type: "text"; text: string }>; isError: boolean };

/**
 * One MCP server of the agent as a ServerToolExecutor. Its `id` is the
 * server's name (`mcp_server_name`), so the loop can tell MCP executors
 * from built-in ones by matching `id` against the agent's `mcp_servers`.
 */
export class McpServerExecutor implements ServerToolExecutor {
  readonly id: string;
  private definitions: ModelToolDefinition[] | null = null;

  constructor(
    private readonly run: McpRun,
    private readonly plan: ServerPlan,
  ) {
    this.id = plan.name;
  }

  handles(toolName: string): boolean {
    return this.run.bindings.get(toolName)?.serverName === this.plan.name;
  }

  /** Which MCP tool an exposed name stands for (event `name`, `mcp_server_name`, per-tool permission policy). */
  binding(toolName: string): McpToolBinding | undefined {
    const b = this.run.bindings.get(toolName);
    return b?.serverName === this.plan.name ? b : undefined;
  }

  async listTools(ctx: ServerToolContext): Promise<ModelToolDefinition[]> {
    this.run.bind(ctx);
    if (this.definitions) return this.definitions;
    const credentials = await this.run.loadCredentials(ctx);
    const conn = await this.run.connection(this.plan, credentials);
    const tools: Array<{ name: string; title?: string; description?: string; inputSchema: Record<string, unknown> }> = [];
    let cursor: string | undefined;
    try {
      for (let page = 0; page < MAX_LIST_PAGES && tools.length < MAX_TOOLS_PER_SERVER; page++) {
        const res = await conn.client.listTools(cursor ? { cursor } : undefined, { timeout: this.run.connectTimeoutMs });
        tools.push(...res.tools);
        if (!res.nextCursor) break;
        cursor = res.nextCursor;
      }
    } catch (err) {
      throw this.run.serverError(this.plan.name, err, "listing tools");
    }
    const definitions: ModelToolDefinition[] = [];
    for (const tool of tools.slice(0, MAX_TOOLS_PER_SERVER)) {
      const settings = toolSettings(this.plan.toolset, tool.name);
      if (!settings.enabled) continue;
      const exposedName = exposedToolName(this.plan.name, tool.name, this.run.takenNames);
      this.run.takenNames.add(exposedName);
      this.run.bindings.set(exposedName, {
        exposedName,
        serverName: this.plan.name,
        toolName: tool.name,
        permissionPolicy: settings.permissionPolicy,
      });
      const description = tool.description ?? tool.title;
      definitions.push({
        name: exposedName,
        ...(description ? { description: `[MCP server ${this.plan.name}] ${description}`.slice(0, MAX_DESCRIPTION) } : {}),
        input_schema: tool.inputSchema,
      });
    }
    this.definitions = definitions;
    return definitions;
  }

  async execute(
    call: { name: string; input: unknown; toolUseId: string },
    ctx: ServerToolContext,
    signal: AbortSignal,
  ): Promise<ToolResult> {
    this.run.bind(ctx);
    signal.throwIfAborted();
    const binding = this.binding(call.name);
    if (!binding) return this.toolError(`Unknown MCP tool ${JSON.stringify(call.name)} on server ${this.plan.name}`);
    const input = call.input ?? {};
    if (typeof input !== "object" || Array.isArray(input)) return this.toolError("MCP tool input must be a JSON object");
    const credentials = await this.run.loadCredentials(ctx);
    const conn = await this.run.connection(this.plan, credentials);
    try {
      const result = await conn.client.callTool({ name: binding.toolName, arguments: input as Record<string, unknown> }, undefined, {
        signal,
        timeout: this.run.callTimeoutMs,
      });
      return this.convertResult(result);
    } catch (err) {
      if (signal.aborted) throw signal.reason;
      if (err instanceof McpError && err.code === ErrorCode.RequestTimeout) {
        return this.toolError(`MCP tool ${binding.toolName} on server ${this.plan.name} timed out after ${this.run.callTimeoutMs} ms`);
      }
      if (err instanceof McpError && err.code !== ErrorCode.ConnectionClosed) {
        return this.toolError(`MCP server ${this.plan.name} refused the call: ${err.message}`);
      }
      // The connection is unusable: drop it so a later call reconnects, and report the server failure.
      if (this.run.connections.get(this.plan.name) === conn) this.run.connections.delete(this.plan.name);
      await conn.client.close().catch(() => undefined);
      throw this.run.serverError(this.plan.name, err, "calling a tool");
    }
  }

  private toolError(message: string): ToolResult {
    return { content: [{ type: "text", text: this.run.redact(message) }], isError: true };
  }

  private convertResult(result: Record<string, unknown>): ToolResult {
    let budget = this.run.maxResultChars;
    const content: Array<{ type: "text"; text: string }> = [];
    for (const text of mcpContentToText(result)) {
      if (budget <= 0) break;
      const redacted = this.run.redact(text);
      const piece = redacted.length > budget ? `${redacted.slice(0, budget)}\n[truncated]` : redacted;
      budget -= piece.length;
      if (piece.length > 0) content.push({ type: "text", text: piece });
    }
    return { content, isError: result.isError === true };
  }
}

export interface McpExecutors {
  /** One executor per MCP server that an `mcp_toolset` references, in toolset order. */
  executors: McpServerExecutor[];
  /** The binding for an exposed tool name, whichever server it belongs to. */
  binding(toolName: string): McpToolBinding | undefined;
  /** Closes every connection of the run; call it when the run ends, also after a failure. */
  close(): Promise<void>;
}

/**
 * The MCP executors of one session run. Connections open on first use
 * (`listTools`) and stay open until `close()`.
 */
export function createMcpExecutors(agent: unknown, options: McpExecutorOptions = {}): McpExecutors {
  const { servers, takenNames } = planMcpServers(agent);
  const run = new McpRun(options, takenNames);
  return {
    executors: servers.map((plan) => new McpServerExecutor(run, plan)),
    binding: (toolName) => run.bindings.get(toolName),
    close: () => run.close(),
  };
}

function approxBytes(base64: unknown): number {
  return typeof base64 === "string" ? Math.floor((base64.length * 3) / 4) : 0;
}

/** MCP call result → text pieces; non-text content is described, not passed on. */
export function mcpContentToText(result: Record<string, unknown>): string[] {
  if ("toolResult" in result) return [JSON.stringify(result.toolResult) ?? "null"];
  const items = Array.isArray(result.content) ? (result.content as Array<Record<string, unknown>>) : [];
  const out: string[] = [];
  for (const item of items) {
    const mime = typeof item.mimeType === "string" ? item.mimeType : "unknown type";
    switch (item.type) {
      case "text":
        if (typeof item.text === "string") out.push(item.text);
        break;
      case "image":
      case "audio":
        out.push(`[${item.type} content: ${mime}, about ${approxBytes(item.data)} bytes, not shown]`);
        break;
      case "resource_link":
        out.push(`[resource link: ${String(item.name ?? "")} ${String(item.uri ?? "")}]`);
        break;
      case "resource": {
        const res = (item.resource ?? {}) as Record<string, unknown>;
        const resMime = typeof res.mimeType === "string" ? res.mimeType : "unknown type";
        if (typeof res.text === "string") out.push(`[resource ${String(res.uri ?? "")}]\n${res.text}`);
        else out.push(`[binary resource ${String(res.uri ?? "")}: ${resMime}, about ${approxBytes(res.blob)} bytes, not shown]`);
        break;
      }
      default:
        out.push(`[unsupported MCP content type ${JSON.stringify(item.type)}]`);
    }
  }
  if (out.length === 0 && result.structuredContent !== undefined) out.push(JSON.stringify(result.structuredContent));
  return out;
}
