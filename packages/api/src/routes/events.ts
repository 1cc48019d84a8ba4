/**
 * `/v1/sessions/{id}/events`: list, send and the SSE stream (§5). Mounted
 * before the sessions router. All three accept an API key, or an environment
 * key / sessions token scoped to the session (the worker uses them).
 */
import { brainRunsOnServer, TURN_BEARING_TYPES } from "@openma/execution/placement";
import { EXECUTION_TOPIC, requestTurn } from "@openma/execution/queue";
import { publishOnCommitIn, toIso } from "@openma/storage";
import type { Context } from "hono";
import { Hono } from "hono";
import { z } from "zod";
import { assertSessionScope, requireCredential } from "../auth.ts";
import type { AppEnv } from "../context.ts";
import { badRequest } from "../errors.ts";
import {
  appendEvents,
  eventSeq,
  logicalTick,
  notifyAppended,
  readEventsAfterShared,
  type StoredEvent,
  sessionTopic,
} from "../event-log.ts";
import { decodeCursor, pageOf, pageQuery } from "../pagination.ts";
import { PreviewFilter } from "../previews.ts";
import {
  DELTA_TYPES,
  draftFromParam,
  EVENT_TYPES,
  type EventDraft,
  type EventParam,
  sendEventsProblem,
  sendEventsSchema,
  WORK_BEARING_TYPES,
} from "../schemas/events.ts";
import { ensureSessionWork } from "../session-work.ts";
import { encodeSseMessage, type SseChannel, sseResponse } from "../sse.ts";
import { limitBody } from "../uploads.ts";
import { fromJson, pathId } from "../util.ts";
import { parseJsonBody, parseQuery, queryArray } from "../validate.ts";
import { workTopic } from "../work-queue.ts";
import {
  checkRubricFiles,
  EVENTS_BODY_LIMIT,
  environmentType,
  loadSessionRow,
  notifyExecution,
  notifyWorkers,
  readableSession,
} from "./sessions.ts";

const timestamp = z.iso.datetime({ offset: true });
const SEQ_MAX = Number.MAX_SAFE_INTEGER;

export const eventListQuery = z.object({
  ...pageQuery(1000, 100),
  order: z.enum(["asc", "desc"]).optional(),
  types: queryArray(z.enum(EVENT_TYPES)).optional(),
  "created_at[gt]": timestamp.optional(),
  "created_at[gte]": timestamp.optional(),
  "created_at[lt]": timestamp.optional(),
  "created_at[lte]": timestamp.optional(),
});

/**
 * A session's events; with `thread`, only that thread's (null: the primary
 * thread's, events without a `thread_id`), for the thread routes.
 */
export async function listEvents(c: Context<AppEnv>, sessionId: string, thread?: string | null) {
  await readableSession(c, sessionId);
  const q = parseQuery(c, eventListQuery);
  const cursor = decodeCursor(q.page);
  const after = cursor ? Number(cursor.k) : undefined;
  if (after !== undefined && !(Number.isSafeInteger(after) && after >= 0 && after <= SEQ_MAX))
    throw badRequest("page: invalid page cursor");
  const order = q.order ?? "asc";
  let query = c
    .get("deps")
    .storage.db.selectFrom("session_events")
    .select(["seq", "body"])
    .where("session_id", "=", sessionId)
    .orderBy("seq", order)
    .limit(q.limit + 1);
  if (after !== undefined) query = query.where("seq", order === "asc" ? ">" : "<", after);
  if (thread !== undefined) query = thread === null ? query.where("thread_id", "is", null) : query.where("thread_id", "=", thread);
  if (q.types?.length) query = query.where("type", "in", q.types);
  for (const [op, key] of [
    [">", "created_at[gt]"],
    [">=", "created_at[gte]"],
    ["<", "created_at[lt]"],
    ["<=", "created_at[lte]"],
  ] as const) {
    const value = q[key];
    if (value) query = query.where("processed_at", op, new Date(value).toISOString());
  }
  const rows = await query.execute();
  return pageOf(
    rows,
    q.limit,
    (row) => String(row.seq),
    (row) => fromJson<Record<string, unknown>>(row.body),
  );
}

