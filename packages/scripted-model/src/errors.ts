/**
 * Error types in the Messages API's taxonomy. Scripts and faults name errors
 * this way whatever the dialect; each dialect maps a type to its own status,
 * error code and envelope (dialects/*.ts).
 */
import { randomBytes } from "node:crypto";

export const ERROR_TYPES = [
  "invalid_request_error",
  "authentication_error",
  "billing_error",
  "permission_error",
  "not_found_error",
  "request_too_large",
  "rate_limit_error",
  "api_error",
  "timeout_error",
  "overloaded_error",
] as const;

export type ErrorType = (typeof ERROR_TYPES)[number];

const TYPE_BY_STATUS: Record<number, ErrorType> = {
  400: "invalid_request_error",
  401: "authentication_error",
  402: "billing_error",
  403: "permission_error",
  404: "not_found_error",
  413: "request_too_large",
  429: "rate_limit_error",
  500: "api_error",
  504: "timeout_error",
  529: "overloaded_error",
};

const STATUS_BY_TYPE = Object.fromEntries(Object.entries(TYPE_BY_STATUS).map(([s, t]) => [t, Number(s)])) as Record<ErrorType, number>;

/** The error type the real API uses for a status (4xx default to invalid_request_error, 5xx to api_error). */
export function errorTypeFor(status: number): ErrorType {
  return TYPE_BY_STATUS[status] ?? (status >= 500 ? "api_error" : "invalid_request_error");
}

export function statusFor(type: ErrorType): number {
  return STATUS_BY_TYPE[type];
}

const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/** Ids shaped like the real API's (`msg_…`, `toolu_…`, `req_…`): a prefix and 24 base62 characters. */
export function randomId(prefix: string): string {
  const bytes = randomBytes(24);
  let out = "";
  for (const b of bytes) out += BASE62[b % 62];
  return `${prefix}_${out}`;
}

/** Anthropic's 529 "overloaded" has no counterpart elsewhere: OpenAI and Gemini answer an overload with 503. */
export function portableStatus(status: number): number {
  return status === 529 ? 503 : status;
}
