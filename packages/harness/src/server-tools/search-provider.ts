/**
 * The search-provider port behind the `web_search` server tool: one query
 * in, ranked hits out. An adapter (tavily.ts) speaks one search API through
 * that vendor's official client; the executor (web-search.ts) owns the
 * API's rules (domain lists, result shape, usage counting) so every adapter
 * gets them the same way.
 */

/** The agent's `user_location` (BetaManagedAgentsUserLocation). */
export interface UserLocation {
  type: "approximate";
  city?: string | null;
  region?: string | null;
  /** Two-letter ISO 3166-1 country code, upper case. */
  country?: string | null;
  /** IANA time zone, e.g. "America/Los_Angeles". */
  timezone?: string | null;
}

export interface SearchQuery {
  query: string;
  /** Hits must come from one of these domains (or a subdomain); null: any. */
  allowedDomains: readonly string[] | null;
  /** Hits must not come from these domains (or a subdomain); null: none blocked. */
  blockedDomains: readonly string[] | null;
  userLocation: UserLocation | null;
  maxResults: number;
}

export interface SearchHit {
  url: string;
  title: string;
  /** The snippet or extract the provider returns for the page. */
  content: string;
  /** ISO date of publication, when the provider knows it. */
  publishedDate?: string | null;
}

export interface SearchProvider {
  /** Shown in tool errors, e.g. "tavily". */
  readonly name: string;
  /** Throws SearchProviderError (or anything) when the provider fails; the executor turns it into a tool error. */
  search(query: SearchQuery, signal: AbortSignal): Promise<SearchHit[]>;
}

/** A provider failure described for the model (never carries the provider's credential). */
export class SearchProviderError extends Error {
  override readonly name = "SearchProviderError";
}