/** The agent event each tool answer must refer to, by event type. */
const ANSWERS: Partial<Record<EventParam["type"], { field: string; types: string[] }>> = {
  "user.tool_result": { field: "tool_use_id", types: ["agent.tool_use"] },
  "user.custom_tool_result": { field: "custom_tool_use_id", types: ["agent.custom_tool_use"] },
  "user.tool_confirmation": { field: "tool_use_id", types: ["agent.tool_use", "agent.mcp_tool_use"] },
};

/**
 * Each tool result/confirmation must answer a tool use of this session (a
 * permanent 400 otherwise). Returns, by event index, the thread of the tool
 * use it answers: the answer goes to that thread's log, so a subagent's
 * custom tool result or confirmation resumes the subagent (ADR 0024).
 */
async function checkAnswers(c: Context<AppEnv>, sessionId: string, events: readonly EventParam[]): Promise<Map<number, string | null>> {
  const refs = events.flatMap((e, i) => {
    const rule = ANSWERS[e.type];
    return rule ? [{ i, rule, id: String((e as Record<string, unknown>)[rule.field]) }] : [];
  });
  const threads = new Map<number, string | null>();
  if (refs.length === 0) return threads;
  const rows = await c
    .get("deps")
    .storage.db.selectFrom("session_events")
    .select(["id", "type", "thread_id"])
    .where("session_id", "=", sessionId)
    .where(
      "id",
      "in",
      refs.map((r) => r.id),
    )
    .execute();
  const byId = new Map(rows.map((r) => [r.id, r]));
  for (const ref of refs) {
    const use = byId.get(ref.id);
    if (!use || !ref.rule.types.includes(use.type)) {
      throw badRequest(
        `events[${ref.i}].${ref.rule.field}: no ${ref.rule.types.join(" or ")} event ${JSON.stringify(ref.id)} in this session`,
      );
    }
    threads.set(ref.i, use.thread_id ?? null);
  }
  return threads;
}

/** An answer routed to a subagent's thread says so (`session_thread_id`, as the SDK's event types document); the primary's does not. */
function routed(draft: EventDraft, threadId: string | null | undefined): EventDraft {
  if (!threadId) return draft;
  return { ...draft, fields: { ...draft.fields, session_thread_id: threadId }, threadId };
}

async function sendEvents(c: Context<AppEnv>, sessionId: string) {
  const session = await readableSession(c, sessionId);
  const input = await parseJsonBody(c, sendEventsSchema);
  const problem = sendEventsProblem(input.events);
  if (problem) throw badRequest(problem);
  const deps = c.get("deps");
  const { db } = deps.storage;
  if (session.archived_at || session.status === "terminated") {
    throw badRequest(`session ${JSON.stringify(sessionId)} is terminated and accepts no more events`);
  }
  const envType = await environmentType(db, session.environment_id);
  const selfHosted = envType === "self_hosted";
  const brainHere = brainRunsOnServer(envType, deps.selfHostedBrain);
  const toolResult = input.events.findIndex((e) => e.type === "user.tool_result");
  if (toolResult >= 0 && !selfHosted) {
    throw badRequest(`events[${toolResult}]: user.tool_result is accepted only on sessions of self_hosted environments`);
  }
  const answered = await checkAnswers(c, sessionId, input.events);
  await checkRubricFiles(db, input.events, "events");
  const drafts = input.events.map((e, i) => routed(draftFromParam(e, deps.ids), answered.get(i)));
  const appendStarted = performance.now();
  const result = await db.transaction().execute(async (trx) => {
    const appended = await appendEvents(deps, sessionId, drafts, { trx });
    const needsWork = selfHosted && appended.appended.some((e) => WORK_BEARING_TYPES.has(e.type));
    const turn = brainHere && appended.appended.some((e) => TURN_BEARING_TYPES.has(e.type));
    // With tracing on, what this request queues carries its trace context: the turn continues its trace.
    const traceparent = (needsWork || turn) && deps.tracing ? deps.tracing.traceparent() : null;
    const work = needsWork ? await ensureSessionWork(trx, deps, session.environment_id, sessionId, traceparent) : null;
    // The turn request commits with the event that asks for it: no event without a turn, no turn without an event.
    if (turn) await requestTurn(trx, sessionId, deps.clock.now(), traceparent);
    // On a transactional bus the wake-ups go out with the commit itself: the execution worker
    // claims the turn without waiting for publishes after it (one statement for both topics).
    const topics = [...(work?.created ? [workTopic(session.environment_id)] : []), ...(turn ? [EXECUTION_TOPIC] : [])];
    const published = await publishOnCommitIn(deps.storage.bus, trx, topics);
    return { ...appended, work, turn, published, topics };
  });
  deps.metrics?.eventAppendDuration.observe({}, (performance.now() - appendStarted) / 1000);
  await notifyAppended(deps, sessionId, result.appended.length > 0);
  // This process's execution worker claims now, not when the commit's notification comes back round;
  // outside this request's span: the worker's loop, woken synchronously here, outlives the request.
  if (result.published) {
    const wake = () => deps.storage.bus.committed?.(result.topics);
    if (deps.tracing) deps.tracing.detached(wake);
    else wake();
  }
  if (!result.published && result.work?.created) await notifyWorkers(c, session.environment_id);
  if (!result.published && result.turn) await notifyExecution(c);
  return { data: result.events };
}

