/**
 * What the two OpenAI dialects (Responses, Chat Completions) share: Bearer
 * auth, the `{error:{message, type, param, code}}` envelope with its
 * `x-request-id` header, and the error types OpenAI uses for each failure.
 */
import type { ApiErrorSpec, Credentials } from "../dialect.ts";
import { bearerToken, retryHeaders } from "../dialect.ts";
import { type ErrorType, portableStatus } from "../errors.ts";

/** The OpenAI error `type` and `code` for a Messages API error type. */
const OPENAI_ERRORS: Record<ErrorType, { type: string; code: string | null }> = {
  invalid_request_error: { type: "invalid_request_error", code: null },
  authentication_error: { type: "invalid_request_error", code: "invalid_api_key" },
  billing_error: { type: "insufficient_quota", code: "insufficient_quota" },
  permission_error: { type: "invalid_request_error", code: null },
  not_found_error: { type: "invalid_request_error", code: null },
  request_too_large: { type: "invalid_request_error", code: null },
  rate_limit_error: { type: "requests", code: "rate_limit_exceeded" },
  api_error: { type: "server_error", code: null },
  timeout_error: { type: "server_error", code: null },
  overloaded_error: { type: "server_error", code: "server_is_overloaded" },
};

export function openaiError(type: ErrorType, message: string) {
  const mapped = OPENAI_ERRORS[type];
  return { message, type: mapped.type, param: null, code: mapped.code };
}

export function openaiCredentials(headers: Headers): Credentials {
  const bearer = bearerToken(headers);
  return bearer !== null ? { via: "bearer", key: bearer } : { via: null, key: null };
}

export function openaiErrorResponse(e: ApiErrorSpec): Response {
  const headers: Record<string, string> = {
    "content-type": "application/json",
    "x-request-id": e.requestId,
    ...retryHeaders(e.retryAfterMs),
  };
  if (e.noRetry) headers["x-should-retry"] = "false";
  return new Response(JSON.stringify({ error: openaiError(e.type, e.message) }), { status: portableStatus(e.status), headers });
}

export function openaiAuthFailure(presented: boolean, requestId: string): Response {
  const message = presented
    ? "Incorrect API key provided. You can find your API key at the provider's dashboard."
    : "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth.";
  return openaiErrorResponse({ status: 401, type: "authentication_error", message, requestId });
}

export const openaiHeaders = (requestId: string) => ({ "x-request-id": requestId });

/** Whole seconds, as OpenAI's `created` fields count them. */
export const unixSeconds = (ms: number) => Math.floor(ms / 1000);
