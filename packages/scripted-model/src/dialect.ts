/**
 * What a model API dialect provides to the shared request pipeline (app.ts):
 * how it reads credentials and bodies, how it renders a scripted response
 * (JSON and SSE), and how it spells errors. Everything between (script turns,
 * faults, side rules, delays, recording) is dialect-neutral.
 */
import type { z } from "zod";
import type { ErrorType } from "./errors.ts";
import { describeIssues, type ResponseSpec } from "./script.ts";
import type { Dialect, RequestView } from "./view.ts";

export type AuthVia = "x-api-key" | "bearer" | "x-goog-api-key" | "query-key";

export interface Credentials {
  via: AuthVia | null;
  key: string | null;
}

/** An error to render, in the Messages API's taxonomy; each dialect maps it to its own status, type and envelope. */
export interface ApiErrorSpec {
  status: number;
  type: ErrorType;
  message: string;
  requestId: string;
  retryAfterMs?: number | undefined;
  /** Tell retrying clients not to: repeating the request cannot change a script problem. */
  noRetry?: boolean;
}

/** What the URL says about a request (Gemini names the model and the streaming mode in the path). */
export interface RouteInfo {
  model?: string;
  stream?: boolean;
  /** Gemini's streamGenerateContent without alt=sse: the chunks as one JSON array. */
  streamAsJsonArray?: boolean;
}

export interface BuildContext {
  /** Epoch milliseconds from the server's scheduler. */
  now: number;
  requestId: string;
}

/** A validated request: its neutral view, and how to answer it in its own dialect. */
export interface ParsedRequest {
  view: RequestView;
  json(spec: ResponseSpec, ctx: BuildContext): unknown;
  frames(spec: ResponseSpec, ctx: BuildContext): string[];
}

export type ParseResult<T> = { ok: true; value: T } | { ok: false; message: string };

export interface DialectSpec {
  readonly name: Dialect;
  credentials(headers: Headers, url: URL): Credentials;
  /** The dialect's answer to a missing (`presented` false) or wrong key. */
  authFailure(presented: boolean, requestId: string): Response;
  errorResponse(e: ApiErrorSpec): Response;
  /** An error delivered inside an SSE stream after `sequence` events. */
  streamErrorFrame(type: ErrorType, message: string, requestId: string, sequence: number): string;
  /** Headers of a successful answer besides content-type. */
  headers(requestId: string): Record<string, string>;
  parse(body: unknown, route: RouteInfo): ParseResult<ParsedRequest>;
  /** The dialect's token-counting endpoint, if it has one: the conversation to count, and its answer body. */
  count?: {
    parse(body: unknown, route: RouteInfo): ParseResult<RequestView>;
    body(tokens: number): unknown;
  };
}

/** The bearer token of an `Authorization` header, if any. */
export function bearerToken(headers: Headers): string | null {
  return /^Bearer\s+(.+)$/i.exec(headers.get("authorization") ?? "")?.[1] ?? null;
}

/** `Retry-After` in both spellings the SDKs read: milliseconds and whole seconds. */
export function retryHeaders(retryAfterMs: number | undefined): Record<string, string> {
  if (retryAfterMs === undefined) return {};
  return { "retry-after-ms": String(retryAfterMs), "retry-after": String(Math.ceil(retryAfterMs / 1000)) };
}

/** Validate a request body, naming the offending field on failure. */
export function validate<S extends z.ZodType>(schema: S, body: unknown): ParseResult<z.output<S>> {
  const parsed = schema.safeParse(body);
  return parsed.success ? { ok: true, value: parsed.data } : { ok: false, message: describeIssues(parsed.error) };
}