/** With tracing on, the request is the span `openma.api.send_events`, the first of its turn's trace. */
function tracedSendEvents(c: Context<AppEnv>, sessionId: string) {
  const tracing = c.get("deps").tracing;
  if (!tracing) return sendEvents(c, sessionId);
  return tracing.inSpan("openma.api.send_events", { "openma.session_id": sessionId }, () => sendEvents(c, sessionId));
}

/** Coalesces bus wake-ups: any number of wakes while a read runs cause one more read. */
class Wakeups {
  private pending = true;
  private resume: (() => void) | null = null;
  /** Logical time of the latest wake-up (see readEventsAfterShared). */
  wokeAt = logicalTick();
  readonly wake = (): void => {
    this.wokeAt = logicalTick();
    this.pending = true;
    const resume = this.resume;
    this.resume = null;
    resume?.();
  };
  async next(): Promise<void> {
    if (!this.pending) await new Promise<void>((resolve) => (this.resume = resolve));
    this.pending = false;
  }
}

const READ_BATCH = 200;

/**
 * A stored event's SSE bytes, built once per row object: the live readers of
 * a session share one read (readEventsAfterShared) and so the same row
 * objects, and 100 subscribers then cost one format and one encode per event,
 * not 100. Rows are dropped with the read result, so is their frame.
 */
const frames = new WeakMap<StoredEvent, Uint8Array>();
function sseFrame(event: StoredEvent): Uint8Array {
  let frame = frames.get(event);
  if (!frame) {
    frame = encodeSseMessage({ event: event.type, id: event.id, data: event.body });
    frames.set(event, frame);
  }
  return frame;
}

/**
 * Delivers the log from `cursor` on, re-reading the table on every wake-up
 * (the bus carries no data), in bounded batches so the log is never held in
 * memory. Ends on disconnect, after `session.deleted`, or when the session
 * row is gone (deletion removes the log: the stream reports it itself).
 */
