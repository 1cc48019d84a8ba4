/**
 * Session event schemas: the event types a client may send (§5.3), the
 * persisted catalogue used by the `types[]` filter (§5.4), and the rules that
 * turn validated params into stored event fields. The event log itself
 * (ids, sequence, processed_at) lives in event-log.ts.
 */
import { z } from "zod";

/** Every persisted `type` a client may filter on (the SDK's BetaManagedAgentsSessionEventType, 41 values). */
export const EVENT_TYPES = [
  "user.message",
  "user.interrupt",
  "user.tool_confirmation",
  "user.custom_tool_result",
  "agent.custom_tool_use",
  "agent.message",
  "agent.thinking",
  "agent.mcp_tool_use",
  "agent.mcp_tool_result",
  "agent.tool_use",
  "agent.tool_result",
  "agent.thread_message_received",
  "agent.thread_message_sent",
  "agent.thread_context_compacted",
  "session.error",
  "session.status_rescheduled",
  "session.status_running",
  "session.status_idle",
  "session.status_terminated",
  "session.thread_created",
  "span.outcome_evaluation_start",
  "span.outcome_evaluation_end",
  "span.model_request_start",
  "span.model_request_end",
  "span.outcome_evaluation_ongoing",
  "user.define_outcome",
  "session.thread_status_running",
  "session.thread_status_idle",
  "session.thread_status_terminated",
  "user.tool_result",
  "session.thread_status_rescheduled",
  "session.updated",
  "system.message",
  "session.usage",
  "workflow_run.created",
  "workflow_run.status_running",
  "workflow_run.status_idle",
  "workflow_run.status_ended",
  "workflow_run.error",
  "workflow_run.phase_started",
  "workflow_run.phase_ended",
] as const;
export type EventType = (typeof EVENT_TYPES)[number] | "session.deleted";

/** Stream-only preview kinds (`event_deltas[]`). */
export const DELTA_TYPES = ["agent.message", "agent.thinking"] as const;

/** A persisted event as the API returns it. */
export interface SessionEvent {
  id: string;
  type: string;
  processed_at: string;
  [field: string]: unknown;
}

// Content blocks. Strings are bounded so no single field can exhaust memory or a column.
const TEXT_MAX = 1_000_000;
const ID_MAX = 256;
const idString = z.string().min(1).max(ID_MAX);

const textBlock = z.object({ type: z.literal("text"), text: z.string().max(TEXT_MAX) });
const redactedBlock = z.object({ type: z.literal("redacted") });
const base64Source = z.object({
  type: z.literal("base64"),
  media_type: z.string().min(1).max(255),
  data: z.string().max(32 * 1024 * 1024),
});
const urlSource = z.object({ type: z.literal("url"), url: z.url().max(8192) });
const fileSource = z.object({ type: z.literal("file"), file_id: idString });
const plainTextSource = z.object({ type: z.literal("text"), media_type: z.literal("text/plain"), data: z.string().max(TEXT_MAX) });

const imageBlock = z.object({ type: z.literal("image"), source: z.discriminatedUnion("type", [base64Source, urlSource, fileSource]) });
const documentBlock = z.object({
  type: z.literal("document"),
  source: z.discriminatedUnion("type", [base64Source, plainTextSource, urlSource, fileSource]),
  title: z.string().max(2048).nullish(),
  context: z.string().max(TEXT_MAX).nullish(),
});
const searchResultBlock = z.object({
  type: z.literal("search_result"),
  source: z.string().max(8192),
  title: z.string().max(2048),
  content: z.array(textBlock).max(100),
  citations: z.object({ enabled: z.boolean() }),
});

const CONTENT_MAX = 1000;
const messageContent = z
  .array(z.discriminatedUnion("type", [textBlock, imageBlock, documentBlock, redactedBlock]))
  .min(1)
  .max(CONTENT_MAX);
const resultContent = z.array(z.discriminatedUnion("type", [textBlock, imageBlock, documentBlock, searchResultBlock])).max(CONTENT_MAX);

export const userMessageParam = z.object({ type: z.literal("user.message"), content: messageContent });

const userInterruptParam = z.object({ type: z.literal("user.interrupt"), session_thread_id: idString.nullish() });

const toolConfirmationParam = z
  .object({
    type: z.literal("user.tool_confirmation"),
    tool_use_id: idString,
    result: z.enum(["allow", "deny"]),
    deny_message: z.string().max(10_000).nullish(),
  })
  .refine((e) => e.result === "deny" || e.deny_message == null, {
    message: "deny_message is only allowed when result is deny",
    path: ["deny_message"],
  });

const customToolResultParam = z.object({
  type: z.literal("user.custom_tool_result"),
  custom_tool_use_id: idString,
  content: resultContent.optional(),
  is_error: z.boolean().nullish(),
});

