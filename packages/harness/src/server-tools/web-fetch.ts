/**
 * The `web_fetch` tool, run inside the server. This is the one place an
 * environment's `limited` networking `allowed_hosts` is enforced (bash, curl
 * in a sandbox, web_search and MCP are not restricted by it).
 *
 * Every hop (the first URL and each redirect, at most 5) is checked against:
 * the scheme (http/https only), the environment allow-list, the tool's
 * `allowed_domains` / `blocked_domains`, and the resolved IP addresses
 * (private, loopback, link-local and reserved ranges are refused unless the
 * operator allows them). The name is resolved here and the socket connects
 * to the checked address, so a DNS answer cannot change between check and
 * connect.
 *
 * environment_variable vault credentials with `injection_location.header`
 * replace `${NAME}` / `$NAME` placeholders in the request headers the model
 * supplies, only on hops whose host the credential's `networking` allows.
 * All output is passed through the session's secret redactor.
 */
import { lookup as dnsLookup } from "node:dns/promises";
import http from "node:http";
import https from "node:https";
import { isIP, type LookupFunction } from "node:net";
import { z } from "zod";
import type { ModelToolDefinition, ServerToolContext, ServerToolExecutor } from "../server-tools.ts";
import { AddressPolicy, environmentAllowedHosts, type HostPolicy, hostRefusal, normalizeHost } from "./host-policy.ts";
import { domainList, toolsetToolConfig } from "./toolset-config.ts";
import { CredentialUnreadableError, SessionCredentials, substitutePlaceholders } from "./vault-credentials.ts";

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

export interface WebFetchOptions {
  /** DNS resolution (default: the system resolver, all addresses). Tests inject names here. */
  resolve?: (hostname: string) => Promise<ResolvedAddress[]>;
  /** Operator-only CIDRs that may be reached although private/loopback (e.g. `127.0.0.1/32`). */
  privateAddressAllowlist?: readonly string[];
  /** Whole-fetch bound including redirects. Default 30 s. */
  timeoutMs?: number;
  /** Bytes read from a response body before it is cut off. Default 5 MiB. */
  maxResponseBytes?: number;
  /** Used when the tool config sets no `max_content_tokens`. Default 25 000. */
  defaultMaxContentTokens?: number;
  userAgent?: string;
}

export const MAX_REDIRECTS = 5;
const CHARS_PER_TOKEN = 4;
const MAX_CONTENT_TOKENS = 1_000_000;
const FORBIDDEN_HEADERS = new Set([
  "host",
  "connection",
  "content-length",
  "transfer-encoding",
  "te",
  "trailer",
  "upgrade",
  "keep-alive",
  "expect",
  "proxy-authorization",
  "proxy-connection",
  "accept-encoding",
]);
// Dropped when a redirect leaves the origin, as fetch does with Authorization.
const ORIGIN_BOUND_HEADERS = new Set(["authorization", "cookie"]);

const inputSchema = z.object({
  url: z.string().min(1).max(8192),
  headers: z
    .record(
      z
        .string()
        .min(1)
        .max(128)
        .regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, "must be an HTTP header name"),
      z
        .string()
        .max(8192)
        .refine((v) => !/[\r\n\0]/.test(v), "must not contain CR, LF or NUL"),
    )
    .refine((h) => Object.keys(h).length <= 32, "at most 32 headers")
    .optional(),
});

const webFetchConfigSchema = z.object({
  name: z.literal("web_fetch"),
  enabled: z.boolean().nullish(),
  allowed_domains: domainList.nullish(),
  blocked_domains: domainList.nullish(),
  max_content_tokens: z.number().nullish(),
});

export interface WebFetchConfig {
  enabled: boolean;
  allowedDomains: string[] | null;
  blockedDomains: string[] | null;
  maxContentTokens: number | null;
}

