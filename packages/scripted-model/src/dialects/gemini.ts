/**
 * The Gemini API (`/v1beta/models/{model}:generateContent`,
 * `:streamGenerateContent?alt=sse`, `:countTokens`), which Gemini CLI speaks:
 * `contents` read into the neutral view, and a scripted response rendered as a
 * `GenerateContentResponse` or a stream of them. Thinking becomes `thought`
 * parts, tool_use a `functionCall` part (whole, as the API sends it); results
 * come back as `functionResponse` parts naming the function.
 */
import type { FinishReason, GenerateContentResponseUsageMetadata, Part } from "@google/genai";
import { z } from "zod";
import { type ApiErrorSpec, type BuildContext, type DialectSpec, type RouteInfo, validate } from "../dialect.ts";
import { portableStatus, randomId, statusFor } from "../errors.ts";
import { chunk, DEFAULT_CHUNK_CHARS, dataFrame } from "../frames.ts";
import type { BlockSpec, ResponseSpec } from "../script.ts";
import { resolveUsage, stopKind, totalInput } from "../usage.ts";
import type { RequestView, ViewBlock, ViewMessage } from "../view.ts";

const partSchema = z.looseObject({
  text: z.string().optional(),
  thought: z.boolean().optional(),
  functionCall: z
    .looseObject({ name: z.string().max(256), args: z.record(z.string(), z.unknown()).optional(), id: z.string().optional() })
    .optional(),
  functionResponse: z
    .looseObject({ name: z.string().max(256), response: z.record(z.string(), z.unknown()).optional(), id: z.string().optional() })
    .optional(),
});
const contentSchema = z.looseObject({ role: z.string().max(32).optional(), parts: z.array(partSchema).max(100_000).default([]) });

const requestSchema = z.looseObject({
  contents: z.array(contentSchema).min(1).max(100_000),
  systemInstruction: z.union([contentSchema, z.string()]).optional(),
  /** The REST API accepts the proto field name too. */
  system_instruction: z.union([contentSchema, z.string()]).optional(),
  tools: z
    .array(
      z.looseObject({
        functionDeclarations: z
          .array(z.looseObject({ name: z.string().max(256) }))
          .max(10_000)
          .optional(),
      }),
    )
    .max(1000)
    .optional(),
  generationConfig: z
    .looseObject({
      maxOutputTokens: z.number().int().min(1).max(100_000_000).optional(),
      responseMimeType: z.string().max(128).optional(),
      responseSchema: z.unknown().optional(),
      responseJsonSchema: z.unknown().optional(),
    })
    .optional(),
});

const countSchema = z.looseObject({
  contents: z.array(contentSchema).max(100_000).optional(),
  generateContentRequest: requestSchema.partial({ contents: true }).optional(),
});

type GeminiRequest = z.output<typeof requestSchema>;
type GeminiPart = z.output<typeof partSchema>;
type GeminiContent = z.output<typeof contentSchema>;

/** A functionResponse's text: Gemini CLI sends `{output}` or `{error}`; anything else is read as JSON. */
function responseText(response: Record<string, unknown> | undefined): { text: string; isError: boolean } {
  const r = response ?? {};
  if (typeof r.output === "string") return { text: r.output, isError: false };
  if (r.error !== undefined && r.output === undefined)
    return { text: typeof r.error === "string" ? r.error : JSON.stringify(r.error), isError: true };
  if (typeof r.content === "string") return { text: r.content, isError: false };
  return { text: JSON.stringify(r), isError: false };
}

function viewPart(p: GeminiPart): ViewBlock {
  if (p.functionCall)
    return { type: "tool_use", id: p.functionCall.id ?? null, name: p.functionCall.name, input: p.functionCall.args ?? {} };
  if (p.functionResponse) {
    const { text, isError } = responseText(p.functionResponse.response);
    return { type: "tool_result", tool_use_id: p.functionResponse.id ?? null, tool_name: p.functionResponse.name, text, is_error: isError };
  }
  if (typeof p.text === "string") return p.thought ? { type: "thinking", text: p.text } : { type: "text", text: p.text };
  return { type: "other", kind: Object.keys(p)[0] ?? "part" };
}

