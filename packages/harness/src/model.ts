/**
 * The model port: one streamed Messages API request per `send`, through the
 * official `@anthropic-ai/sdk` (`client.messages.stream`). The SDK's own
 * retries are off; the loop retries transient failures itself (it has to
 * record `session.status_rescheduled` and `session.error` while it waits), on
 * the port's `retry` policy, whose `sleep` is injected so tests never wait.
 *
 * Configuration: `OPENMA_MODEL_BASE_URL` (default: Anthropic) and
 * `OPENMA_MODEL_API_KEY`, falling back to `ANTHROPIC_API_KEY`. Without a key
 * the port still exists and every request fails terminally with a message
 * naming the missing variable, so the server runs and the session says why.
 */
import Anthropic, { APIConnectionError, APIError, APIUserAbortError } from "@anthropic-ai/sdk";
import type { ContentBlock, MessageParam, Tool } from "@anthropic-ai/sdk/resources/messages";
import type { ModelToolDefinition } from "./server-tools.ts";

export interface ModelRequest {
  model: string;
  system: string | null;
  messages: MessageParam[];
  tools: ModelToolDefinition[];
  /** Opaque per-conversation id (Messages API `metadata.user_id`). */
  userId?: string;
}

/** Token counts of one request, in the span's `model_usage` shape plus the cache-write split. */
export interface ModelUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  /** Cache writes by TTL; absent upstream means all of them count as 5-minute writes. */
  cache_creation_5m: number;
  cache_creation_1h: number;
}

export interface ModelResponse {
  content: ContentBlock[];
  stopReason: string | null;
  usage: ModelUsage;
}

/** The `session.error` types a model failure maps to (§5.5). */
export type ModelErrorType =
  | "model_rate_limited_error"
  | "model_overloaded_error"
  | "model_request_failed_error"
  | "billing_error"
  | "unknown_error";

export interface ModelFailure {
  errorType: ModelErrorType;
  message: string;
  /** 429, 5xx, 529, overload and connection failures are worth another attempt. */
  retryable: boolean;
  /** The upstream's `retry-after-ms` / `retry-after`, when it sent one. */
  retryAfterMs?: number;
}

export type ModelAttempt = { type: "response"; response: ModelResponse } | { type: "failure"; failure: ModelFailure } | { type: "aborted" };

/** Anything with a cancellable sleep; `@openma/time`'s Scheduler fits. */
export interface Sleeper {
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export interface RetryPolicy {
  /** Attempts after the first one before the turn ends with `retries_exhausted`. */
  maxRetries: number;
  /** Wait before retry number `retry` (1-based). */
  delayMs(retry: number, failure: ModelFailure): number;
  sleep(ms: number, signal: AbortSignal): Promise<void>;
}

/** A live view of a response while it streams (what `event_deltas` previews are made of); must not throw. */
export interface ModelStreamObserver {
  /** A content block opened; `type` is the Messages API block type (`text`, `thinking`, `tool_use` …). */
  blockStart(index: number, type: string): void;
  textDelta(index: number, text: string): void;
}

export interface ModelPort {
  /** One attempt: never throws for an upstream failure, returns it as a value. */
  send(request: ModelRequest, signal: AbortSignal, observer?: ModelStreamObserver): Promise<ModelAttempt>;
  readonly retry: RetryPolicy;
}

export const realSleeper: Sleeper = {
  sleep(ms, signal) {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const onAbort = () => {
        clearTimeout(timer);
        reject(signal?.reason);
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      }, ms);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  },
};

const BASE_DELAY_MS = 1000;
const MAX_DELAY_MS = 30_000;

/** 1 s, 2 s, 4 s … capped at 30 s, or the upstream's hint when it gave one (bounded the same way). */
export function backoffPolicy(sleeper: Sleeper = realSleeper, maxRetries = 5): RetryPolicy {
  return {
    maxRetries,
    delayMs(retry, failure) {
      if (failure.retryAfterMs !== undefined) return Math.min(MAX_DELAY_MS, Math.max(0, failure.retryAfterMs));
      return Math.min(MAX_DELAY_MS, BASE_DELAY_MS * 2 ** Math.max(0, retry - 1));
    },
    sleep: (ms, signal) => sleeper.sleep(ms, signal),
  };
}

export interface AnthropicModelOptions {
  /** Default: the SDK's (Anthropic). */
  baseURL?: string | undefined;
  /** Without one, every request fails terminally with `missingKeyMessage`. */
  apiKey: string | undefined;
  missingKeyMessage?: string;
  maxTokens?: number;
  /** Per-request timeout (default 10 minutes, the SDK's). */
  timeoutMs?: number;
  retry?: RetryPolicy;
}

export const MISSING_KEY_MESSAGE =
  "no model API key is configured on this server: set OPENMA_MODEL_API_KEY (or ANTHROPIC_API_KEY) and send the message again";

export const DEFAULT_MAX_TOKENS = 8192;

