/**
 * Credential egress at the Worker: the decision and the substitution the
 * Durable Object's outbound handler applies to every HTTP and HTTPS request
 * a container sends. Runtime-neutral (Fetch API, Web Crypto, no Node
 * import), so the same module runs in workerd and is unit-tested in Node.
 *
 * The rules are those of the local egress gateway (ADR 0015) with the host
 * pattern code shared from `@openma/egress/hosts`:
 * - `limited` networking allows only its hosts; anything else is answered
 *   `403 egress refused: <reason>` and never leaves;
 * - a credential's placeholder is replaced by its secret, in headers and/or
 *   the body as its `injection_location` says, only on requests whose host
 *   matches the credential's `allowed_hosts` (any allowed host when the
 *   credential is `unrestricted`); elsewhere the placeholder travels as is.
 * Address checks (loopback, metadata) are Cloudflare's network's job here:
 * a Worker's `fetch` cannot reach them.
 */
import { hostMatchesAny, normalizeHost } from "@openma/egress/hosts";
import { z } from "zod";

const hostPattern = z.string().min(1).max(253);

/** What the control plane posts for one sandbox (ADR 0019). Secrets stay in Durable Object storage. */
export const EgressConfigInput = z.strictObject({
  networking: z.discriminatedUnion("type", [
    z.strictObject({ type: z.literal("unrestricted") }),
    z.strictObject({ type: z.literal("limited"), allowed_hosts: z.array(hostPattern).max(1000) }),
  ]),
  credentials: z
    .array(
      z.strictObject({
        secret_name: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/),
        secret: z
          .string()
          .min(1)
          .max(64 * 1024),
        /** The credential's `networking.allowed_hosts`; null when it is `unrestricted`. */
        allowed_hosts: z.array(hostPattern).max(1000).nullable(),
        injection_location: z.strictObject({ header: z.boolean(), body: z.boolean() }),
      }),
    )
    .max(100),
});
export type EgressConfigInput = z.infer<typeof EgressConfigInput>;

export interface StoredCredential {
  secretName: string;
  placeholder: string;
  secret: string;
  hosts: string[] | null;
  header: boolean;
  body: boolean;
}

/** What the Durable Object keeps (storage key `openma:egress`) and the outbound handler reads. */
export interface StoredEgress {
  /** null: every host; else the normalized allowed host patterns. */
  hosts: string[] | null;
  credentials: StoredCredential[];
}

