/**
 * Scripted response → Messages API wire objects: the JSON `Message` and the
 * SSE event sequence the real API streams for it. Both are typed against the
 * official SDK's own declarations so a shape drift fails typechecking here.
 */
import type { ContentBlock, Message, RawMessageStreamEvent, Usage } from "@anthropic-ai/sdk/resources/messages";
import { randomId } from "./errors.ts";
import type { MessagesRequest } from "./request.ts";
import type { BlockSpec, ResponseSpec } from "./script.ts";

export type WireEvent = RawMessageStreamEvent | { type: "ping" };

export interface BuiltResponse {
  message: Message;
  /** `message_start`, `ping`, per block start/deltas/stop, `message_delta`, `message_stop`. */
  events: WireEvent[];
}

const DEFAULT_CHUNK_CHARS = 16;

/** Deterministic stand-in for a token count: ~4 characters per token. */
function estimateTokens(chars: number): number {
  return Math.max(1, Math.ceil(chars / 4));
}

function inputChars(req: MessagesRequest): number {
  return JSON.stringify([req.system ?? null, req.messages, req.tools ?? null]).length;
}

function outputChars(blocks: BlockSpec[]): number {
  let n = 0;
  for (const b of blocks) {
    if (b.type === "text") n += b.text.length;
    else if (b.type === "tool_use") n += JSON.stringify(b.input).length + b.name.length;
    else if (b.type === "thinking") n += b.thinking.length;
  }
  return n;
}

export function chunk(text: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

function usageOf(spec: ResponseSpec, req: MessagesRequest): Usage {
  const u = spec.usage ?? {};
  const cacheCreation = u.cache_creation_input_tokens ?? 0;
  return {
    input_tokens: u.input_tokens ?? estimateTokens(inputChars(req)),
    output_tokens: u.output_tokens ?? estimateTokens(outputChars(spec.content)),
    cache_creation_input_tokens: cacheCreation,
    cache_read_input_tokens: u.cache_read_input_tokens ?? 0,
    cache_creation: { ephemeral_5m_input_tokens: cacheCreation, ephemeral_1h_input_tokens: 0 },
    inference_geo: null,
    output_tokens_details: null,
    server_tool_use: null,
    service_tier: "standard",
    speed: null,
  };
}

/** Final blocks, with tool_use ids and thinking signatures filled in. */
function finalBlocks(blocks: BlockSpec[]): ContentBlock[] {
  return blocks.map((b): ContentBlock => {
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

export function buildResponse(spec: ResponseSpec, req: MessagesRequest): BuiltResponse {
  const content = finalBlocks(spec.content);
  const usage = usageOf(spec, req);
  const stopReason = spec.stop_reason ?? (content.some((b) => b.type === "tool_use") ? "tool_use" : "end_turn");
  const message: Message = {
    id: randomId("msg"),
    type: "message",
    role: "assistant",
    model: spec.model ?? req.model,
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

/** One SSE message: an `event:` line naming the type, then the JSON data. */
export function sseFrame(event: string, data: unknown): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}