function instructionText(s: GeminiContent | string | undefined): string {
  if (s === undefined) return "";
  if (typeof s === "string") return s;
  return s.parts.flatMap((p) => (typeof p.text === "string" ? [p.text] : [])).join("\n");
}

type Tools = GeminiRequest["tools"];

function toolNames(tools: Tools): string[] {
  return (tools ?? []).flatMap((t) => {
    const { functionDeclarations, ...other } = t;
    return [...(functionDeclarations ?? []).map((f) => f.name), ...Object.keys(other)];
  });
}

function toView(req: Partial<GeminiRequest>, route: RouteInfo): RequestView {
  const messages: ViewMessage[] = (req.contents ?? []).map((c) => ({
    role: c.role === "model" ? "assistant" : "user",
    content: c.parts.map(viewPart),
  }));
  const config = req.generationConfig;
  const schema = config?.responseJsonSchema ?? config?.responseSchema;
  return {
    dialect: "gemini",
    model: route.model ?? "",
    stream: route.stream === true,
    system: instructionText(req.systemInstruction ?? req.system_instruction),
    messages,
    tools: toolNames(req.tools),
    user_id: null,
    max_output_tokens: config?.maxOutputTokens ?? null,
    json_output: config?.responseMimeType === "application/json" || schema !== undefined,
    json_schema: schema ?? null,
  };
}

const FINISH: Record<ReturnType<typeof stopKind>, `${FinishReason}`> = {
  stop: "STOP",
  tool_calls: "STOP",
  length: "MAX_TOKENS",
  refusal: "SAFETY",
};

function usageOf(spec: ResponseSpec, view: RequestView): GenerateContentResponseUsageMetadata {
  const u = resolveUsage(spec, view);
  const prompt = totalInput(u);
  return {
    promptTokenCount: prompt,
    candidatesTokenCount: u.output - u.reasoning,
    totalTokenCount: prompt + u.output,
    // The API leaves out counters that are zero.
    ...(u.cacheRead > 0 ? { cachedContentTokenCount: u.cacheRead } : {}),
    ...(u.reasoning > 0 ? { thoughtsTokenCount: u.reasoning } : {}),
  };
}

/** A block's parts, streamed: text in pieces, a function call whole. */
function partsOf(b: BlockSpec, size: number): Part[] {
  switch (b.type) {
    case "text":
      return chunk(b.text, size).map((text) => ({ text }));
    case "thinking": {
      const pieces: Part[] = chunk(b.thinking, size).map((text) => ({ text, thought: true }));
      if (b.signature && pieces.length) pieces[pieces.length - 1]!.thoughtSignature = b.signature;
      return pieces;
    }
    case "tool_use":
      return [{ functionCall: { name: b.name, args: b.input, ...(b.id ? { id: b.id } : {}) } }];
    default:
      return [];
  }
}

/** The streamed chunks; the last carries the finish reason and the usage. */
function chunks(spec: ResponseSpec, view: RequestView): object[] {
  const responseId = randomId("r").slice(2);
  const modelVersion = spec.model ?? view.model;
  const parts = spec.content.flatMap((b) => partsOf(b, spec.chunk_chars ?? DEFAULT_CHUNK_CHARS));
  const pieces: Part[][] = parts.length ? parts.map((p) => [p]) : [[]];
  return pieces.map((piece, i) => {
    const last = i === pieces.length - 1;
    return {
      candidates: [{ content: { role: "model", parts: piece }, ...(last ? { finishReason: FINISH[stopKind(spec)] } : {}), index: 0 }],
      ...(last ? { usageMetadata: usageOf(spec, view) } : {}),
      modelVersion,
      responseId,
    };
  });
}