async function follow(
  c: Context<AppEnv>,
  sessionId: string,
  startSeq: number,
  wakeups: Wakeups,
  channel: SseChannel,
  previews: PreviewFilter,
  thread: string | null | undefined,
) {
  const deps = c.get("deps");
  const { db } = deps.storage;
  let cursor = startSeq;
  channel.signal.addEventListener("abort", wakeups.wake, { once: true });
  for (;;) {
    await wakeups.next();
    if (channel.signal.aborted) return;
    for (;;) {
      const { rows: batch, startedAt } = await readEventsAfterShared(db, sessionId, cursor, READ_BATCH);
      for (const event of batch) {
        previews.finalized(event.type, event.id);
        cursor = event.seq;
        if (thread !== undefined && (event.thread_id ?? null) !== thread) continue;
        if (!(await channel.sendEncoded(sseFrame(event)))) return;
        if (event.type === "session.deleted") return;
      }
      // A full batch may have more behind it; a shared read that began before our wake-up may miss what woke us.
      if (batch.length === READ_BATCH || startedAt < wakeups.wokeAt) continue;
      if (batch.length === 0 && !(await db.selectFrom("sessions").select("id").where("id", "=", sessionId).executeTakeFirst())) {
        const deleted = { id: deps.ids("sevt"), type: "session.deleted", processed_at: toIso(deps.clock.now()) };
        await channel.send({ event: deleted.type, id: deleted.id, data: JSON.stringify(deleted) });
        return;
      }
      break;
    }
  }
}

export const eventStreamQuery = z.object({
  event_deltas: queryArray(z.enum(DELTA_TYPES)).optional(),
  // OpenMA extension: resume after this event, like the Last-Event-ID header.
  after_id: z.string().min(1).max(256).optional(),
});

/** A session's SSE stream; with `thread`, only that thread's events (null: the primary thread's). */
export async function streamEvents(c: Context<AppEnv>, sessionId: string, thread?: string | null): Promise<Response> {
  const credential = requireCredential(c, "api_key", "environment_key", "sessions_token");
  const q = parseQuery(c, eventStreamQuery);
  // Previews (§5.7) only for the types this connection asked for; they carry no SSE id, so a resume replays the log alone.
  const previews = new PreviewFilter(q.event_deltas ?? [], thread);
  const afterId = c.req.header("last-event-id")?.trim() || q.after_id;
  if (afterId && afterId.length > 256) throw badRequest("Last-Event-ID: must be at most 256 characters");
  const deps = c.get("deps");
  const { db, bus } = deps.storage;
  const wakeups = new Wakeups();
  // Subscribe before reading the head: an append in between then still wakes us.
  const unsubscribe = bus.subscribe(sessionTopic(sessionId), wakeups.wake);
  let startSeq: number;
  try {
    const session = await loadSessionRow(db, sessionId);
    assertSessionScope(credential, sessionId, session.environment_id);
    startSeq = session.last_seq;
    if (afterId) {
      const seq = await eventSeq(db, sessionId, afterId);
      if (seq === undefined) throw badRequest(`Last-Event-ID: event ${JSON.stringify(afterId)} is not in this session's log`);
      startSeq = seq;
    }
  } catch (err) {
    unsubscribe();
    throw err;
  }
  return sseResponse(
    c,
    {
      keepAliveMs: deps.sse.keepAliveMs,
      sendBufferBytes: deps.sse.sendBufferBytes,
      onOverflow: () => deps.logger.info({ session_id: sessionId }, "event stream closed: the reader fell too far behind"),
      // A lost bus notification then costs at most one keep-alive interval.
      onKeepAlive: wakeups.wake,
      onError: (err) => deps.logger.error({ err: { message: err.message }, session_id: sessionId }, "event stream failed"),
    },
    (channel) => {
      const unlisten = previews.listen(bus, sessionId, (frame) => {
        void channel.send({ event: frame.type, data: JSON.stringify(frame) });
      });
      return follow(c, sessionId, startSeq, wakeups, channel, previews, thread).finally(() => {
        unlisten();
        unsubscribe();
      });
    },
  );
}

export function eventRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  r.get("/:session_id/events", async (c) => c.json(await listEvents(c, pathId(c, "session_id"))));
  r.post("/:session_id/events", limitBody(EVENTS_BODY_LIMIT, "request body"), async (c) =>
    c.json(await tracedSendEvents(c, pathId(c, "session_id"))),
  );
  r.get("/:session_id/events/stream", (c) => streamEvents(c, pathId(c, "session_id")));
  return r;
}