const toolResultParam = z.object({
  type: z.literal("user.tool_result"),
  tool_use_id: idString,
  content: resultContent.optional(),
  is_error: z.boolean().nullish(),
});

export const defineOutcomeParam = z.object({
  type: z.literal("user.define_outcome"),
  description: z.string().min(1).max(TEXT_MAX),
  rubric: z.discriminatedUnion("type", [
    z.object({ type: z.literal("text"), content: z.string().min(1).max(262_144) }),
    z.object({ type: z.literal("file"), file_id: idString }),
  ]),
  max_iterations: z.number().int().min(1).max(20).nullish(),
});

export const systemMessageParam = z.object({
  type: z.literal("system.message"),
  content: z
    .array(z.object({ type: z.literal("text"), text: z.string().max(TEXT_MAX) }))
    .min(1)
    .max(CONTENT_MAX),
});

export const eventParam = z.discriminatedUnion("type", [
  userMessageParam,
  userInterruptParam,
  toolConfirmationParam,
  customToolResultParam,
  toolResultParam,
  defineOutcomeParam,
  systemMessageParam,
]);
export type EventParam = z.infer<typeof eventParam>;

export const MAX_SEND_EVENTS = 100;
export const sendEventsSchema = z.object({ events: z.array(eventParam).min(1).max(MAX_SEND_EVENTS) });

/** `initial_events` of a session: messages and outcomes only, processed in order. */
export const initialEventsSchema = z.array(z.discriminatedUnion("type", [userMessageParam, defineOutcomeParam])).max(50);

const SYSTEM_MESSAGE_FOLLOWS = new Set(["user.message", "user.tool_result", "user.custom_tool_result"]);

/**
 * Cross-event rules zod cannot express per item: a `system.message` is at most
 * one per request, is the last event and directly follows a user message or
 * tool result. Returns an error message or null.
 */
export function sendEventsProblem(events: readonly EventParam[]): string | null {
  const systemIndexes = events.flatMap((e, i) => (e.type === "system.message" ? [i] : []));
  if (systemIndexes.length === 0) return null;
  if (systemIndexes.length > 1) return "events: at most one system.message per request";
  const index = systemIndexes[0] as number;
  if (index !== events.length - 1) return `events[${index}]: system.message must be the last event`;
  const previous = events[index - 1];
  if (!previous || !SYSTEM_MESSAGE_FOLLOWS.has(previous.type)) {
    return `events[${index}]: system.message must directly follow a user.message, user.tool_result or user.custom_tool_result`;
  }
  return null;
}

/** Event types that give a self-hosted session work to do (they enqueue a work item). */
export const WORK_BEARING_TYPES: ReadonlySet<string> = new Set([
  "user.message",
  "user.define_outcome",
  "user.tool_confirmation",
  "user.tool_result",
  "user.custom_tool_result",
]);

/** What a params object becomes in the log: its fields (minus id/processed_at) and its idempotency key. */
export interface EventDraft {
  type: string;
  fields: Record<string, unknown>;
  dedupeKey: string | null;
  /** The event's id when already promised (an `event_deltas` preview announced it); a fresh one otherwise. */
  id?: string;
  /** The thread the event belongs to (null or absent: the primary thread). */
  threadId?: string | null;
}

/**
 * Turns a validated event param into a draft for the log. Tool results carry a
 * dedupe key so a retried POST finds the landed result instead of appending a
 * second one.
 */
export function draftFromParam(param: EventParam, newId: (prefix: string) => string): EventDraft {
  switch (param.type) {
    case "user.message":
      return { type: param.type, fields: { content: param.content }, dedupeKey: null };
    case "user.interrupt":
      return { type: param.type, fields: param.session_thread_id ? { session_thread_id: param.session_thread_id } : {}, dedupeKey: null };
    case "user.tool_confirmation": {
      const fields: Record<string, unknown> = { tool_use_id: param.tool_use_id, result: param.result };
      if (param.deny_message != null) fields.deny_message = param.deny_message;
      return { type: param.type, fields, dedupeKey: null };
    }
    case "user.custom_tool_result":
      return {
        type: param.type,
        fields: { custom_tool_use_id: param.custom_tool_use_id, content: param.content ?? [], is_error: param.is_error ?? false },
        dedupeKey: `custom_tool_result:${param.custom_tool_use_id}`,
      };
    case "user.tool_result":
      return {
        type: param.type,
        fields: { tool_use_id: param.tool_use_id, content: param.content ?? [], is_error: param.is_error ?? false },
        dedupeKey: `tool_result:${param.tool_use_id}`,
      };
    case "user.define_outcome":
      return {
        type: param.type,
        fields: {
          outcome_id: newId("outc"),
          description: param.description,
          rubric: param.rubric,
          max_iterations: param.max_iterations ?? 3,
        },
        dedupeKey: null,
      };
    case "system.message":
      return { type: param.type, fields: { content: param.content }, dedupeKey: null };
  }
}