function whole(spec: ResponseSpec, view: RequestView): object {
  const parts = spec.content.flatMap((b) => partsOf(b, Number.MAX_SAFE_INTEGER));
  return {
    candidates: [{ content: { role: "model", parts }, finishReason: FINISH[stopKind(spec)], index: 0 }],
    usageMetadata: usageOf(spec, view),
    modelVersion: spec.model ?? view.model,
    responseId: randomId("r").slice(2),
  };
}

/** google.rpc status names for HTTP codes. */
const RPC_STATUS: Record<number, string> = {
  400: "INVALID_ARGUMENT",
  401: "UNAUTHENTICATED",
  403: "PERMISSION_DENIED",
  404: "NOT_FOUND",
  409: "ABORTED",
  429: "RESOURCE_EXHAUSTED",
  499: "CANCELLED",
  500: "INTERNAL",
  501: "UNIMPLEMENTED",
  503: "UNAVAILABLE",
  504: "DEADLINE_EXCEEDED",
};

function rpcError(code: number, message: string, details: object[] = []) {
  const status = RPC_STATUS[code] ?? (code >= 500 ? "INTERNAL" : "FAILED_PRECONDITION");
  return { error: { code, message, status, ...(details.length ? { details } : {}) } };
}

function errorResponse(e: ApiErrorSpec, details: object[] = []): Response {
  const status = portableStatus(e.status);
  // Gemini tells a client when to retry in the body (google.rpc.RetryInfo), which Gemini CLI reads.
  const retry =
    e.retryAfterMs === undefined ? [] : [{ "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay: `${e.retryAfterMs / 1000}s` }];
  return new Response(JSON.stringify(rpcError(status, e.message, [...details, ...retry])), {
    status,
    headers: { "content-type": "application/json; charset=UTF-8" },
  });
}

function authFailure(presented: boolean, requestId: string): Response {
  if (!presented) {
    return errorResponse({
      status: 403,
      type: "permission_error",
      message:
        "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
      requestId,
    });
  }
  // A wrong key is a 400 in this API, with the reason in an ErrorInfo detail.
  const info = { "@type": "type.googleapis.com/google.rpc.ErrorInfo", reason: "API_KEY_INVALID", domain: "googleapis.com" };
  return errorResponse(
    { status: 400, type: "authentication_error", message: "API key not valid. Please pass a valid API key.", requestId },
    [info],
  );
}

const CRLF2 = "\r\n\r\n";

export const gemini: DialectSpec = {
  name: "gemini",
  credentials(headers, url) {
    const header = headers.get("x-goog-api-key");
    if (header !== null) return { via: "x-goog-api-key", key: header };
    const query = url.searchParams.get("key");
    return query !== null ? { via: "query-key", key: query } : { via: null, key: null };
  },
  authFailure,
  errorResponse: (e) => errorResponse(e),
  streamErrorFrame: (type, message) => {
    return dataFrame(rpcError(portableStatus(statusFor(type)), message), CRLF2);
  },
  headers: () => ({}),
  parse(body, route) {
    const parsed = validate(requestSchema, body);
    if (!parsed.ok) return parsed;
    const view = toView(parsed.value, route);
    return {
      ok: true,
      value: {
        view,
        // Without alt=sse, streamGenerateContent answers the chunks as one JSON array.
        json: (spec, _ctx: BuildContext) => (route.streamAsJsonArray ? chunks(spec, view) : whole(spec, view)),
        frames: (spec) => chunks(spec, view).map((c) => dataFrame(c, CRLF2)),
      },
    };
  },
  count: {
    parse(body, route) {
      const parsed = validate(countSchema, body);
      if (!parsed.ok) return parsed;
      const inner = parsed.value.generateContentRequest;
      return { ok: true, value: toView(inner ?? { contents: parsed.value.contents ?? [] }, { ...route, stream: false }) };
    },
    body: (tokens) => ({ totalTokens: tokens, promptTokensDetails: [{ modality: "TEXT", tokenCount: tokens }] }),
  },
};
