/**
 * The API's error body, exactly as the official SDK parses it:
 * `{type:"error", error:{type, message, details?}, request_id}`.
 * Expected refusals are thrown as ApiError and rendered by the app's onError;
 * anything else is a bug and becomes a generic 500 without internals.
 */
import type { ContentfulStatusCode } from "hono/utils/http-status";

export type ErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "permission_error"
  | "not_found_error"
  | "conflict_error"
  | "request_too_large"
  | "rate_limit_error"
  | "api_error"
  | "overloaded_error"
  | "memory_precondition_failed_error"
  | "memory_path_conflict_error";

export interface ErrorDetails {
  error_code?: string;
  [key: string]: unknown;
}

export class ApiError extends Error {
  constructor(
    readonly status: ContentfulStatusCode,
    readonly type: ErrorType,
    message: string,
    readonly details?: ErrorDetails,
    /** Fields placed directly on `error` (memory 409 bodies carry them there). */
    readonly extra?: Record<string, unknown>,
    /** Extra response headers (e.g. `x-should-retry: false`). */
    readonly headers?: Record<string, string>,
  ) {
    super(message);
  }

  body(requestId: string | null) {
    return {
      type: "error" as const,
      error: {
        type: this.type,
        message: this.message,
        ...(this.details ? { details: this.details } : {}),
        ...this.extra,
      },
      request_id: requestId,
    };
  }
}

export const badRequest = (message: string, details?: ErrorDetails) => new ApiError(400, "invalid_request_error", message, details);

export const notFound = (what: string, id: string, errorCode?: string) =>
  new ApiError(404, "not_found_error", `${what} ${JSON.stringify(id)} was not found`, errorCode ? { error_code: errorCode } : undefined);

export const unauthenticated = (message: string) => new ApiError(401, "authentication_error", message);

export const forbidden = (message: string) => new ApiError(403, "permission_error", message);

/** A permanent conflict: 409 is retried by the SDK unless told otherwise. */
export const permanentConflict = (message: string, details?: ErrorDetails) =>
  new ApiError(409, "conflict_error", message, details, undefined, { "x-should-retry": "false" });
