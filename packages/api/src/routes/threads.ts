/**
 * `/v1/sessions/{id}/threads` (§4.5): a multi-agent session's threads —
 * list, retrieve, archive, a thread's events and its SSE stream.
 *
 * Threads live in `session_threads` (migration 0020) and share the session's
 * event log (`session_events.thread_id`, null for the primary thread), so a
 * thread's events are a filtered view of that log and its stream is the
 * session stream filtered the same way (docs/adr/0024-session-threads.md).
 * Status, usage and stats are folded from the log on every read:
 * - status: the thread's last `session.thread_status_*` (the primary
 *   thread: the session's status);
 * - usage: each `session.usage` snapshot is the session's running total,
 *   appended by the thread whose work raised it, so a thread's usage is the
 *   sum of the increases of its own snapshots, and the threads' usages add
 *   up to the session's exactly;
 * - stats: running time from the thread's status events, duration since it
 *   was created;
 * - list_cost: the thread's usage priced on its own agent's model (absent
 *   when that model has no list price). The session's list cost sums the
 *   same per-thread prices exactly and rounds once (harness usage.ts), so the
 *   threads' costs, each rounded up to the cent, need not add up to it
 *   exactly, as the SDK documents; the session's figure is the authoritative
 *   one.
 */
import { addUsageDelta, type BillableUsage, billableUsageOf, buildPriceTable, listCost, type PriceTable } from "@openma/pricing";
import type { Database, SessionThreadRow } from "@openma/storage";
import type { Context } from "hono";
import { Hono } from "hono";
import type { Kysely } from "kysely";
import { z } from "zod";
import { requireCredential } from "../auth.ts";
import type { AppEnv } from "../context.ts";
import { badRequest, notFound } from "../errors.ts";
import { decodeCursor, encodeCursor, pageQuery } from "../pagination.ts";
import { SESSION_STATUSES } from "../schemas/session.ts";
import { fromJson, pathId } from "../util.ts";
import { parseQuery, queryArray } from "../validate.ts";
import { listEvents, streamEvents } from "./events.ts";
import { readableSession } from "./sessions.ts";

export const threadListQuery = z.object({ ...pageQuery(100), statuses: queryArray(z.enum(SESSION_STATUSES)).optional() });

type Status = (typeof SESSION_STATUSES)[number];

const THREAD_STATUS: Record<string, Status> = {
  "session.thread_status_running": "running",
  "session.thread_status_idle": "idle",
  "session.thread_status_rescheduled": "rescheduling",
  "session.thread_status_terminated": "terminated",
  "session.status_running": "running",
  "session.status_idle": "idle",
  "session.status_rescheduled": "rescheduling",
  "session.status_terminated": "terminated",
};

type Usage = BillableUsage;

const PUBLIC_PRICES: PriceTable = buildPriceTable();

/** The model id of a thread's agent snapshot (stored as `{ id, speed }`; a bare string from older rows). */
function modelOf(agent: Record<string, unknown>): string {
  const model = agent.model as { id?: unknown } | string | undefined;
  return typeof model === "string" ? model : typeof model?.id === "string" ? model.id : "";
}

const zeroUsage = (): Usage => billableUsageOf(undefined);

interface Folded {
  usage: Map<string | null, Usage>;
  status: Map<string | null, Status>;
  activeMs: Map<string | null, number>;
}

/** Status, usage and running time of every thread of a session, folded from its log in one pass. */
async function fold(db: Kysely<Database>, sessionId: string, nowMs: number): Promise<Folded> {
  const rows = await db
    .selectFrom("session_events")
    .select(["type", "body", "thread_id", "processed_at"])
    .where("session_id", "=", sessionId)
    .where("type", "in", ["session.usage", ...Object.keys(THREAD_STATUS)])
    .orderBy("seq", "asc")
    .execute();
  const out: Folded = { usage: new Map(), status: new Map(), activeMs: new Map() };
  const since = new Map<string | null, number>();
  let total = zeroUsage();
  for (const row of rows) {
    const thread = row.thread_id ?? null;
    const body = JSON.parse(row.body) as Record<string, unknown>;
    if (row.type === "session.usage") {
      const next = billableUsageOf(body.usage);
      const mine = out.usage.get(thread) ?? zeroUsage();
      addUsageDelta(mine, next, total);
      out.usage.set(thread, mine);
      total = next;
      continue;
    }
    const status = THREAD_STATUS[row.type] as Status;
    const at = Date.parse(row.processed_at);
    const open = since.get(thread);
    if (open !== undefined && status !== "running") {
      out.activeMs.set(thread, (out.activeMs.get(thread) ?? 0) + Math.max(0, at - open));
      since.delete(thread);
    } else if (open === undefined && status === "running") since.set(thread, at);
    out.status.set(thread, status);
  }
  for (const [thread, open] of since) out.activeMs.set(thread, (out.activeMs.get(thread) ?? 0) + Math.max(0, nowMs - open));
  return out;
}

interface ThreadBody {
  agent: Record<string, unknown>;
}

