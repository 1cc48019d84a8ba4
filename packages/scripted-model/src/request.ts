/**
 * The incoming `POST /v1/messages` body: validated as far as the scripted model
 * relies on it (model, max_tokens, messages, optional tools/system), and read
 * by the matchers that guard scripted turns. Unknown fields pass through, as
 * the real API accepts many more parameters than a script looks at.
 */
import { z } from "zod";
import type { Matcher, SessionKey } from "./script.ts";

const blockSchema = z.looseObject({ type: z.string().min(1).max(128) });
const contentSchema = z.union([z.string(), z.array(blockSchema).max(100_000)]);

export const messagesRequestSchema = z.looseObject({
  model: z.string().min(1).max(256),
  max_tokens: z.number().int().min(1).max(100_000_000),
  messages: z
    .array(z.looseObject({ role: z.enum(["user", "assistant", "system"]), content: contentSchema }))
    .min(1)
    .max(100_000),
  system: contentSchema.optional(),
  tools: z
    .array(z.looseObject({ name: z.string().max(256).optional(), type: z.string().max(128).optional() }))
    .max(10_000)
    .optional(),
  stream: z.boolean().optional(),
  metadata: z.looseObject({ user_id: z.string().max(1024).nullable().optional() }).optional(),
});

export type MessagesRequest = z.output<typeof messagesRequestSchema>;
type Content = z.output<typeof contentSchema>;
type Block = Record<string, unknown> & { type: string };

function blocks(content: Content): Block[] {
  return typeof content === "string" ? [{ type: "text", text: content }] : (content as Block[]);
}

/** Text of string content and text blocks; tool results and media are not text. */
export function textOf(content: Content | undefined): string {
  if (content === undefined) return "";
  return blocks(content)
    .filter((b) => b.type === "text" && typeof b.text === "string")
    .map((b) => b.text as string)
    .join("\n");
}

/** tool_result content is a string or a list of blocks; its text is what a matcher sees. */
function toolResultText(block: Block): string {
  const c = block.content;
  if (typeof c === "string") return c;
  if (Array.isArray(c)) return textOf(c as Block[]);
  return "";
}

/** The system prompt, including `system`-role messages the newer SDK can send. */
export function systemText(req: MessagesRequest): string {
  const parts = [textOf(req.system)];
  for (const m of req.messages) if (m.role === "system") parts.push(textOf(m.content));
  return parts.filter(Boolean).join("\n");
}

export function lastUserText(req: MessagesRequest): string | null {
  for (let i = req.messages.length - 1; i >= 0; i--) {
    const m = req.messages[i]!;
    if (m.role === "user") return textOf(m.content);
  }
  return null;
}

/** tool_use ids the assistant issued, by id, so a tool_result can be traced to its tool name. */
function toolNamesById(req: MessagesRequest): Map<string, string> {
  const names = new Map<string, string>();
  for (const m of req.messages) {
    if (m.role !== "assistant") continue;
    for (const b of blocks(m.content)) {
      if (b.type.endsWith("tool_use") && typeof b.id === "string" && typeof b.name === "string") names.set(b.id, b.name);
    }
  }
  return names;
}

export interface ToolResultView {
  tool_use_id: string;
  tool_name: string | null;
  text: string;
  is_error: boolean;
}

export function lastMessageToolResults(req: MessagesRequest): ToolResultView[] {
  const last = req.messages.at(-1);
  if (!last) return [];
  const names = toolNamesById(req);
  return blocks(last.content)
    .filter((b) => b.type === "tool_result" && typeof b.tool_use_id === "string")
    .map((b) => {
      const id = b.tool_use_id as string;
      return { tool_use_id: id, tool_name: names.get(id) ?? null, text: toolResultText(b), is_error: b.is_error === true };
    });
}

export function toolNames(req: MessagesRequest): string[] {
  return (req.tools ?? []).flatMap((t) => (typeof t.name === "string" ? [t.name] : []));
}

/** Why a matcher rejects a request, or null when it accepts it. */
export function mismatch(m: Matcher | undefined, req: MessagesRequest): string | null {
  if (!m) return null;
  const q = JSON.stringify;
  if (m.system_contains !== undefined && !systemText(req).includes(m.system_contains)) {
    return `system prompt does not contain ${q(m.system_contains)}`;
  }
  if (m.last_user_text_contains !== undefined && !(lastUserText(req) ?? "").includes(m.last_user_text_contains)) {
    return `last user message does not contain ${q(m.last_user_text_contains)}`;
  }
  if (m.message_count !== undefined && req.messages.length !== m.message_count) {
    return `expects ${m.message_count} messages, got ${req.messages.length}`;
  }
  if (m.stream !== undefined && (req.stream === true) !== m.stream) {
    return m.stream ? "expects a streaming request" : "expects a non-streaming request";
  }
  if (m.tools_include) {
    const have = new Set(toolNames(req));
    const missing = m.tools_include.filter((n) => !have.has(n));
    if (missing.length) return `request lacks tools ${q(missing)}`;
  }
  return toolResultMismatch(m, lastMessageToolResults(req));
}

function toolResultMismatch(m: Matcher, results: ToolResultView[]): string | null {
  const q = JSON.stringify;
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
export function sessionKeyOf(spec: SessionKey, req: MessagesRequest): string {
  const source = spec.from === "metadata.user_id" ? (req.metadata?.user_id ?? "") : systemText(req);
  if (!spec.pattern) return source;
  const m = new RegExp(spec.pattern).exec(source);
  if (!m) return "";
  return m[1] ?? m[0];
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