/** Variables a credential may not shadow: the container's own plumbing. */
const RESERVED = new Set(["PATH", "HOME", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE"]);

function randomHex(bytes: number): string {
  const buf = new Uint8Array(bytes);
  crypto.getRandomValues(buf);
  return Array.from(buf, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Validates the posted config and mints a fresh placeholder per credential (random, so it cannot occur in traffic by accident). */
export function prepareEgress(input: EgressConfigInput): { stored: StoredEgress; env: Record<string, string> } {
  const env: Record<string, string> = {};
  const credentials: StoredCredential[] = [];
  for (const c of input.credentials) {
    if (RESERVED.has(c.secret_name.toUpperCase()) || c.secret_name.startsWith("SANDBOX_"))
      throw new Error(`credential secret_name ${c.secret_name} cannot be a sandbox variable`);
    if (env[c.secret_name] !== undefined) throw new Error(`two credentials share secret_name ${c.secret_name}`);
    const placeholder = `openma-placeholder-${c.secret_name.toLowerCase()}-${randomHex(12)}`;
    env[c.secret_name] = placeholder;
    credentials.push({
      secretName: c.secret_name,
      placeholder,
      secret: c.secret,
      hosts: c.allowed_hosts === null ? null : c.allowed_hosts.map(normalizeHost),
      header: c.injection_location.header,
      body: c.injection_location.body,
    });
  }
  const hosts = input.networking.type === "unrestricted" ? null : input.networking.allowed_hosts.map(normalizeHost);
  return { stored: { hosts, credentials }, env };
}

export interface EgressAudit {
  type: "egress.allowed" | "egress.denied";
  method: string;
  host: string;
  reason?: string;
  /** Names of the credentials substituted (never values). */
  credentials?: string[];
}

export interface EgressOptions {
  /** The Worker's `fetch` (injected so a test can observe it). */
  upstream: (request: Request) => Promise<Response>;
  onAudit?: (event: EgressAudit) => void;
  /** Largest body buffered for substitution (default 8 MiB); larger is refused with 413. */
  maxBodyBytes?: number;
}

export function refusal(status: number, reason: string): Response {
  return new Response(`egress refused: ${reason}\n`, { status, headers: { "content-type": "text/plain; charset=utf-8" } });
}

function replaceAll(text: string, credentials: readonly StoredCredential[], used: Set<string>): string {
  let out = text;
  for (const c of credentials) {
    if (out.includes(c.placeholder)) {
      out = out.split(c.placeholder).join(c.secret);
      used.add(c.secretName);
    }
  }
  return out;
}

/** Byte-level replacement, so a binary or non-UTF-8 body is never re-encoded. */
function replaceBytes(data: Uint8Array<ArrayBuffer>, credentials: readonly StoredCredential[], used: Set<string>): Uint8Array<ArrayBuffer> {
  let out = data;
  const encoder = new TextEncoder();
  for (const c of credentials) {
    const needle = encoder.encode(c.placeholder);
    const secret = encoder.encode(c.secret);
    const parts: Uint8Array[] = [];
    let from = 0;
    for (let i = indexOf(out, needle, 0); i !== -1; i = indexOf(out, needle, from)) {
      parts.push(out.subarray(from, i), secret);
      from = i + needle.length;
    }
    if (parts.length === 0) continue;
    used.add(c.secretName);
    parts.push(out.subarray(from));
    const joined = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      joined.set(p, at);
      at += p.length;
    }
    out = joined;
  }
  return out;
}

function indexOf(haystack: Uint8Array, needle: Uint8Array, from: number): number {
  if (needle.length === 0) return -1;
  outer: for (let i = from; i <= haystack.length - needle.length; i++) {
    for (let j = 0; j < needle.length; j++) if (haystack[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}

async function readCapped(request: Request, max: number): Promise<Uint8Array<ArrayBuffer> | null> {
  if (request.body === null) return new Uint8Array(0);
  const reader = request.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > max) {
      await reader.cancel();
      return null;
    }
    chunks.push(value);
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out;
}

/**
 * Answers one request from the container: refused (403, or 413 for a body
 * too large to substitute in), or sent upstream with the credentials that
 * cover its host substituted. `egress` null means the control plane never
 * configured this sandbox: nothing leaves (fail closed).
 */
export async function egressFetch(request: Request, egress: StoredEgress | null, options: EgressOptions): Promise<Response> {
  const url = new URL(request.url);
  const host = normalizeHost(url.hostname);
  const method = request.method;
  const deny = (status: number, reason: string): Response => {
    options.onAudit?.({ type: "egress.denied", method, host, reason });
    return refusal(status, reason);
  };
  if (url.protocol !== "http:" && url.protocol !== "https:") return deny(403, `scheme ${url.protocol} is not http or https`);
  if (egress === null) return deny(403, "this sandbox has no egress configuration (the control plane sets it before the container starts)");
  if (egress.hosts !== null && !hostMatchesAny(host, egress.hosts))
    return deny(403, `host ${host} is not in the environment's allowed hosts (networking: limited)`);
  const covering = egress.credentials.filter((c) => c.hosts === null || hostMatchesAny(host, c.hosts));
  const used = new Set<string>();
  const headers = new Headers();
  const inHeader = covering.filter((c) => c.header);
  for (const [name, value] of request.headers) headers.append(name, replaceAll(value, inHeader, used));
  const inBody = covering.filter((c) => c.body);
  let body: ReadableStream<Uint8Array> | Uint8Array<ArrayBuffer> | null = request.body;
  if (inBody.length > 0 && request.body !== null) {
    const read = await readCapped(request, options.maxBodyBytes ?? 8 * 1024 * 1024);
    if (read === null) return deny(413, "request body too large for credential substitution");
    body = replaceBytes(read, inBody, used);
    headers.delete("content-length");
  }
  options.onAudit?.({ type: "egress.allowed", method, host, ...(used.size > 0 ? { credentials: [...used].sort() } : {}) });
  // A streamed body needs `duplex: "half"` under the Fetch standard (Node enforces it; workerd accepts it).
  const init = { method, headers, body, redirect: "manual", ...(body instanceof ReadableStream ? { duplex: "half" } : {}) };
  return options.upstream(new Request(url, init as RequestInit));
}
