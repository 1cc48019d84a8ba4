/**
 * The Anthropic Messages API (`POST /v1/messages`): the request read into the
 * neutral view, and a scripted response rendered as the JSON `Message` and the
 * SSE event sequence the real API streams for it. The wire objects are typed
 * against the official SDK's declarations so a shape drift fails typechecking.
 */
import type { ContentBlock, Message, RawMessageStreamEvent, Usage } from "@anthropic-ai/sdk/resources/messages";
import { z } from "zod";
import { type ApiErrorSpec, bearerToken, type DialectSpec, type RouteInfo, retryHeaders, validate } from "../dialect.ts";
import { type ErrorType, errorTypeFor, randomId } from "../errors.ts";
import { chunk, DEFAULT_CHUNK_CHARS, sseFrame } from "../frames.ts";
import type { ResponseSpec } from "../script.ts";
import { resolveUsage } from "../usage.ts";
import { type RequestView, resolveToolNames, type ViewBlock, type ViewMessage } from "../view.ts";

const blockSchema = z.looseObject({ type: z.string().min(1).max(128) });
const contentSchema = z.union([z.string(), z.array(blockSchema).max(100_000)]);
const formatSchema = z.looseObject({ type: z.string().max(128).optional(), schema: z.unknown().optional() });

const countRequestSchema = z.looseObject({
  model: z.string().min(1).max(256),
  messages: z
    .array(z.looseObject({ role: z.enum(["user", "assistant", "system"]), content: contentSchema }))
    .min(1)
    .max(100_000),
  system: contentSchema.optional(),
  tools: z
    .array(z.looseObject({ name: z.string().max(256).optional(), type: z.string().max(128).optional() }))
    .max(10_000)
    .optional(),
  /** Structured outputs: the current `output_config.format` and the older beta `output_format`. */
  output_config: z.looseObject({ format: formatSchema.nullable().optional() }).optional(),
  output_format: formatSchema.nullable().optional(),
});

/** Validated as far as the scripted model relies on it; unknown fields pass, as the real API takes many more. */
export const messagesRequestSchema = countRequestSchema.extend({
  max_tokens: z.number().int().min(1).max(100_000_000),
  stream: z.boolean().optional(),
  metadata: z.looseObject({ user_id: z.string().max(1024).nullable().optional() }).optional(),
});

export type MessagesRequest = z.output<typeof messagesRequestSchema>;
type CountRequest = z.output<typeof countRequestSchema>;
type Content = z.output<typeof contentSchema>;
type Block = Record<string, unknown> & { type: string };

function blocks(content: Content): Block[] {
  return typeof content === "string" ? [{ type: "text", text: content }] : (content as Block[]);
}

/** Text of string content and text blocks; tool results and media are not text. */
function textOf(content: Content | undefined): string {
  if (content === undefined) return "";
  return blocks(content)
    .filter((b) => b.type === "text" && typeof b.text === "string")
    .map((b) => b.text as string)
    .join("\n");
}

function viewBlock(b: Block): ViewBlock {
  if (b.type === "text" && typeof b.text === "string") return { type: "text", text: b.text };
  if (b.type === "thinking" && typeof b.thinking === "string") return { type: "thinking", text: b.thinking };
  if (b.type.endsWith("tool_use") && typeof b.name === "string") {
    return { type: "tool_use", id: typeof b.id === "string" ? b.id : null, name: b.name, input: b.input ?? {} };
  }
  if (b.type === "tool_result" && typeof b.tool_use_id === "string") {
    const c = b.content;
    const text = typeof c === "string" ? c : Array.isArray(c) ? textOf(c as Block[]) : "";
    return { type: "tool_result", tool_use_id: b.tool_use_id, tool_name: null, text, is_error: b.is_error === true };
  }
  return { type: "other", kind: b.type };
}

function toView(req: CountRequest, extra: Pick<RequestView, "stream" | "user_id" | "max_output_tokens">): RequestView {
  const system = [textOf(req.system)];
  const messages: ViewMessage[] = [];
  for (const m of req.messages) {
    // Claude Code puts a system message after the user's prompt: it is system text, not a turn.
    if (m.role === "system") system.push(textOf(m.content));
    else messages.push({ role: m.role, content: blocks(m.content).map(viewBlock) });
  }
  const format = req.output_config?.format ?? req.output_format ?? null;
  const jsonOutput = format?.type === "json_schema";
  return {
    dialect: "anthropic",
    model: req.model,
    system: system.filter(Boolean).join("\n"),
    messages: resolveToolNames(messages),
    tools: (req.tools ?? []).flatMap((t) => ((t.name ?? t.type) ? [(t.name ?? t.type) as string] : [])),
    json_output: jsonOutput,
    json_schema: jsonOutput ? (format?.schema ?? null) : null,
    ...extra,
  };
}

export type WireEvent = RawMessageStreamEvent | { type: "ping" };

function usageOf(spec: ResponseSpec, view: RequestView): Usage {
  const u = resolveUsage(spec, view);
  return {
    input_tokens: u.input,
    output_tokens: u.output,
    cache_creation_input_tokens: u.cacheCreation,
    cache_read_input_tokens: u.cacheRead,
    cache_creation: { ephemeral_5m_input_tokens: u.cacheCreation, ephemeral_1h_input_tokens: 0 },
    inference_geo: null,
    output_tokens_details: null,
    server_tool_use: null,
    service_tier: "standard",
    speed: null,
  };
}