export function createAnthropicModel(opts: AnthropicModelOptions): ModelPort {
  const retry = opts.retry ?? backoffPolicy();
  const maxTokens = opts.maxTokens ?? DEFAULT_MAX_TOKENS;
  if (!opts.apiKey) {
    const failure: ModelFailure = {
      errorType: "model_request_failed_error",
      message: opts.missingKeyMessage ?? MISSING_KEY_MESSAGE,
      retryable: false,
    };
    return { retry, send: async () => ({ type: "failure", failure }) };
  }
  const client = new Anthropic({
    apiKey: opts.apiKey,
    // null (not undefined) so the SDK does not pick up ANTHROPIC_BASE_URL / ANTHROPIC_AUTH_TOKEN on its own.
    authToken: null,
    baseURL: opts.baseURL ?? null,
    maxRetries: 0,
    ...(opts.timeoutMs ? { timeout: opts.timeoutMs } : {}),
    // No spans of the SDK's own: with tracing on, `openma serve` spans each request itself
    // (`openma.model.request`, with the gen_ai usage), and a second span per request cost
    // a measured 0.4 ms of CPU per turn (bench/ops-overhead.ts). Trace context still propagates.
    openTelemetry: { traces: false },
  });
  return {
    retry,
    async send(request, signal, observer) {
      if (signal.aborted) return { type: "aborted" };
      try {
        const stream = client.messages.stream(
          {
            model: request.model,
            max_tokens: maxTokens,
            messages: request.messages,
            ...(request.system ? { system: request.system } : {}),
            ...(request.tools.length ? { tools: request.tools as Tool[] } : {}),
            ...(request.userId ? { metadata: { user_id: request.userId } } : {}),
          },
          { signal },
        );
        if (observer) {
          stream.on("streamEvent", (event) => {
            if (event.type === "content_block_start") observer.blockStart(event.index, event.content_block.type);
            else if (event.type === "content_block_delta" && event.delta.type === "text_delta")
              observer.textDelta(event.index, event.delta.text);
          });
        }
        const message = await stream.finalMessage();
        return { type: "response", response: { content: message.content, stopReason: message.stop_reason, usage: usageOf(message.usage) } };
      } catch (err) {
        if (signal.aborted || err instanceof APIUserAbortError) return { type: "aborted" };
        return { type: "failure", failure: classifyModelError(err) };
      }
    },
  };
}

/** The port `openma serve` uses, configured from the environment. */
export function modelFromEnv(env: Readonly<Record<string, string | undefined>> = process.env, retry?: RetryPolicy): ModelPort {
  const maxTokens = Number(env.OPENMA_MODEL_MAX_TOKENS);
  return createAnthropicModel({
    baseURL: env.OPENMA_MODEL_BASE_URL || undefined,
    apiKey: env.OPENMA_MODEL_API_KEY || env.ANTHROPIC_API_KEY || undefined,
    ...(Number.isSafeInteger(maxTokens) && maxTokens > 0 ? { maxTokens } : {}),
    ...(retry ? { retry } : {}),
  });
}

function count(n: number | null | undefined): number {
  return typeof n === "number" && Number.isFinite(n) && n > 0 ? n : 0;
}

function usageOf(u: {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens?: number | null;
  cache_read_input_tokens?: number | null;
  cache_creation?: { ephemeral_5m_input_tokens?: number | null; ephemeral_1h_input_tokens?: number | null } | null;
}): ModelUsage {
  const creation = count(u.cache_creation_input_tokens);
  const oneHour = count(u.cache_creation?.ephemeral_1h_input_tokens);
  const fiveMin = u.cache_creation ? count(u.cache_creation.ephemeral_5m_input_tokens) : creation;
  return {
    input_tokens: count(u.input_tokens),
    output_tokens: count(u.output_tokens),
    cache_creation_input_tokens: creation,
    cache_read_input_tokens: count(u.cache_read_input_tokens),
    cache_creation_5m: fiveMin,
    cache_creation_1h: oneHour,
  };
}

function retryAfterMs(headers: Headers | undefined): number | undefined {
  const ms = Number(headers?.get("retry-after-ms"));
  if (Number.isFinite(ms) && ms > 0) return ms;
  const seconds = Number(headers?.get("retry-after"));
  if (Number.isFinite(seconds) && seconds > 0) return seconds * 1000;
  return undefined;
}

/** The upstream `error.type` of an API error body (also set for in-stream `event: error`). */
function upstreamType(err: APIError): string | undefined {
  const body = err.error as { error?: { type?: unknown }; type?: unknown } | undefined;
  const type = body?.error?.type ?? body?.type;
  return typeof type === "string" ? type : undefined;
}

/** Maps an SDK error to a session error type and whether another attempt may succeed. */
export function classifyModelError(err: unknown): ModelFailure {
  if (err instanceof APIConnectionError) {
    return { errorType: "model_request_failed_error", message: `model request failed: ${err.message}`, retryable: true };
  }
  if (!(err instanceof APIError)) {
    const message = err instanceof Error ? err.message : String(err);
    return { errorType: "unknown_error", message: `model request failed: ${message}`, retryable: false };
  }
  const type = upstreamType(err);
  const status = err.status;
  const hint = retryAfterMs(err.headers);
  const base = {
    message: `model request failed${status ? ` (HTTP ${status})` : ""}: ${err.message}`,
    ...(hint ? { retryAfterMs: hint } : {}),
  };
  if (status === 429 || type === "rate_limit_error") return { ...base, errorType: "model_rate_limited_error", retryable: true };
  if (status === 529 || type === "overloaded_error") return { ...base, errorType: "model_overloaded_error", retryable: true };
  if (status === 402 || type === "billing_error") return { ...base, errorType: "billing_error", retryable: false };
  if (status === 401 || status === 403 || type === "authentication_error" || type === "permission_error") {
    return {
      ...base,
      errorType: "model_request_failed_error",
      message: `${base.message} (check OPENMA_MODEL_API_KEY / ANTHROPIC_API_KEY)`,
      retryable: false,
    };
  }
  const transient = status === undefined || status === 408 || status === 409 || status >= 500 || type === "api_error";
  return { ...base, errorType: "model_request_failed_error", retryable: transient };
}
