/**
 * The script format: plain JSON so it can come from a file, a test, or
 * `POST /_script` in another process.
 *
 * A script is a list of turns. Each request takes the earliest turn (in script
 * order) that still has uses left, is not being served to another request,
 * and whose `match` guard accepts the request. A turn is used up only when its
 * response was delivered completely; a request that fails part-way (client
 * gone, injected drop) hands the turn back, so a restarted caller that repeats
 * the request gets the same answer.
 *
 * With `session_key`, every distinct key taken from a request (a substring of
 * the system prompt, or `metadata.user_id`) replays its own copy of `turns`,
 * so concurrent sessions each follow the whole script independently.
 *
 * The script is dialect-neutral: matchers read the request's neutral view
 * (view.ts) and responses are rendered by the dialect the request came in
 * (dialects/*.ts). `side_requests` answers agents' auxiliary calls outside the
 * turns (side.ts).
 */
import { z } from "zod";
import { ERROR_TYPES } from "./errors.ts";
import { DIALECTS } from "./view.ts";

const MAX_DELAY_MS = 600_000;
const tokens = z.number().int().min(0).max(100_000_000);

export const STOP_REASONS = [
  "end_turn",
  "max_tokens",
  "stop_sequence",
  "tool_use",
  "pause_turn",
  "refusal",
  "model_context_window_exceeded",
] as const;

export const usageSpecSchema = z.strictObject({
  input_tokens: tokens.optional(),
  output_tokens: tokens.optional(),
  cache_creation_input_tokens: tokens.optional(),
  cache_read_input_tokens: tokens.optional(),
  /** Part of output_tokens spent thinking, for the dialects that report it (OpenAI, Gemini); estimated from thinking blocks when absent. */
  reasoning_tokens: tokens.optional(),
});

export const blockSpecSchema = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("text"), text: z.string().max(10_000_000) }),
  z.strictObject({
    type: z.literal("tool_use"),
    name: z.string().min(1).max(256),
    input: z.record(z.string(), z.unknown()),
    /** Fixed id for assertions; a fresh `toolu_…` id otherwise. */
    id: z.string().min(1).max(256).optional(),
  }),
  z.strictObject({
    type: z.literal("thinking"),
    thinking: z.string().max(10_000_000),
    signature: z.string().max(100_000).optional(),
  }),
  z.strictObject({ type: z.literal("redacted_thinking"), data: z.string().max(1_000_000) }),
]);

const responseObjectSchema = z.strictObject({
  content: z.array(blockSpecSchema).max(10_000),
  /** Defaults to `tool_use` when a tool_use block is present, else `end_turn`. */
  stop_reason: z.enum(STOP_REASONS).optional(),
  stop_sequence: z.string().max(10_000).nullable().optional(),
  /** Missing counters are estimated (characters / 4) or 0 for the cache counters. */
  usage: usageSpecSchema.optional(),
  /** Defaults to the request's model. */
  model: z.string().min(1).max(256).optional(),
  /** Size of each streamed text/thinking/partial-JSON chunk (default 16 characters). */
  chunk_chars: z.number().int().min(1).max(1_000_000).optional(),
});

/** A response; a bare string is shorthand for one text block. Preprocess (not a union) keeps errors pointing at the bad field. */
export const responseSpecSchema = z.preprocess(
  (v) => (typeof v === "string" ? { content: [{ type: "text", text: v }] } : v),
  responseObjectSchema,
);

const regexSource = z
  .string()
  .min(1)
  .max(1000)
  .refine(
    (p) => {
      try {
        new RegExp(p);
        return true;
      } catch {
        return false;
      }
    },
    { message: "not a valid regular expression" },
  );

/**
 * Every given condition must hold (AND). Conditions read the dialect-neutral
 * request view (view.ts), so the same matcher works for every dialect.
 */
