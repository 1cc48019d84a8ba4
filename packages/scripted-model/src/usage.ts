/**
 * Token counts for a scripted response, in the Messages API's terms (input
 * excludes the cache counters), resolved once and then rendered by each
 * dialect: OpenAI and Gemini count cached tokens inside their input total and
 * report reasoning as part of the output.
 */
import type { BlockSpec, ResponseSpec } from "./script.ts";
import type { RequestView } from "./view.ts";

export interface ResolvedUsage {
  /** Input tokens neither read from nor written to the cache. */
  input: number;
  cacheCreation: number;
  cacheRead: number;
  /** All output, thinking included. */
  output: number;
  /** The thinking part of `output`. */
  reasoning: number;
}

/** Deterministic stand-in for a token count: ~4 characters per token. */
export function estimateTokens(chars: number): number {
  return Math.max(1, Math.ceil(chars / 4));
}

/** The request's size as tokens, from the neutral view so every dialect estimates the same conversation alike. */
export function estimateInputTokens(view: RequestView): number {
  return estimateTokens(JSON.stringify([view.system, view.messages, view.tools]).length);
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

function thinkingChars(blocks: BlockSpec[]): number {
  return blocks.reduce((n, b) => n + (b.type === "thinking" ? b.thinking.length : 0), 0);
}

/** Scripted counters win; missing ones are estimated (characters / 4), the cache counters default to 0. */
export function resolveUsage(spec: ResponseSpec, view: RequestView): ResolvedUsage {
  const u = spec.usage ?? {};
  const output = u.output_tokens ?? estimateTokens(outputChars(spec.content));
  const thinking = thinkingChars(spec.content);
  return {
    input: u.input_tokens ?? estimateInputTokens(view),
    cacheCreation: u.cache_creation_input_tokens ?? 0,
    cacheRead: u.cache_read_input_tokens ?? 0,
    output,
    reasoning: Math.min(output, u.reasoning_tokens ?? (thinking > 0 ? estimateTokens(thinking) : 0)),
  };
}

/** Input as OpenAI and Gemini count it: cached and cache-written tokens included. */
export function totalInput(u: ResolvedUsage): number {
  return u.input + u.cacheCreation + u.cacheRead;
}

/** How a scripted stop reason reads in a dialect that has no tool_use stop: it stopped because it calls tools, or it ran out, or it refused. */
export type StopKind = "stop" | "tool_calls" | "length" | "refusal";

export function stopKind(spec: ResponseSpec): StopKind {
  const hasToolUse = spec.content.some((b) => b.type === "tool_use");
  switch (spec.stop_reason ?? (hasToolUse ? "tool_use" : "end_turn")) {
    case "tool_use":
      return hasToolUse ? "tool_calls" : "stop";
    case "max_tokens":
    case "model_context_window_exceeded":
      return "length";
    case "refusal":
      return "refusal";
    default:
      return "stop";
  }
}
