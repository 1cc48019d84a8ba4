/**
 * AWS Signature Version 4 as S3 applies it to the `Authorization` header:
 * the canonical request uses the path exactly as sent (S3 does not normalise
 * or double-encode it), the query re-encoded per RFC 3986 and sorted, the
 * signed headers trimmed, and the payload hash from `x-amz-content-sha256`.
 * Pure functions: the app decides what a failure means.
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import { sha256Hex } from "./checksums.ts";

export const ALGORITHM = "AWS4-HMAC-SHA256";

export interface AuthorizationHeader {
  accessKeyId: string;
  /** `yyyymmdd` from the credential scope. */
  date: string;
  region: string;
  service: string;
  signedHeaders: string[];
  signature: string;
}

/** Parses `AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…, Signature=…`; a string describing the defect when malformed. */
export function parseAuthorization(value: string): AuthorizationHeader | string {
  if (!value.startsWith(`${ALGORITHM} `)) return `the authorization mechanism is not ${ALGORITHM}`;
  const fields = new Map<string, string>();
  for (const part of value.slice(ALGORITHM.length + 1).split(",")) {
    const eq = part.indexOf("=");
    if (eq < 0) return "a component is not name=value";
    fields.set(part.slice(0, eq).trim(), part.slice(eq + 1).trim());
  }
  const credential = fields.get("Credential");
  const signedHeaders = fields.get("SignedHeaders");
  const signature = fields.get("Signature");
  if (!credential || !signedHeaders || !signature) return "Credential, SignedHeaders and Signature are all required";
  const scope = credential.split("/");
  if (scope.length !== 5 || scope[4] !== "aws4_request") return "the Credential must be <key>/<date>/<region>/<service>/aws4_request";
  const [accessKeyId, date, region, service] = scope as [string, string, string, string];
  if (!/^\d{8}$/.test(date)) return "the credential date is not yyyymmdd";
  if (!/^[0-9a-f]{64}$/.test(signature)) return "the signature is not 64 lower-case hex digits";
  const names = signedHeaders.split(";");
  if (names.some((n) => !/^[a-z0-9-]+$/.test(n))) return "SignedHeaders must be lower-case header names separated by ';'";
  return { accessKeyId, date, region, service, signedHeaders: names, signature };
}

/** RFC 3986 percent-encoding: everything but unreserved characters. */
export function uriEncode(value: string): string {
  return encodeURIComponent(value).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** Splits a raw query string into decoded pairs; `undefined` on malformed percent-encoding. */
export function parseQuery(rawQuery: string): [string, string][] | undefined {
  const pairs: [string, string][] = [];
  for (const part of rawQuery.split("&")) {
    if (part === "") continue;
    const eq = part.indexOf("=");
    try {
      const name = decodeURIComponent(eq < 0 ? part : part.slice(0, eq));
      const value = eq < 0 ? "" : decodeURIComponent(part.slice(eq + 1));
      pairs.push([name, value]);
    } catch {
      return undefined;
    }
  }
  return pairs;
}

export function canonicalQuery(pairs: [string, string][]): string {
  const encoded = pairs.map(([k, v]) => [uriEncode(k), uriEncode(v)] as const);
  encoded.sort(([ak, av], [bk, bv]) => (ak < bk ? -1 : ak > bk ? 1 : av < bv ? -1 : av > bv ? 1 : 0));
  return encoded.map(([k, v]) => `${k}=${v}`).join("&");
}

export interface CanonicalRequestInput {
  method: string;
  /** The path exactly as it appeared on the request line (still percent-encoded). */
  rawPath: string;
  query: [string, string][];
  header(name: string): string | undefined;
  signedHeaders: string[];
  payloadHash: string;
}

export function canonicalRequest(input: CanonicalRequestInput): string {
  const headers = input.signedHeaders.map((name) => `${name}:${(input.header(name) ?? "").trim().replace(/\s+/g, " ")}\n`).join("");
  return [input.method, input.rawPath, canonicalQuery(input.query), headers, input.signedHeaders.join(";"), input.payloadHash].join("\n");
}

export function credentialScope(date: string, region: string, service: string): string {
  return `${date}/${region}/${service}/aws4_request`;
}

export function stringToSign(amzDate: string, scope: string, canonical: string): string {
  return `${ALGORITHM}\n${amzDate}\n${scope}\n${sha256Hex(canonical)}`;
}

const hmac = (key: Buffer | string, data: string) => createHmac("sha256", key).update(data).digest();

export function signingKey(secretAccessKey: string, date: string, region: string, service: string): Buffer {
  return hmac(hmac(hmac(hmac(`AWS4${secretAccessKey}`, date), region), service), "aws4_request");
}

export function sign(key: Buffer, toSign: string): string {
  return createHmac("sha256", key).update(toSign).digest("hex");
}

/** Constant-time comparison of two hex signatures. */
export function signaturesEqual(a: string, b: string): boolean {
  const x = Buffer.from(a, "utf8");
  const y = Buffer.from(b, "utf8");
  return x.length === y.length && timingSafeEqual(x, y);
}

/** `20130524T000000Z` → epoch ms; `undefined` when not in that form. */
export function parseAmzDate(value: string): number | undefined {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(value);
  if (!m) return undefined;
  const ms = Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]), Number(m[4]), Number(m[5]), Number(m[6]));
  return Number.isNaN(ms) ? undefined : ms;
}

export function formatAmzDate(ms: number): string {
  return new Date(ms)
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d{3}/, "");
}

export interface SignInput {
  method: string;
  url: URL;
  headers: Record<string, string>;
  payloadHash: string;
  accessKeyId: string;
  secretAccessKey: string;
  region: string;
  now: number;
}

/**
 * Signs a request the way the AWS SDKs do, for tests that must send what the
 * SDK never would (malformed bodies, odd headers). Returns the headers to send.
 */
export function signRequest(input: SignInput): Record<string, string> {
  const amzDate = formatAmzDate(input.now);
  const date = amzDate.slice(0, 8);
  const headers: Record<string, string> = {
    ...Object.fromEntries(Object.entries(input.headers).map(([k, v]) => [k.toLowerCase(), v])),
    host: input.url.host,
    "x-amz-date": amzDate,
    "x-amz-content-sha256": input.payloadHash,
  };
  const signedHeaders = Object.keys(headers).sort();
  const canonical = canonicalRequest({
    method: input.method,
    rawPath: input.url.pathname,
    query: parseQuery(input.url.search.slice(1)) ?? [],
    header: (n) => headers[n],
    signedHeaders,
    payloadHash: input.payloadHash,
  });
  const scope = credentialScope(date, input.region, "s3");
  const signature = sign(signingKey(input.secretAccessKey, date, input.region, "s3"), stringToSign(amzDate, scope, canonical));
  headers.authorization = `${ALGORITHM} Credential=${input.accessKeyId}/${scope}, SignedHeaders=${signedHeaders.join(";")}, Signature=${signature}`;
  return headers;
}