/** The agent's web_fetch settings from its `agent_toolset_20260401` entry; disabled when absent. */
export function webFetchConfig(agent: unknown): WebFetchConfig {
  const found = toolsetToolConfig(agent, "web_fetch", webFetchConfigSchema);
  if (!found) return { enabled: false, allowedDomains: null, blockedDomains: null, maxContentTokens: null };
  const data = found.config;
  const tokens = data?.max_content_tokens;
  return {
    enabled: found.enabled,
    allowedDomains: data?.allowed_domains ?? null,
    blockedDomains: data?.blocked_domains ?? null,
    maxContentTokens:
      typeof tokens === "number" && Number.isFinite(tokens) ? Math.min(Math.max(Math.trunc(tokens), 1), MAX_CONTENT_TOKENS) : null,
  };
}

export const WEB_FETCH_TOOL: ModelToolDefinition = {
  name: "web_fetch",
  description:
    "Fetch a web page or document by URL (http or https, GET only) and return its readable text. " +
    `Optional request headers may reference vault secrets as \${NAME}; they are substituted only for hosts the secret is allowed on.`,
  input_schema: {
    type: "object",
    properties: {
      url: { type: "string", description: "The absolute http(s) URL to fetch." },
      headers: { type: "object", additionalProperties: { type: "string" }, description: "Optional extra request headers." },
    },
    required: ["url"],
  },
};

type ToolResult = { content: Array<{ type: "text"; text: string }>; isError: boolean };

/** A refusal or failure reported to the model as a tool error. */
class FetchRefused extends Error {}

interface HopResponse {
  status: number;
  statusText: string;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
  truncated: boolean;
}

export class WebFetchExecutor implements ServerToolExecutor {
  readonly id = "web_fetch";
  readonly usageCounter = "web_fetch_requests" as const;
  private readonly resolve: (hostname: string) => Promise<ResolvedAddress[]>;
  private readonly addresses: AddressPolicy;
  private readonly timeoutMs: number;
  private readonly maxResponseBytes: number;
  private readonly defaultMaxContentTokens: number;
  private readonly userAgent: string;

  constructor(options: WebFetchOptions = {}) {
    this.resolve = options.resolve ?? defaultResolve;
    this.addresses = new AddressPolicy(options.privateAddressAllowlist ?? []);
    this.timeoutMs = boundInt(options.timeoutMs, 30_000, 1, 600_000);
    this.maxResponseBytes = boundInt(options.maxResponseBytes, 5 * 1024 * 1024, 1, 100 * 1024 * 1024);
    this.defaultMaxContentTokens = boundInt(options.defaultMaxContentTokens, 25_000, 1, MAX_CONTENT_TOKENS);
    this.userAgent = options.userAgent ?? "OpenMA-web_fetch/0.1";
  }

  handles(toolName: string): boolean {
    return toolName === "web_fetch";
  }

  async listTools(ctx: ServerToolContext): Promise<ModelToolDefinition[]> {
    return webFetchConfig(ctx.agent).enabled ? [WEB_FETCH_TOOL] : [];
  }

