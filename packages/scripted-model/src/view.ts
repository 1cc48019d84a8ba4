/**
 * The dialect-neutral view of a model request. Every dialect's request body is
 * read into this shape, and the script's matchers, session keys and side
 * rules only ever look at it: one script drives Anthropic, OpenAI and Gemini
 * callers alike, and a test asserts "the next request carries the earlier
 * turns" the same way whatever the agent speaks.
 */

export const DIALECTS = ["anthropic", "openai-responses", "openai-chat", "gemini"] as const;
export type Dialect = (typeof DIALECTS)[number];

export type ViewBlock =
  | { type: "text"; text: string }
  | { type: "thinking"; text: string }
  /** `id` is the dialect's call id (Anthropic `toolu_…`, OpenAI `call_…`); Gemini calls often carry none. */
  | { type: "tool_use"; id: string | null; name: string; input: unknown }
  | { type: "tool_result"; tool_use_id: string | null; tool_name: string | null; text: string; is_error: boolean }
  /** Images, files, server-tool items: present, not read. */
  | { type: "other"; kind: string };

export interface ViewMessage {
  role: "user" | "assistant";
  content: ViewBlock[];
}

export interface RequestView {
  dialect: Dialect;
  model: string;
  stream: boolean;
  /** Every system-like instruction, joined: Anthropic `system` and system messages, OpenAI system/developer, Gemini `systemInstruction`. */
  system: string;
  /**
   * The conversation without its system messages. Tool calls belong to the
   * assistant message that made them and tool results to a user message, as in
   * the Messages API, whatever the dialect's own layout.
   */
  messages: ViewMessage[];
  /** Declared tool names (a nameless server tool counts by its type). */
  tools: string[];
  /** The caller's end-user id, when the dialect has one (`metadata.user_id`, OpenAI `user`). */
  user_id: string | null;
  /** The output token cap the request sets, if any. */
  max_output_tokens: number | null;
  /** The request demands a JSON answer (a JSON schema or JSON mode), as title and classifier calls do. */
  json_output: boolean;
  /** The JSON schema the answer must follow, when one is given. */
  json_schema: unknown;
}

/** Appends a block to the last message when it has the same role, else opens a message: adjacent items of one turn stay one message. */
export function pushBlock(messages: ViewMessage[], role: ViewMessage["role"], block: ViewBlock): void {
  const last = messages.at(-1);
  if (last?.role === role) last.content.push(block);
  else messages.push({ role, content: [block] });
}

/** Tool results join a preceding user message only when it holds nothing but tool results (one batch of answers). */
export function pushToolResult(messages: ViewMessage[], block: Extract<ViewBlock, { type: "tool_result" }>): void {
  const last = messages.at(-1);
  if (last?.role === "user" && last.content.every((b) => b.type === "tool_result")) last.content.push(block);
  else messages.push({ role: "user", content: [block] });
}

/** Names of the tools the assistant called, by call id, so a result that carries only the id can be traced to its tool. */
export function toolNamesById(messages: ViewMessage[]): Map<string, string> {
  const names = new Map<string, string>();
  for (const m of messages) {
    for (const b of m.content) if (b.type === "tool_use" && b.id !== null) names.set(b.id, b.name);
  }
  return names;
}

/** Fill in `tool_name` of results whose dialect names only the call id. */
export function resolveToolNames(messages: ViewMessage[]): ViewMessage[] {
  const names = toolNamesById(messages);
  for (const m of messages) {
    for (const b of m.content) {
      if (b.type === "tool_result" && b.tool_name === null && b.tool_use_id !== null) b.tool_name = names.get(b.tool_use_id) ?? null;
    }
  }
  return messages;
}

export function textOfBlocks(blocks: ViewBlock[]): string {
  return blocks
    .filter((b): b is Extract<ViewBlock, { type: "text" }> => b.type === "text")
    .map((b) => b.text)
    .join("\n");
}

export function lastUserText(view: RequestView): string | null {
  for (let i = view.messages.length - 1; i >= 0; i--) {
    const m = view.messages[i]!;
    if (m.role === "user") return textOfBlocks(m.content);
  }
  return null;
}

export type ToolResultView = Extract<ViewBlock, { type: "tool_result" }>;

export function lastMessageToolResults(view: RequestView): ToolResultView[] {
  return (view.messages.at(-1)?.content ?? []).filter((b): b is ToolResultView => b.type === "tool_result");
}

/** Parse JSON the caller sent as text (OpenAI tool arguments), keeping the text when it is not JSON. */
export function parseMaybeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** Header names whose values are credentials: never recorded. */
const SECRET_HEADER = /^(authorization|proxy-authorization|cookie|x-api-key)$|key|token|secret|password/i;

export function redactHeaders(headers: Headers): Record<string, string> {
  const out: Record<string, string> = {};
  headers.forEach((value, name) => {
    if (!SECRET_HEADER.test(name)) out[name] = value;
  });
  return out;
}
