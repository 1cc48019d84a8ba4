/** Matchers and session keys, read from the dialect-neutral request view. */
import type { Matcher, SessionKey } from "./script.ts";
import { lastMessageToolResults, lastUserText, type RequestView, type ToolResultView } from "./view.ts";

const q = JSON.stringify;

/** Why a matcher rejects a request, or null when it accepts it. */
export function mismatch(m: Matcher | undefined, view: RequestView): string | null {
  if (!m) return null;
  return requestMismatch(m, view) ?? conversationMismatch(m, view) ?? toolResultMismatch(m, lastMessageToolResults(view));
}

/** Conditions on the request as a whole: dialect, system prompt, tools, output settings. */
function requestMismatch(m: Matcher, view: RequestView): string | null {
  if (m.dialect !== undefined && view.dialect !== m.dialect) return `expects the ${m.dialect} dialect, got ${view.dialect}`;
  if (m.system_contains !== undefined && !view.system.includes(m.system_contains)) {
    return `system prompt does not contain ${q(m.system_contains)}`;
  }
  if (m.system_matches !== undefined && !new RegExp(m.system_matches, "i").test(view.system)) {
    return `system prompt does not match /${m.system_matches}/i`;
  }
  if (m.stream !== undefined && view.stream !== m.stream) {
    return m.stream ? "expects a streaming request" : "expects a non-streaming request";
  }
  if (m.has_tools !== undefined && view.tools.length > 0 !== m.has_tools) {
    return m.has_tools ? "expects a request with tools" : `expects a request without tools, got ${view.tools.length}`;
  }
  if (m.tools_include) {
    const have = new Set(view.tools);
    const missing = m.tools_include.filter((n) => !have.has(n));
    if (missing.length) return `request lacks tools ${q(missing)}`;
  }
  if (m.json_output !== undefined && view.json_output !== m.json_output) {
    return m.json_output ? "expects a request for JSON output" : "expects a request for free-form output";
  }
  const cap = m.max_output_tokens_at_most;
  if (cap !== undefined && (view.max_output_tokens === null || view.max_output_tokens > cap)) {
    return `expects an output cap of at most ${cap} tokens, got ${view.max_output_tokens ?? "none"}`;
  }
  return null;
}

function conversationMismatch(m: Matcher, view: RequestView): string | null {
  if (m.last_user_text_contains !== undefined && !(lastUserText(view) ?? "").includes(m.last_user_text_contains)) {
    return `last user message does not contain ${q(m.last_user_text_contains)}`;
  }
  if (m.message_count !== undefined && view.messages.length !== m.message_count) {
    return `expects ${m.message_count} messages, got ${view.messages.length}`;
  }
  return null;
}

function toolResultMismatch(m: Matcher, results: ToolResultView[]): string | null {
  let candidates = results;
  if (m.tool_result_for !== undefined) {
    candidates = candidates.filter((r) => r.tool_name === m.tool_result_for);
    if (!candidates.length) return `last message has no tool_result for tool ${q(m.tool_result_for)}`;
  }
  if (m.tool_result_contains !== undefined) {
    const needle = m.tool_result_contains;
    candidates = candidates.filter((r) => r.text.includes(needle));
    if (!candidates.length) return `no tool_result in the last message contains ${q(needle)}`;
  }
  if (m.tool_result_is_error !== undefined) {
    candidates = candidates.filter((r) => r.is_error === m.tool_result_is_error);
    if (!candidates.length) return `no tool_result in the last message has is_error=${m.tool_result_is_error}`;
  }
  return null;
}

/** The conversation key under `session_key`; "" when the request carries none. */
export function sessionKeyOf(spec: SessionKey, view: RequestView): string {
  const source = spec.from === "metadata.user_id" ? (view.user_id ?? "") : view.system;
  if (!spec.pattern) return source;
  const m = new RegExp(spec.pattern).exec(source);
  if (!m) return "";
  return m[1] ?? m[0];
}