export const matcherSchema = z.strictObject({
  /** The last `user` message's text (string content or text blocks) contains this. */
  last_user_text_contains: z.string().max(100_000).optional(),
  /** The last message carries a tool_result answering a tool_use of this tool name. */
  tool_result_for: z.string().min(1).max(256).optional(),
  /** A tool_result in the last message has content containing this. */
  tool_result_contains: z.string().max(100_000).optional(),
  /** A tool_result in the last message has this `is_error` (absent counts as false). */
  tool_result_is_error: z.boolean().optional(),
  /** The request declares tools with all of these names. */
  tools_include: z.array(z.string().min(1).max(256)).max(1000).optional(),
  /** The system prompt contains this (a session marker). */
  system_contains: z.string().max(100_000).optional(),
  /** The system prompt matches this regular expression (case-insensitive). */
  system_matches: regexSource.optional(),
  /** User and assistant messages; system messages do not count. */
  message_count: z.number().int().min(0).max(1_000_000).optional(),
  stream: z.boolean().optional(),
  /** The request came in this dialect. */
  dialect: z.enum(DIALECTS).optional(),
  /** The request declares at least one tool (true) or none (false). */
  has_tools: z.boolean().optional(),
  /** The request demands a JSON answer (JSON schema or JSON mode). */
  json_output: z.boolean().optional(),
  /** The request caps output at this many tokens or fewer (a quota probe sends 1). */
  max_output_tokens_at_most: z.number().int().min(0).max(100_000_000).optional(),
});

export const delaySchema = z.strictObject({
  /** Before the response status line (for a stream: before `message_start`). */
  first_byte_ms: z.number().int().min(0).max(MAX_DELAY_MS).optional(),
  /** Before each SSE event after the first. */
  chunk_ms: z.number().int().min(0).max(MAX_DELAY_MS).optional(),
});

export const errorSpecSchema = z.strictObject({
  status: z.number().int().min(400).max(599),
  /** Defaults to the type the real API uses for the status. */
  error_type: z.enum(ERROR_TYPES).optional(),
  message: z.string().max(100_000).optional(),
  /** Sent as `retry-after-ms` (and `retry-after`); the SDK honours values above 0, so 1 makes a retrying client come back at once. */
  retry_after_ms: z.number().int().min(0).max(MAX_DELAY_MS).optional(),
});

const turnObjectSchema = z.strictObject({
  /** Shown in diagnostics ("turn 2 (ask-bash)"). */
  label: z.string().max(256).optional(),
  match: matcherSchema.optional(),
  /** How many requests this turn answers (default 1). */
  times: z.number().int().min(1).max(1_000_000).optional(),
  delay: delaySchema.optional(),
  response: responseSpecSchema.optional(),
  /** Answer with this error instead (the turn is used up like a response). */
  error: errorSpecSchema.optional(),
});

export const turnSchema = turnObjectSchema.refine((t) => (t.response === undefined) !== (t.error === undefined), {
  message: "a turn needs exactly one of response or error",
});

export const sessionKeySchema = z.strictObject({
  /** `metadata.user_id` reads the caller's end-user id in any dialect (OpenAI: `metadata.user_id`, `user`, `safety_identifier`). */
  from: z.enum(["system", "metadata.user_id"]).default("system"),
  /** Regular expression; the key is its first capture group, or the whole match. Without it the whole source is the key. */
  pattern: regexSource.optional(),
});

/**
 * A side rule answers the agent's auxiliary requests (titles, classifiers,
 * suggestions, probes) without touching the script's turns.
 */
export const sideRuleSchema = z
  .strictObject({
    label: z.string().min(1).max(256),
    match: matcherSchema,
    response: responseSpecSchema.optional(),
    /** Answer with JSON built from the request's schema; these values override fields by name. */
    json: z.record(z.string(), z.unknown()).optional(),
  })
  .refine((r) => (r.response === undefined) !== (r.json === undefined), { message: "a side rule needs exactly one of response or json" });

