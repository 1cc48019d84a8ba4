/**
 * The Tavily adapter of the search-provider port, through Tavily's official
 * client (`@tavily/core`), which takes its API base URL as an option; that
 * is how the local stand-in (`@openma/standin-tavily`) is reached in tests
 * without touching the client.
 *
 * Selected by `OPENMA_WEB_SEARCH_PROVIDER=tavily` with the key in
 * `TAVILY_API_KEY` (the client's own variable) and optionally
 * `OPENMA_TAVILY_BASE_URL` (see `webSearchProviderFromEnv`). Mapping:
 * `allowed_domains` → `includeDomains`, `blocked_domains` →
 * `excludeDomains`, `user_location.country` → `country` (Tavily takes the
 * English country name, lower case, and only for the `general` topic);
 * Tavily has no city, region or time-zone parameter, so those do not narrow
 * the search. The client cannot be cancelled: an aborted call stops waiting
 * and the request ends on its own timeout. The client is loaded on the first
 * search (it takes most of a second to import), so a server that never
 * searches does not pay for it at start.
 */
import type { TavilyClient } from "@tavily/core";
import { type SearchHit, type SearchProvider, SearchProviderError, type SearchQuery } from "./search-provider.ts";

export interface TavilyProviderOptions {
  apiKey: string;
  /** The API base URL (default: Tavily's own). */
  baseUrl?: string | undefined;
  /** Whole-request bound in seconds. Default 30. */
  timeoutSeconds?: number;
}

const regionNames = new Intl.DisplayNames(["en"], { type: "region", fallback: "none" });

/** Tavily's `country` value for an ISO 3166-1 alpha-2 code, or undefined when the code is not one. */
export function tavilyCountry(code: string | null | undefined): string | undefined {
  if (!code || !/^[A-Za-z]{2}$/.test(code)) return undefined;
  try {
    const name = regionNames.of(code.toUpperCase());
    // ZZ is "Unknown Region": a code, but no country.
    return name && code.toUpperCase() !== "ZZ" ? name.toLowerCase() : undefined;
  } catch {
    return undefined;
  }
}

function abortable<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

export class TavilySearchProvider implements SearchProvider {
  readonly name = "tavily";
  private client: Promise<TavilyClient> | null = null;
  private readonly apiKey: string;
  private readonly baseUrl: string | undefined;
  private readonly timeoutSeconds: number;

  constructor(options: TavilyProviderOptions) {
    if (!options.apiKey) throw new Error("the Tavily search provider needs an API key (TAVILY_API_KEY)");
    this.apiKey = options.apiKey;
    this.baseUrl = options.baseUrl;
    this.timeoutSeconds = options.timeoutSeconds ?? 30;
  }

  private tavily(): Promise<TavilyClient> {
    this.client ??= import("@tavily/core").then(({ tavily }) =>
      tavily({ apiKey: this.apiKey, ...(this.baseUrl ? { apiBaseURL: this.baseUrl } : {}), clientSource: "openma" }),
    );
    return this.client;
  }

  async search(q: SearchQuery, signal: AbortSignal): Promise<SearchHit[]> {
    const country = tavilyCountry(q.userLocation?.country);
    const client = await this.tavily();
    let response: Awaited<ReturnType<TavilyClient["search"]>>;
    try {
      response = await abortable(
        client.search(q.query, {
          topic: "general",
          maxResults: q.maxResults,
          ...(q.allowedDomains ? { includeDomains: [...q.allowedDomains] } : {}),
          ...(q.blockedDomains ? { excludeDomains: [...q.blockedDomains] } : {}),
          ...(country ? { country } : {}),
          timeout: this.timeoutSeconds,
        }),
        signal,
      );
    } catch (err) {
      signal.throwIfAborted();
      // The client's messages quote the response body; the key is never in them, but redact it anyway.
      const message = (err instanceof Error ? err.message : String(err)).split(this.apiKey).join("[redacted]");
      throw new SearchProviderError(message.slice(0, 500));
    }
    return response.results.map((r) => ({
      url: String(r.url ?? ""),
      title: String(r.title ?? ""),
      content: String(r.content ?? ""),
      publishedDate: typeof r.publishedDate === "string" ? r.publishedDate : null,
    }));
  }
}

/**
 * The provider the operator configured: `OPENMA_WEB_SEARCH_PROVIDER` names it
 * (`tavily`; unset: no web_search); throws on a named provider without its key.
 */
export function webSearchProviderFromEnv(env: NodeJS.ProcessEnv): SearchProvider | null {
  const name = env.OPENMA_WEB_SEARCH_PROVIDER?.trim();
  if (!name) return null;
  if (name !== "tavily") throw new Error(`OPENMA_WEB_SEARCH_PROVIDER: unknown search provider ${JSON.stringify(name)} (known: tavily)`);
  const apiKey = env.TAVILY_API_KEY ?? "";
  if (!apiKey) throw new Error("OPENMA_WEB_SEARCH_PROVIDER=tavily needs TAVILY_API_KEY");
  return new TavilySearchProvider({ apiKey, baseUrl: env.OPENMA_TAVILY_BASE_URL || undefined });
}
