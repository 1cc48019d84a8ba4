/**
 * The `web_search` tool, run inside the server through a SearchProvider.
 *
 * - settings come from the agent toolset's `web_search` entry:
 *   `allowed_domains` / `blocked_domains` (a host matches a domain and its
 *   subdomains; an entry may carry a path prefix, `docs.example.com/api`)
 *   and `user_location`; the domain lists are passed to the provider and
 *   enforced again here on every hit, so a provider that ignores or widens
 *   them cannot leak a result the agent's author excluded;
 * - each hit becomes a `search_result` block (source, title, text,
 *   citations on), the API's shape for search results in a tool result,
 *   which the conversation replays to the model as it is;
 * - every executed call counts one `web_search_requests` (the loop records
 *   it with the result); a provider failure is an `is_error` result naming
 *   the provider, never a crash of the turn.
 */
import { z } from "zod";
import type { ModelToolDefinition, ServerToolContext, ServerToolExecutor, ServerToolResult } from "../server-tools.ts";
import { hostInDomain } from "./host-policy.ts";
import { type SearchHit, type SearchProvider, SearchProviderError, type UserLocation } from "./search-provider.ts";
import { domainList, toolsetToolConfig } from "./toolset-config.ts";

const userLocationSchema = z.object({
  type: z.literal("approximate"),
  city: z.string().max(256).nullish(),
  region: z.string().max(256).nullish(),
  country: z.string().max(64).nullish(),
  timezone: z.string().max(256).nullish(),
});

const webSearchConfigSchema = z.object({
  name: z.literal("web_search"),
  enabled: z.boolean().nullish(),
  allowed_domains: domainList.nullish(),
  blocked_domains: domainList.nullish(),
  user_location: userLocationSchema.nullish(),
});

export interface WebSearchConfig {
  enabled: boolean;
  allowedDomains: string[] | null;
  blockedDomains: string[] | null;
  userLocation: UserLocation | null;
}

/** The agent's web_search settings from its `agent_toolset_20260401` entry; disabled when absent or unreadable. */
export function webSearchConfig(agent: unknown): WebSearchConfig {
  const found = toolsetToolConfig(agent, "web_search", webSearchConfigSchema);
  const data = found?.config;
  return {
    enabled: found?.enabled ?? false,
    allowedDomains: data?.allowed_domains ?? null,
    blockedDomains: data?.blocked_domains ?? null,
    userLocation: data?.user_location ?? null,
  };
}

export const WEB_SEARCH_TOOL: ModelToolDefinition = {
  name: "web_search",
  description: "Search the web and return the most relevant pages, each with its URL, title and an extract of its text.",
  input_schema: {
    type: "object",
    properties: { query: { type: "string", description: "The search query." } },
    required: ["query"],
  },
};

const inputSchema = z.object({ query: z.string().trim().min(1).max(2000) });

/** True when `url`'s host is in `entry`'s domain and its path starts with `entry`'s path suffix, if any. */
export function urlInDomainEntry(url: URL, entry: string): boolean {
  const slash = entry.indexOf("/");
  const domain = slash < 0 ? entry : entry.slice(0, slash);
  const path = slash < 0 ? "" : entry.slice(slash).replace(/\/+$/, "");
  if (!hostInDomain(url.hostname, domain)) return false;
  return path === "" || url.pathname === path || url.pathname.startsWith(`${path}/`);
}

/** Whether a hit may be shown under the agent's domain lists (a hit whose URL cannot be parsed never is). */
export function hitAllowed(hit: SearchHit, config: Pick<WebSearchConfig, "allowedDomains" | "blockedDomains">): boolean {
  let url: URL;
  try {
    url = new URL(hit.url);
  } catch {
    return false;
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") return false;
  if (config.allowedDomains && !config.allowedDomains.some((d) => urlInDomainEntry(url, d))) return false;
  return !config.blockedDomains?.some((d) => urlInDomainEntry(url, d));
}

export interface WebSearchOptions {
  /** Hits asked of the provider per query. Default 5. */
  maxResults?: number;
  /** Characters of each hit's text passed on. Default 4000. */
  maxCharsPerResult?: number;
}

const errorResult = (text: string): ServerToolResult => ({ content: [{ type: "text", text }], isError: true });

export class WebSearchExecutor implements ServerToolExecutor {
  readonly id = "web_search";
  readonly usageCounter = "web_search_requests" as const;
  private readonly maxResults: number;
  private readonly maxChars: number;

  constructor(
    private readonly provider: SearchProvider,
    options: WebSearchOptions = {},
  ) {
    this.maxResults = Math.min(Math.max(Math.trunc(options.maxResults ?? 5), 1), 20);
    this.maxChars = Math.min(Math.max(Math.trunc(options.maxCharsPerResult ?? 4000), 100), 100_000);
  }

  handles(toolName: string): boolean {
    return toolName === "web_search";
  }

  async listTools(ctx: ServerToolContext): Promise<ModelToolDefinition[]> {
    return webSearchConfig(ctx.agent).enabled ? [WEB_SEARCH_TOOL] : [];
  }

  async execute(call: { name: string; input: unknown }, ctx: ServerToolContext, signal: AbortSignal): Promise<ServerToolResult> {
    signal.throwIfAborted();
    const config = webSearchConfig(ctx.agent);
    if (!config.enabled) return errorResult("web_search is not enabled for this agent");
    const parsed = inputSchema.safeParse(call.input);
    if (!parsed.success) return errorResult(`input.query: ${parsed.error.issues[0]?.message ?? "invalid"}`);
    const query = parsed.data.query;
    let hits: SearchHit[];
    try {
      hits = await this.provider.search(
        {
          query,
          allowedDomains: config.allowedDomains,
          blockedDomains: config.blockedDomains,
          userLocation: config.userLocation,
          maxResults: this.maxResults,
        },
        signal,
      );
    } catch (err) {
      signal.throwIfAborted();
      const message = err instanceof SearchProviderError ? err.message : "the search provider failed unexpectedly";
      return errorResult(`web_search: the ${this.provider.name} search provider failed: ${message}`);
    }
    const shown = hits.filter((hit) => hitAllowed(hit, config)).slice(0, this.maxResults);
    if (shown.length === 0)
      return { content: [{ type: "text", text: `web_search: no results for ${JSON.stringify(query)}` }], isError: false };
    return {
      content: shown.map((hit) => ({
        type: "search_result" as const,
        source: hit.url,
        title: hit.title.slice(0, 1000) || hit.url,
        content: [{ type: "text" as const, text: hit.content.slice(0, this.maxChars) || "(no extract)" }],
        citations: { enabled: true },
      })),
      isError: false,
    };
  }
}
