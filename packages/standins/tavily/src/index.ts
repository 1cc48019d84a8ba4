/**
 * The Tavily search stand-in: `POST /search` as `@tavily/core` speaks it
 * (JSON body in snake_case, `Authorization: Bearer <key>`, errors as
 * `{detail: {error}}`), answered from an in-memory corpus the test provides.
 * The official client reaches it through its `apiBaseURL` option
 * (`OPENMA_TAVILY_BASE_URL`), unchanged.
 *
 * Search, said plainly: a document matches when its title or text contains
 * a word of the query (case-insensitive); documents are ranked by how many
 * query words they contain, then by a country match when `country` is sent,
 * then in corpus order. `include_domains` / `exclude_domains` keep or drop a
 * host and its subdomains, as Tavily documents. `max_results` defaults to 5
 * (at most 20). Other parameters are accepted and ignored.
 */
import { noteAuth, type RecordedRequest, recorder, type StandInEnv, serveStandIn } from "@openma/standin-kit";
import { Hono } from "hono";
import { z } from "zod";

export const DEFAULT_TAVILY_KEY = "tvly-standin-0123456789abcdef";

export interface TavilyDocument {
  url: string;
  title: string;
  content: string;
  published_date?: string;
  /** Tavily's country name (lower case) the page is about, for `country` ranking. */
  country?: string;
}

export interface TavilyStandInOptions {
  port?: number;
  host?: string;
  apiKey?: string;
  documents?: TavilyDocument[];
}

/** The search body as the stand-in read it (for tests that check what the client sent). */
export type SearchBody = z.infer<typeof searchBody>;

export interface TavilyStandIn {
  readonly url: string;
  /** Points the OpenMA Tavily provider at this stand-in. */
  readonly env: Readonly<Record<string, string>>;
  readonly requests: RecordedRequest[];
  /** Bodies of the search requests it accepted, oldest first. */
  readonly searches: SearchBody[];
  documents: TavilyDocument[];
  /** The next `times` searches answer `status` with Tavily's error body. */
  failNext(status: number, times?: number): void;
  close(): Promise<void>;
}

const searchBody = z.object({
  query: z.string().min(1).max(4000),
  max_results: z.number().int().min(0).max(20).nullish(),
  include_domains: z.array(z.string()).max(300).nullish(),
  exclude_domains: z.array(z.string()).max(150).nullish(),
  country: z.string().nullish(),
  topic: z.string().nullish(),
});

const ERRORS: Record<number, string> = {
  400: "Bad request.",
  401: "Unauthorized: missing or invalid API key.",
  429: "Your request has been blocked due to excessive requests.",
  432: "This request exceeds your plan's set usage limit.",
  500: "Internal server error.",
};

function inDomain(url: string, domain: string): boolean {
  let host: string;
  try {
    host = new URL(url).hostname.toLowerCase();
  } catch {
    return false;
  }
  const d =
    domain
      .trim()
      .toLowerCase()
      .replace(/^https?:\/\//, "")
      .split("/")[0] ?? "";
  return d !== "" && (host === d || host.endsWith(`.${d}`));
}

export function searchCorpus(documents: readonly TavilyDocument[], body: SearchBody): TavilyDocument[] {
  const words = body.query
    .toLowerCase()
    .split(/\W+/)
    .filter((w) => w.length > 1);
  const include = body.include_domains?.length ? body.include_domains : null;
  const exclude = body.exclude_domains ?? [];
  const country = body.country?.toLowerCase();
  return documents
    .map((doc, order) => {
      const text = `${doc.title} ${doc.content}`.toLowerCase();
      return { doc, order, hits: words.filter((w) => text.includes(w)).length, local: country !== undefined && doc.country === country };
    })
    .filter(
      ({ doc, hits }) => hits > 0 && (!include || include.some((d) => inDomain(doc.url, d))) && !exclude.some((d) => inDomain(doc.url, d)),
    )
    .sort((a, b) => b.hits - a.hits || Number(b.local) - Number(a.local) || a.order - b.order)
    .slice(0, body.max_results ?? 5)
    .map(({ doc }) => doc);
}

export async function startTavilyStandIn(options: TavilyStandInOptions = {}): Promise<TavilyStandIn> {
  const apiKey = options.apiKey ?? DEFAULT_TAVILY_KEY;
  const requests: RecordedRequest[] = [];
  const searches: SearchBody[] = [];
  const failures: number[] = [];
  let requestNo = 0;
  const app = new Hono<StandInEnv>();
  app.use(recorder(requests));
  const fail = (status: number) =>
    new Response(JSON.stringify({ detail: { error: ERRORS[status] ?? `Error ${status}.` } }), {
      status,
      headers: { "content-type": "application/json" },
    });
  app.post("/search", async (c) => {
    const auth = c.req.header("authorization");
    const ok = auth === `Bearer ${apiKey}`;
    noteAuth(c, auth === undefined ? null : "authorization", ok);
    if (!ok) return fail(401);
    const parsed = searchBody.safeParse(await c.req.json().catch(() => null));
    if (!parsed.success) return fail(400);
    const injected = failures.shift();
    if (injected !== undefined) return fail(injected);
    searches.push(parsed.data);
    const started = performance.now();
    const results = searchCorpus(standIn.documents, parsed.data).map((doc, i) => ({
      title: doc.title,
      url: doc.url,
      content: doc.content,
      score: Number((1 - i / 100).toFixed(4)),
      raw_content: null,
      published_date: doc.published_date ?? null,
      favicon: null,
    }));
    return c.json({
      query: parsed.data.query,
      follow_up_questions: null,
      answer: null,
      images: [],
      results,
      response_time: Number(((performance.now() - started) / 1000).toFixed(3)),
      request_id: `standin-${++requestNo}`,
    });
  });
  app.notFound((c) => c.json({ detail: { error: "Not Found" } }, 404));
  const server = await serveStandIn({ app, port: options.port, host: options.host });
  const standIn: TavilyStandIn = {
    url: server.url,
    env: { OPENMA_WEB_SEARCH_PROVIDER: "tavily", TAVILY_API_KEY: apiKey, OPENMA_TAVILY_BASE_URL: server.url },
    requests,
    searches,
    documents: [...(options.documents ?? [])],
    failNext(status, times = 1) {
      for (let i = 0; i < times; i++) failures.push(status);
    },
    close: () => server.close(),
  };
  return standIn;
}