function present(row: SessionThreadRow, folded: Folded, sessionStatus: string, nowMs: number, prices: PriceTable) {
  const key = row.parent_thread_id === null ? null : row.id;
  const agent = fromJson<ThreadBody>(row.body).agent;
  const usage = folded.usage.get(key) ?? zeroUsage();
  const cost = listCost(prices, modelOf(agent), usage);
  const activeSeconds = Math.round(folded.activeMs.get(key) ?? 0) / 1000;
  const status = key === null ? (sessionStatus as Status) : (folded.status.get(key) ?? "idle");
  return {
    type: "session_thread" as const,
    id: row.id,
    session_id: row.session_id,
    parent_thread_id: row.parent_thread_id,
    workflow_run_id: null,
    status,
    agent,
    usage: { ...usage, ...(cost ? { list_cost: cost } : {}), active_seconds: activeSeconds },
    stats: { active_seconds: activeSeconds, duration_seconds: Math.max(0, Math.round(nowMs - Date.parse(row.created_at)) / 1000) },
    created_at: row.created_at,
    updated_at: row.archived_at ?? row.created_at,
    archived_at: row.archived_at,
  };
}

async function threadRows(db: Kysely<Database>, sessionId: string): Promise<SessionThreadRow[]> {
  return db
    .selectFrom("session_threads")
    .selectAll()
    .where("session_id", "=", sessionId)
    .orderBy("created_at", "asc")
    .orderBy("id", "asc")
    .execute();
}

async function loadThread(c: Context<AppEnv>, sessionId: string, threadId: string) {
  const session = await readableSession(c, sessionId);
  const row = await c
    .get("deps")
    .storage.db.selectFrom("session_threads")
    .selectAll()
    .where("session_id", "=", sessionId)
    .where("id", "=", threadId)
    .executeTakeFirst();
  if (!row) throw notFound("session thread", threadId);
  return { session, row };
}

async function presentOne(c: Context<AppEnv>, row: SessionThreadRow, sessionStatus: string) {
  const deps = c.get("deps");
  const now = deps.clock.now();
  return present(row, await fold(deps.storage.db, row.session_id, now), sessionStatus, now, deps.prices ?? PUBLIC_PRICES);
}

/** The thread filter of the event routes: null for the primary thread's events. */
function eventFilter(row: SessionThreadRow): string | null {
  return row.parent_thread_id === null ? null : row.id;
}

export function threadRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();

  r.get("/:session_id/threads", async (c) => {
    const sessionId = pathId(c, "session_id");
    const session = await readableSession(c, sessionId);
    const q = parseQuery(c, threadListQuery);
    const cursor = decodeCursor(q.page);
    const deps = c.get("deps");
    const now = deps.clock.now();
    const folded = await fold(deps.storage.db, sessionId, now);
    let all = (await threadRows(deps.storage.db, sessionId)).map((row) =>
      present(row, folded, session.status, now, deps.prices ?? PUBLIC_PRICES),
    );
    if (q.statuses?.length) all = all.filter((t) => q.statuses?.includes(t.status));
    let start = 0;
    if (cursor) {
      const at = all.findIndex((t) => t.id === cursor.k);
      if (at < 0) throw badRequest("page: invalid page cursor");
      start = at + 1;
    }
    const data = all.slice(start, start + q.limit);
    const last = data.at(-1);
    return c.json({ data, next_page: start + q.limit < all.length && last ? encodeCursor({ k: last.id }) : null });
  });

  r.get("/:session_id/threads/:thread_id", async (c) => {
    const { session, row } = await loadThread(c, pathId(c, "session_id"), pathId(c, "thread_id"));
    return c.json(await presentOne(c, row, session.status));
  });

  r.post("/:session_id/threads/:thread_id/archive", async (c) => {
    requireCredential(c, "api_key");
    const { session, row } = await loadThread(c, pathId(c, "session_id"), pathId(c, "thread_id"));
    if (row.parent_thread_id === null) throw badRequest("the primary thread cannot be archived on its own; archive the session instead");
    let current = row;
    if (!row.archived_at) {
      const archivedAt = new Date(c.get("deps").clock.now()).toISOString();
      // An archived thread takes no more turns: the loop skips it and refuses messages to it.
      await c.get("deps").storage.db.updateTable("session_threads").set({ archived_at: archivedAt }).where("id", "=", row.id).execute();
      current = { ...row, archived_at: archivedAt };
    }
    return c.json(await presentOne(c, current, session.status));
  });

  r.get("/:session_id/threads/:thread_id/events", async (c) => {
    const sessionId = pathId(c, "session_id");
    const { row } = await loadThread(c, sessionId, pathId(c, "thread_id"));
    return c.json(await listEvents(c, sessionId, eventFilter(row)));
  });

  r.get("/:session_id/threads/:thread_id/stream", async (c) => {
    const sessionId = pathId(c, "session_id");
    const { row } = await loadThread(c, sessionId, pathId(c, "thread_id"));
    return streamEvents(c, sessionId, eventFilter(row));
  });

  return r;
}