export const sideRequestsSchema = z.strictObject({
  /** Apply the built-in rules (side.ts) after the script's own. */
  defaults: z.boolean().default(true),
  rules: z.array(sideRuleSchema).max(1000).default([]),
});

const scriptObjectSchema = z.strictObject({
  turns: z.array(turnSchema).max(100_000),
  session_key: sessionKeySchema.optional(),
  side_requests: sideRequestsSchema.optional(),
});

/** A script; a bare array is shorthand for `{turns}`. */
export const scriptSchema = z.preprocess((v) => (Array.isArray(v) ? { turns: v } : v), scriptObjectSchema);

const afterEvents = z.number().int().min(0).max(1_000_000);

/** One-shot faults, applied to the next request their optional `match` accepts. */
export const faultSchema = z.discriminatedUnion("type", [
  /** Answer with an HTTP error; no turn is used. */
  errorSpecSchema.extend({ type: z.literal("error"), match: matcherSchema.optional() }),
  /** Stream `after_events` SSE events of the matched turn, then cut the TCP connection (non-streaming: cut before answering). */
  z.strictObject({ type: z.literal("drop"), after_events: afterEvents.default(0), match: matcherSchema.optional() }),
  /** Stream `after_events` events, then an in-stream `event: error` (non-streaming: an HTTP error of that type). */
  z.strictObject({
    type: z.literal("stream_error"),
    after_events: afterEvents.default(0),
    error_type: z.enum(ERROR_TYPES).default("overloaded_error"),
    message: z.string().max(100_000).optional(),
    match: matcherSchema.optional(),
  }),
]);

// Input types are spelled out because preprocess erases them to `unknown`.
export type ResponseSpecInput = string | z.input<typeof responseObjectSchema>;
export type TurnInput = Omit<z.input<typeof turnObjectSchema>, "response"> & { response?: ResponseSpecInput };
export type SideRuleInput = Omit<z.input<typeof sideRuleSchema>, "response"> & { response?: ResponseSpecInput };
export type SideRequestsInput = { defaults?: boolean; rules?: SideRuleInput[] };
export type ScriptInput =
  | TurnInput[]
  | (Omit<z.input<typeof scriptObjectSchema>, "turns" | "side_requests"> & { turns: TurnInput[]; side_requests?: SideRequestsInput });
export type Script = z.output<typeof scriptSchema>;
export type Turn = z.output<typeof turnSchema>;
export type ResponseSpec = z.output<typeof responseObjectSchema>;
export type BlockSpec = z.output<typeof blockSpecSchema>;
export type Matcher = z.output<typeof matcherSchema>;
export type ErrorSpec = z.output<typeof errorSpecSchema>;
export type FaultInput = z.input<typeof faultSchema>;
export type Fault = z.output<typeof faultSchema>;
export type SessionKey = z.output<typeof sessionKeySchema>;
export type SideRule = z.output<typeof sideRuleSchema>;
export type UsageSpec = z.output<typeof usageSpecSchema>;

/** Render a zod failure as `path: message` lines, naming the offending field. */
export function describeIssues(error: z.ZodError): string {
  return error.issues
    .slice(0, 5)
    .map((issue) => {
      const path = issue.path.map(String).join(".") || "(root)";
      const missing = issue.code === "invalid_type" && issue.message.includes("received undefined");
      return `${path}: ${missing ? "Field required" : issue.message}`;
    })
    .join("; ");
}

export class ScriptError extends Error {}

/** Parse a script, throwing a ScriptError that names the bad field. */
export function parseScript(input: unknown): Script {
  const parsed = scriptSchema.safeParse(input);
  if (!parsed.success) throw new ScriptError(`invalid script: ${describeIssues(parsed.error)}`);
  return parsed.data;
}

export function parseFault(input: unknown): Fault {
  const parsed = faultSchema.safeParse(input);
  if (!parsed.success) throw new ScriptError(`invalid fault: ${describeIssues(parsed.error)}`);
  return parsed.data;
}