  async execute(
    call: { name: string; input: unknown; toolUseId: string },
    ctx: ServerToolContext,
    signal: AbortSignal,
  ): Promise<ToolResult> {
    signal.throwIfAborted();
    const config = webFetchConfig(ctx.agent);
    if (!config.enabled) return errorResult("web_fetch is not enabled for this agent");
    const parsed = inputSchema.safeParse(call.input);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const path = ["input", ...(issue?.path ?? []).map(String)].join(".");
      return errorResult(`${path}: ${issue?.message ?? "invalid"}`);
    }
    const credentials = await SessionCredentials.load(ctx.storage, ctx.vaultIds, { secrets: ctx.secrets });
    const policy: HostPolicy = {
      allowedHosts: environmentAllowedHosts(ctx.environment),
      allowedDomains: config.allowedDomains,
      blockedDomains: config.blockedDomains,
    };
    const timeout = AbortSignal.timeout(this.timeoutMs);
    const combined = AbortSignal.any([signal, timeout]);
    try {
      const { url, response } = await this.fetchFollowing(parsed.data.url, parsed.data.headers ?? {}, policy, credentials, combined);
      const maxChars = (config.maxContentTokens ?? this.defaultMaxContentTokens) * CHARS_PER_TOKEN;
      const text = credentials.redactor.redact(formatResponse(url, response, maxChars, this.maxResponseBytes));
      return { content: [{ type: "text", text }], isError: response.status >= 400 };
    } catch (err) {
      if (signal.aborted) throw signal.reason;
      if (timeout.aborted) return errorResult(`web_fetch timed out after ${this.timeoutMs} ms`);
      // Our own refusals and credential problems have messages written for the model (ids, no secrets);
      // network errors are reduced to their code, since their text can quote a third party.
      const ours = err instanceof FetchRefused || err instanceof CredentialUnreadableError;
      const message = ours ? err.message : `web_fetch failed: ${describeNetworkError(err)}`;
      return errorResult(credentials.redactor.redact(message));
    }
  }

  private async fetchFollowing(
    startUrl: string,
    modelHeaders: Record<string, string>,
    policy: HostPolicy,
    credentials: SessionCredentials,
    signal: AbortSignal,
  ): Promise<{ url: URL; response: HopResponse }> {
    let url = parseUrl(startUrl);
    let headers = { ...modelHeaders };
    for (let hop = 0; ; hop++) {
      const address = await this.checkHop(url, policy, signal);
      const response = await this.request(url, address, this.hopHeaders(url, headers, credentials), signal);
      const location = response.headers.location;
      if (![301, 302, 303, 307, 308].includes(response.status) || typeof location !== "string") return { url, response };
      if (hop >= MAX_REDIRECTS) throw new FetchRefused(`web_fetch refused: more than ${MAX_REDIRECTS} redirects`);
      const next = parseUrl(location, url);
      if (next.origin !== url.origin)
        headers = Object.fromEntries(Object.entries(headers).filter(([k]) => !ORIGIN_BOUND_HEADERS.has(k.toLowerCase())));
      url = next;
    }
  }

  /** Policy for one hop; returns the one address the socket may connect to. */
  private async checkHop(url: URL, policy: HostPolicy, signal: AbortSignal): Promise<ResolvedAddress> {
    const host = normalizeHost(url.hostname);
    const refusal = hostRefusal(host, policy);
    if (refusal) throw new FetchRefused(`web_fetch refused ${url.origin}: ${refusal}`);
    const literal = isIP(host);
    let addresses: ResolvedAddress[];
    if (literal) addresses = [{ address: host, family: literal as 4 | 6 }];
    else {
      try {
        addresses = await untilAborted(this.resolve(host), signal);
      } catch (err) {
        if (signal.aborted) throw err;
        throw new FetchRefused(`web_fetch could not resolve host ${host}`);
      }
    }
    if (addresses.length === 0) throw new FetchRefused(`web_fetch could not resolve host ${host}`);
    // Every answer must pass, so no record set mixes a public and a private target.
    for (const a of addresses) {
      const why = this.addresses.refusal(a.address);
      if (why) throw new FetchRefused(`web_fetch refused ${url.origin}: ${why}`);
    }
    return addresses[0]!;
  }

  private hopHeaders(url: URL, modelHeaders: Record<string, string>, credentials: SessionCredentials): Record<string, string> {
    const subs = credentials.headerSubstitutions(normalizeHost(url.hostname));
    const out: Record<string, string> = { "user-agent": this.userAgent, accept: "text/html, text/plain, application/json, */*;q=0.5" };
    for (const [name, value] of Object.entries(modelHeaders)) {
      const key = name.toLowerCase();
      if (FORBIDDEN_HEADERS.has(key) || key.startsWith("proxy-")) continue;
      out[key] = substitutePlaceholders(value, subs);
    }
    out["accept-encoding"] = "identity";
    return out;
  }

  private request(url: URL, address: ResolvedAddress, headers: Record<string, string>, signal: AbortSignal): Promise<HopResponse> {
    // The socket goes to the address that passed the checks, whatever the resolver would say now.
    const pinned: LookupFunction = (_hostname, options, callback) => {
      if ((options as { all?: boolean }).all) (callback as (e: null, a: ResolvedAddress[]) => void)(null, [address]);
      else callback(null, address.address, address.family);
    };
    const mod = url.protocol === "https:" ? https : http;
    const cap = this.maxResponseBytes;
    return new Promise<HopResponse>((resolve, reject) => {
      const req = mod.request(url, { method: "GET", headers, lookup: pinned, signal }, (res) => {
        const status = res.statusCode ?? 0;
        if ([301, 302, 303, 307, 308].includes(status)) {
          res.resume();
          resolve({ status, statusText: res.statusMessage ?? "", headers: res.headers, body: Buffer.alloc(0), truncated: false });
          return;
        }
        const chunks: Buffer[] = [];
        let size = 0;
        let done = false;
        const finish = (truncated: boolean) => {
          if (done) return;
          done = true;
          resolve({ status, statusText: res.statusMessage ?? "", headers: res.headers, body: Buffer.concat(chunks), truncated });
        };
        res.on("data", (chunk: Buffer) => {
          if (done) return;
          const room = cap - size;
          if (chunk.length > room) {
            if (room > 0) chunks.push(chunk.subarray(0, room));
            size = cap;
            finish(true);
            res.destroy();
            return;
          }
          chunks.push(chunk);
          size += chunk.length;
        });
        res.on("end", () => finish(false));
        // A body cut short by the peer or by our abort must settle the promise, never hang it.
        res.on("close", () => (done ? undefined : reject(signal.aborted ? signal.reason : new Error("response closed early"))));
        res.on("error", (err) => (done ? undefined : reject(err)));
      });
      req.on("error", reject);
      req.end();
    });
  }
}

