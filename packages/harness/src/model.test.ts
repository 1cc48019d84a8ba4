/** Upstream failures as session errors, the back-off policy, and the key-less port. */
import { APIConnectionError, APIError } from "@anthropic-ai/sdk";
import { describe, expect, it } from "vitest";
import { backoffPolicy, classifyModelError, createAnthropicModel, MISSING_KEY_MESSAGE, type ModelFailure } from "./model.ts";

const apiError = (status: number | undefined, type: string, headers: Record<string, string> = {}) =>
  status === undefined
    ? new APIError(undefined, { type: "error", error: { type, message: "in-stream" } }, undefined, new Headers(headers))
    : APIError.generate(status, { type: "error", error: { type, message: `upstream ${type}` } }, undefined, new Headers(headers));

describe("classifyModelError", () => {
  it("retries rate limits, overloads, server errors and connection failures", () => {
    expect(classifyModelError(apiError(429, "rate_limit_error", { "retry-after-ms": "1500" }))).toMatchObject({
      errorType: "model_rate_limited_error",
      retryable: true,
      retryAfterMs: 1500,
    });
    expect(classifyModelError(apiError(529, "overloaded_error", { "retry-after": "2" }))).toMatchObject({
      errorType: "model_overloaded_error",
      retryable: true,
      retryAfterMs: 2000,
    });
    expect(classifyModelError(apiError(undefined, "overloaded_error"))).toMatchObject({
      errorType: "model_overloaded_error",
      retryable: true,
    });
    expect(classifyModelError(apiError(500, "api_error"))).toMatchObject({ errorType: "model_request_failed_error", retryable: true });
    expect(classifyModelError(new APIConnectionError({ message: "socket hang up" }))).toMatchObject({
      errorType: "model_request_failed_error",
      retryable: true,
    });
  });

  it("does not retry what another attempt cannot fix", () => {
    const auth = classifyModelError(apiError(401, "authentication_error"));
    expect(auth).toMatchObject({ errorType: "model_request_failed_error", retryable: false });
    expect(auth.message).toContain("OPENMA_MODEL_API_KEY");
    expect(classifyModelError(apiError(400, "invalid_request_error"))).toMatchObject({ retryable: false });
    expect(classifyModelError(apiError(402, "billing_error"))).toMatchObject({ errorType: "billing_error", retryable: false });
    expect(classifyModelError(new Error("boom"))).toMatchObject({ errorType: "unknown_error", retryable: false });
  });
});

describe("backoffPolicy", () => {
  const failure: ModelFailure = { errorType: "model_overloaded_error", message: "", retryable: true };
  it("doubles from 1 s up to 30 s, or follows a bounded retry-after hint", () => {
    const policy = backoffPolicy({ sleep: async () => {} }, 7);
    expect([1, 2, 3, 4, 5, 6, 7].map((n) => policy.delayMs(n, failure))).toEqual([1000, 2000, 4000, 8000, 16000, 30000, 30000]);
    expect(policy.delayMs(1, { ...failure, retryAfterMs: 250 })).toBe(250);
    expect(policy.delayMs(1, { ...failure, retryAfterMs: 3_600_000 })).toBe(30_000);
    expect(policy.maxRetries).toBe(7);
  });

  it("sleeps through the injected sleeper", async () => {
    const slept: number[] = [];
    const policy = backoffPolicy({ sleep: async (ms) => void slept.push(ms) });
    await policy.sleep(1234, new AbortController().signal);
    expect(slept).toEqual([1234]);
  });
});

describe("createAnthropicModel without a key", () => {
  it("fails every request terminally, naming the variables, without any network call", async () => {
    const port = createAnthropicModel({ apiKey: undefined, baseURL: "http://127.0.0.1:1" });
    const result = await port.send(
      { model: "m", system: null, messages: [{ role: "user", content: "hi" }], tools: [] },
      new AbortController().signal,
    );
    expect(result).toEqual({
      type: "failure",
      failure: { errorType: "model_request_failed_error", message: MISSING_KEY_MESSAGE, retryable: false },
    });
    expect(MISSING_KEY_MESSAGE).toMatch(/OPENMA_MODEL_API_KEY.*ANTHROPIC_API_KEY/);
  });
});