/** Final blocks, with tool_use ids and thinking signatures filled in. */
function finalBlocks(spec: ResponseSpec): ContentBlock[] {
  return spec.content.map((b): ContentBlock => {
    switch (b.type) {
      case "text":
        return { type: "text", text: b.text, citations: null };
      case "tool_use":
        return { type: "tool_use", id: b.id ?? randomId("toolu"), name: b.name, input: b.input, caller: { type: "direct" } };
      case "thinking":
        return { type: "thinking", thinking: b.thinking, signature: b.signature ?? randomId("sig") };
      default:
        return { type: "redacted_thinking", data: b.data };
    }
  });
}

/** The block as `content_block_start` announces it: empty, to be filled by deltas. */
function startOf(block: ContentBlock): ContentBlock {
  switch (block.type) {
    case "text":
      return { ...block, text: "" };
    case "tool_use":
      return { ...block, input: {} };
    case "thinking":
      return { ...block, thinking: "", signature: "" };
    default:
      return block;
  }
}

function deltasOf(block: ContentBlock, index: number, size: number): WireEvent[] {
  const ev = (delta: Extract<WireEvent, { type: "content_block_delta" }>["delta"]): WireEvent => ({
    type: "content_block_delta",
    index,
    delta,
  });
  switch (block.type) {
    case "text":
      return chunk(block.text, size).map((text) => ev({ type: "text_delta", text }));
    case "tool_use":
      // The API opens tool input with an empty partial_json, then streams the JSON text in pieces.
      return [
        ev({ type: "input_json_delta", partial_json: "" }),
        ...chunk(JSON.stringify(block.input), size).map((partial_json) => ev({ type: "input_json_delta", partial_json })),
      ];
    case "thinking":
      return [
        ...chunk(block.thinking, size).map((thinking) => ev({ type: "thinking_delta", thinking })),
        ev({ type: "signature_delta", signature: block.signature }),
      ];
    default:
      return [];
  }
}

export interface BuiltResponse {
  message: Message;
  /** `message_start`, `ping`, per block start/deltas/stop, `message_delta`, `message_stop`. */
  events: WireEvent[];
}

export function buildResponse(spec: ResponseSpec, view: RequestView): BuiltResponse {
  const content = finalBlocks(spec);
  const usage = usageOf(spec, view);
  const stopReason = spec.stop_reason ?? (content.some((b) => b.type === "tool_use") ? "tool_use" : "end_turn");
  const message: Message = {
    id: randomId("msg"),
    type: "message",
    role: "assistant",
    model: spec.model ?? view.model,
    content,
    stop_reason: stopReason,
    stop_sequence: spec.stop_sequence ?? null,
    stop_details: null,
    container: null,
    diagnostics: null,
    usage,
  };
  const size = spec.chunk_chars ?? DEFAULT_CHUNK_CHARS;
  const events: WireEvent[] = [
    {
      type: "message_start",
      message: {
        ...message,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { ...usage, output_tokens: Math.min(1, usage.output_tokens) },
      },
    },
    { type: "ping" },
  ];
  content.forEach((block, index) => {
    events.push({ type: "content_block_start", index, content_block: startOf(block) });
    events.push(...deltasOf(block, index, size));
    events.push({ type: "content_block_stop", index });
  });
  events.push({
    type: "message_delta",
    delta: { stop_reason: stopReason, stop_sequence: message.stop_sequence, stop_details: null, container: null },
    usage: {
      input_tokens: usage.input_tokens,
      output_tokens: usage.output_tokens,
      cache_creation_input_tokens: usage.cache_creation_input_tokens,
      cache_read_input_tokens: usage.cache_read_input_tokens,
      output_tokens_details: null,
      server_tool_use: null,
    },
  });
  events.push({ type: "message_stop" });
  return { message, events };
}

/** The Messages API error envelope: `{type:"error", error:{type, message}, request_id}`, the id repeated in `request-id`. */
export function anthropicErrorBody(type: ErrorType, message: string, requestId: string) {
  return { type: "error" as const, error: { type, message }, request_id: requestId };
}

function errorResponse(e: ApiErrorSpec): Response {
  const headers: Record<string, string> = {
    "content-type": "application/json",
    "request-id": e.requestId,
    ...retryHeaders(e.retryAfterMs),
  };
  if (e.noRetry) headers["x-should-retry"] = "false";
  return new Response(JSON.stringify(anthropicErrorBody(e.type, e.message, e.requestId)), { status: e.status, headers });
}

export const anthropic: DialectSpec = {
  name: "anthropic",
  credentials(headers) {
    const xKey = headers.get("x-api-key");
    if (xKey !== null) return { via: "x-api-key", key: xKey };
    const bearer = bearerToken(headers);
    return bearer !== null ? { via: "bearer", key: bearer } : { via: null, key: null };
  },
  authFailure: (_presented, requestId) => errorResponse({ status: 401, type: errorTypeFor(401), message: "invalid x-api-key", requestId }),
  errorResponse,
  streamErrorFrame: (type, message, requestId) => sseFrame("error", anthropicErrorBody(type, message, requestId)),
  headers: (requestId) => ({ "request-id": requestId }),
  parse(body, _route: RouteInfo) {
    const parsed = validate(messagesRequestSchema, body);
    if (!parsed.ok) return parsed;
    const req = parsed.value;
    const view = toView(req, {
      stream: req.stream === true,
      user_id: req.metadata?.user_id ?? null,
      max_output_tokens: req.max_tokens,
    });
    return {
      ok: true,
      value: {
        view,
        json: (spec) => buildResponse(spec, view).message,
        frames: (spec) => buildResponse(spec, view).events.map((e) => sseFrame(e.type, e)),
      },
    };
  },
  count: {
    parse(body) {
      const parsed = validate(countRequestSchema, body);
      if (!parsed.ok) return parsed;
      return { ok: true, value: toView(parsed.value, { stream: false, user_id: null, max_output_tokens: null }) };
    },
    body: (tokens) => ({ input_tokens: tokens }),
  },
};