/** A lookup cannot be cancelled, so stop waiting for it when the fetch is aborted or times out. */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (err: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(err);
      },
    );
  });
}

function boundInt(value: number | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined || !Number.isFinite(value)) return fallback;
  return Math.min(Math.max(Math.trunc(value), min), max);
}

async function defaultResolve(hostname: string): Promise<ResolvedAddress[]> {
  const found = await dnsLookup(hostname, { all: true, verbatim: true });
  return found.map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
}

function parseUrl(text: string, base?: URL): URL {
  let url: URL;
  try {
    url = base ? new URL(text, base) : new URL(text);
  } catch {
    throw new FetchRefused(`web_fetch refused: not a valid absolute URL`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new FetchRefused(`web_fetch refused: scheme ${url.protocol.replace(/:$/, "")} is not allowed (http and https only)`);
  }
  if (url.username || url.password) throw new FetchRefused("web_fetch refused: URLs with embedded credentials are not fetched");
  url.hash = "";
  return url;
}

function describeNetworkError(err: unknown): string {
  const code = (err as { code?: unknown }).code;
  if (typeof code === "string" && /^[A-Z_0-9]{2,40}$/.test(code)) return code;
  return (err as Error)?.name ?? "error";
}

function errorResult(message: string): ToolResult {
  return { content: [{ type: "text", text: message }], isError: true };
}

const TEXTUAL =
  /^(text\/|application\/(json|xml|xhtml\+xml|javascript|ecmascript|x-www-form-urlencoded|ld\+json)|[a-z]+\/[a-z0-9.+-]*\+(json|xml))/i;

function decodeBody(body: Buffer, contentType: string): string {
  const charset = /charset\s*=\s*"?([A-Za-z0-9_.:-]+)/i.exec(contentType)?.[1];
  try {
    return new TextDecoder(charset ?? "utf-8").decode(body);
  } catch {
    return new TextDecoder("utf-8").decode(body);
  }
}

/** The model-facing text: a short header, then readable text cut to the token budget. */
export function formatResponse(url: URL, response: HopResponse, maxChars: number, maxBytes: number): string {
  const contentType = String(response.headers["content-type"] ?? "");
  const lines = [`URL: ${url.href}`, `Status: ${response.status}${response.statusText ? ` ${response.statusText}` : ""}`];
  if (contentType) lines.push(`Content-Type: ${contentType}`);
  let text: string;
  if (contentType === "" || TEXTUAL.test(contentType)) {
    const raw = decodeBody(response.body, contentType);
    const isHtml = /html/i.test(contentType) || (contentType === "" && /^\s*(<!doctype html|<html)/i.test(raw));
    if (isHtml) {
      const page = htmlToText(raw);
      if (page.title) lines.push(`Title: ${page.title}`);
      text = page.text;
    } else text = raw;
  } else {
    text = `[binary content (${contentType}), ${response.body.length} bytes, not shown]`;
  }
  if (response.truncated) lines.push(`[response cut off at ${maxBytes} bytes]`);
  if (text.length > maxChars)
    text = `${text.slice(0, maxChars)}\n[content truncated to about ${Math.floor(maxChars / CHARS_PER_TOKEN)} tokens]`;
  return `${lines.join("\n")}\n\n${text}`;
}

const NAMED_ENTITIES: Record<string, string> = {
  amp: "&",
  lt: "<",
  gt: ">",
  quot: '"',
  apos: "'",
  nbsp: " ",
  mdash: "—",
  ndash: "–",
  hellip: "…",
  copy: "©",
  reg: "®",
  trade: "™",
  lsquo: "‘",
  rsquo: "’",
  ldquo: "“",
  rdquo: "”",
  laquo: "«",
  raquo: "»",
  middot: "·",
  bull: "•",
};

export function decodeEntities(text: string): string {
  return text.replace(/&(#x[0-9a-f]{1,6}|#[0-9]{1,7}|[a-z]{2,8});/gi, (whole, ref: string) => {
    if (ref[0] === "#") {
      const code = ref[1] === "x" || ref[1] === "X" ? Number.parseInt(ref.slice(2), 16) : Number.parseInt(ref.slice(1), 10);
      return code > 0 && code <= 0x10ffff && !(code >= 0xd800 && code <= 0xdfff) ? String.fromCodePoint(code) : whole;
    }
    return NAMED_ENTITIES[ref.toLowerCase()] ?? whole;
  });
}

/** Simple readable text from HTML: drops scripts and styles, keeps block structure and link targets. */
export function htmlToText(html: string): { title: string | null; text: string } {
  let s = html.replace(/<!--[\s\S]*?-->/g, "");
  const title = /<title\b[^>]*>([\s\S]*?)<\/title\s*>/i.exec(s)?.[1];
  s = s.replace(/<(script|style|noscript|template|svg|iframe|object|head)\b[^>]*>[\s\S]*?<\/\1\s*>/gi, " ");
  s = s.replace(/<a\b[^>]*?\bhref\s*=\s*("([^"]*)"|'([^']*)')[^>]*>([\s\S]*?)<\/a\s*>/gi, (_m, _q, dq, sq, inner: string) => {
    const href = (dq ?? sq ?? "").trim();
    const label = inner.replace(/<[^>]*>/g, "").trim();
    return /^https?:\/\//i.test(href) && label && label !== href ? `${label} (${href})` : inner;
  });
  s = s.replace(/<li\b[^>]*>/gi, "\n- ");
  s = s.replace(/<h[1-6]\b[^>]*>/gi, "\n\n# ");
  s = s.replace(/<br\s*\/?>/gi, "\n");
  s = s.replace(
    /<\/?(p|div|section|article|header|footer|nav|main|aside|ul|ol|table|tr|blockquote|pre|hr|h[1-6]|dl|dt|dd|figure|form)\b[^>]*>/gi,
    "\n",
  );
  s = s.replace(/<\/?(td|th)\b[^>]*>/gi, " ");
  s = s.replace(/<[^>]*>/g, "");
  s = decodeEntities(s);
  const lines = s.split("\n").map((line) => line.replace(/[ \t\f\v\u00a0]+/g, " ").trim());
  const text = lines
    .join("\n")
    .replace(/\n{3,}/g, "\n\n")
    .trim();
  return { title: title ? decodeEntities(title.replace(/\s+/g, " ").trim()) : null, text };
}
