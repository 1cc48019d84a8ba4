/**
 * Multi-agent threads (docs/adr/0024-session-threads.md).
 *
 * A session's threads share its one event log: an event's `thread_id`
 * column says whose it is (null: the primary thread, the coordinator). The
 * loop runs one thread at a time as a *scope*: it reads the thread's events
 * (plus the session-wide ones every thread must see: `session.usage`
 * snapshots, interrupts aimed at it or at everyone), and everything it
 * appends is tagged with the thread (`scopeDrafts`): status events become
 * `session.thread_status_*`, tool uses carry `session_thread_id`, and dedupe
 * keys are prefixed with the thread id so two threads never collide.
 *
 * The coordinator talks to its roster through one server tool,
 * `send_thread_message`: the first message to an agent creates its thread
 * (`session.thread_created`), every message lands in the receiver's log as
 * `agent.thread_message_received` (its next input) and in the sender's as
 * `agent.thread_message_sent`. A subagent answers when its turn ends: its
 * last reply goes back to the coordinator the same way (`withReply`).
 */
import { type EventDraft, liveThreads } from "@openma/api";
import type { Clock, Database, IdFactory, Storage } from "@openma/storage";
import type { Transaction } from "kysely";
import type { ModelToolDefinition, ServerToolContext, ServerToolExecutor, ServerToolResult } from "./server-tools.ts";

/** The thread a run works on; null `id` is the primary thread. */
export interface ThreadScope {
  id: string;
  agentName: string;
  parentId: string | null;
}

/** The events of the primary thread, or of one thread, as the loop reads them. */
export type Scope = ThreadScope | null;

export const THREAD_TOOL = "send_thread_message";

const STATUS_RENAME: Record<string, string> = {
  "session.status_running": "session.thread_status_running",
  "session.status_idle": "session.thread_status_idle",
  "session.status_rescheduled": "session.thread_status_rescheduled",
  "session.status_terminated": "session.thread_status_terminated",
};
const TOOL_USES = new Set(["agent.tool_use", "agent.custom_tool_use", "agent.mcp_tool_use"]);

/** The drafts of a run in `scope`, tagged with its thread (drafts naming a thread already keep it). */
export function scopeDrafts(scope: Scope, drafts: readonly EventDraft[]): EventDraft[] {
  if (!scope) return [...drafts];
  return drafts.map((d) => {
    if (d.threadId !== undefined) return d;
    const renamed = STATUS_RENAME[d.type];
    const fields = renamed
      ? { ...d.fields, session_thread_id: scope.id, agent_name: scope.agentName }
      : TOOL_USES.has(d.type)
        ? { ...d.fields, session_thread_id: scope.id }
        : d.fields;
    return { ...d, type: renamed ?? d.type, fields, threadId: scope.id, dedupeKey: d.dedupeKey && `${scope.id}:${d.dedupeKey}` };
  });
}

/** Whether an event read for `scope` belongs to it (the query already narrowed it to the thread plus session-wide types). */
export function inScope(scope: Scope, event: { type: string; body: Record<string, unknown>; threadId: string | null }): boolean {
  if (event.type === "session.usage") return true; // the session's running total: every thread adds to it
  if (event.type === "user.interrupt") {
    const target = event.body.session_thread_id;
    return typeof target !== "string" || target === (scope?.id ?? target);
  }
  return event.threadId === (scope?.id ?? null);
}

interface ThreadRowBody {
  agent: Record<string, unknown> & { name?: string };
}

/** The threads of a session besides the primary one, oldest first. */
export async function childThreads(storage: Storage, sessionId: string): Promise<ThreadScope[]> {
  const rows = await liveThreads(storage.db, sessionId);
  return rows.map((r) => ({ id: r.id, agentName: r.agent_name, parentId: r.parent_thread_id }));
}

/** A thread's agent snapshot and whether it was archived (null: no such thread). */
export async function threadAgent(
  storage: Storage,
  threadId: string,
): Promise<{ agent: Record<string, unknown>; archived: boolean } | null> {
  const row = await storage.db.selectFrom("session_threads").select(["body", "archived_at"]).where("id", "=", threadId).executeTakeFirst();
  if (!row) return null;
  return { agent: (JSON.parse(row.body) as ThreadRowBody).agent, archived: row.archived_at !== null };
}

interface RosterRef {
  id: string;
  version: number;
}

/** The saved agents a session agent may start threads with (advisors and inline agents are not run here). */
export function rosterOf(agent: unknown): RosterRef[] {
  const m = (agent as { multiagent?: Record<string, unknown> | null } | null)?.multiagent;
  if (!m) return [];
  const list =
    m.type === "coordinator"
      ? (m.agents as unknown[])
      : (m.subagents as { type?: string; predefined_agents?: unknown[] } | undefined)?.type === "enabled"
        ? ((m.subagents as { predefined_agents?: unknown[] }).predefined_agents ?? [])
        : [];
  return list.flatMap((e) => {
    const ref = e as { type?: string; id?: string; version?: number };
    return ref.type === "agent" && typeof ref.id === "string" && typeof ref.version === "number"
      ? [{ id: ref.id, version: ref.version }]
      : [];
  });
}

/** A roster agent's version as a thread's agent (BetaManagedAgentsSessionThreadAgent: the session agent without `multiagent`). */
async function rosterAgent(trx: Transaction<Database>, ref: RosterRef): Promise<Record<string, unknown> | null> {
  const row = await trx
    .selectFrom("agent_versions")
    .select("body")
    .where("agent_id", "=", ref.id)
    .where("version", "=", ref.version)
    .executeTakeFirst();
  if (!row) return null;
  const a = JSON.parse(row.body) as Record<string, unknown>;
  return {
    type: "agent",
    id: a.id,
    version: a.version,
    name: a.name,
    description: a.description ?? null,
    system: a.system ?? null,
    model: a.model,
    tools: a.tools ?? [],
    skills: a.skills ?? [],
    mcp_servers: a.mcp_servers ?? [],
    execution_identity: a.execution_identity ?? { type: "service_account" },
  };
}

/** The primary thread's row, made on first need (a session is single-threaded until its coordinator sends a message). */
async function primaryThread(trx: Transaction<Database>, deps: ThreadToolDeps, sessionId: string, agent: unknown): Promise<ThreadScope> {
  const row = await trx
    .selectFrom("session_threads")
    .select(["id", "agent_name"])
    .where("session_id", "=", sessionId)
    .where("parent_thread_id", "is", null)
    .executeTakeFirst();
  if (row) return { id: row.id, agentName: row.agent_name, parentId: null };
  const snapshot = { ...(agent as Record<string, unknown>) };
  delete snapshot.multiagent;
  const name = String(snapshot.name ?? "");
  const id = deps.ids("sthr");
  await trx
    .insertInto("session_threads")
    .values({
      id,
      session_id: sessionId,
      parent_thread_id: null,
      agent_name: name,
      body: JSON.stringify({ agent: snapshot }),
      created_at: new Date(deps.clock.now()).toISOString(),
      archived_at: null,
    })
    .execute();
  return { id, agentName: name, parentId: null };
}

export interface ThreadToolDeps {
  storage: Storage;
  clock: Clock;
  ids: IdFactory;
  /** At most this many threads per session besides the primary one. */
  maxThreads: number;
  /** Appends in the session's transaction (harness `withSession`); null when the session ended. */
  append(
    sessionId: string,
    fn: (trx: Transaction<Database>, append: (drafts: EventDraft[]) => Promise<void>) => Promise<ServerToolResult>,
  ): Promise<ServerToolResult | null>;
}

const INPUT_SCHEMA = {
  type: "object",
  properties: {
    agent: { type: "string", description: "The agent to message: its name or id. The first message to an agent starts its thread." },
    message: { type: "string", description: "What to tell or ask it." },
  },
  required: ["agent", "message"],
};

function text(t: string, isError = false): ServerToolResult {
  return { content: [{ type: "text", text: t }], isError };
}

/**
 * `send_thread_message`, offered to a primary thread whose agent has a
 * roster. The call is recorded idempotently (dedupe keys on the tool use
 * id): a re-run after a crash finds the thread and messages it already made.
 */
export function threadToolExecutor(deps: ThreadToolDeps): ServerToolExecutor {
  return {
    id: THREAD_TOOL,
    async listTools(ctx: ServerToolContext): Promise<ModelToolDefinition[]> {
      if (rosterOf(ctx.agent).length === 0) return [];
      return [
        {
          name: THREAD_TOOL,
          description:
            "Send a message to another agent of this session. Each agent works in its own thread; its reply arrives later as a message from that thread.",
          input_schema: INPUT_SCHEMA,
        },
      ];
    },
    handles: (name) => name === THREAD_TOOL,
    binding: () => ({ toolName: THREAD_TOOL, permissionPolicy: { type: "always_allow" } }),
    async execute(call, ctx) {
      const input = (call.input ?? {}) as { agent?: unknown; message?: unknown };
      if (typeof input.agent !== "string" || typeof input.message !== "string" || input.message === "")
        return text(`${THREAD_TOOL}: "agent" and a non-empty "message" are required`, true);
      const wanted = input.agent;
      const result = await deps.append(ctx.sessionId, async (trx, append) => {
        const candidates = await Promise.all(rosterOf(ctx.agent).map(async (ref) => ({ ref, agent: await rosterAgent(trx, ref) })));
        const target = candidates.find((c) => c.agent && (c.agent.id === wanted || c.agent.name === wanted));
        if (!target?.agent) {
          const names = candidates.flatMap((c) => (c.agent ? [String(c.agent.name)] : []));
          return text(`${THREAD_TOOL}: no agent ${JSON.stringify(wanted)} on this session's roster (${names.join(", ")})`, true);
        }
        const primary = await primaryThread(trx, deps, ctx.sessionId, ctx.agent);
        const agentName = String(target.agent.name);
        const existing = await trx
          .selectFrom("session_threads")
          .select(["id", "archived_at"])
          .where("session_id", "=", ctx.sessionId)
          .where("parent_thread_id", "=", primary.id)
          .where("agent_name", "=", agentName)
          .orderBy("created_at", "desc")
          .executeTakeFirst();
        let threadId = existing && existing.archived_at === null ? existing.id : null;
        const drafts: EventDraft[] = [];
        if (!threadId) {
          const count = await trx
            .selectFrom("session_threads")
            .select((eb) => eb.fn.countAll<number>().as("n"))
            .where("session_id", "=", ctx.sessionId)
            .where("parent_thread_id", "is not", null)
            .executeTakeFirstOrThrow();
          if (Number(count.n) >= deps.maxThreads) {
            const message = `this session already has ${deps.maxThreads} threads, the most it may have`;
            await append([
              {
                type: "workflow_run.error",
                fields: { workflow_run_id: null, error: { type: "thread_limit_error", message } },
                dedupeKey: `thread_limit:${call.toolUseId}`,
                threadId: null,
              },
            ]);
            return text(`${THREAD_TOOL}: ${message}`, true);
          }
          threadId = deps.ids("sthr");
          await trx
            .insertInto("session_threads")
            .values({
              id: threadId,
              session_id: ctx.sessionId,
              parent_thread_id: primary.id,
              agent_name: agentName,
              body: JSON.stringify({ agent: target.agent }),
              created_at: new Date(deps.clock.now()).toISOString(),
              archived_at: null,
            })
            .execute();
          drafts.push({
            type: "session.thread_created",
            fields: { session_thread_id: threadId, agent_name: agentName, workflow_run_id: null },
            dedupeKey: `thread_created:${call.toolUseId}`,
            threadId,
          });
        }
        const content = [{ type: "text", text: input.message }];
        drafts.push(
          {
            type: "agent.thread_message_sent",
            fields: { to_session_thread_id: threadId, to_agent_name: agentName, content },
            dedupeKey: `thread_sent:${call.toolUseId}`,
            threadId: null,
          },
          {
            type: "agent.thread_message_received",
            fields: { from_session_thread_id: primary.id, from_agent_name: primary.agentName, content },
            dedupeKey: `thread_received:${call.toolUseId}`,
            threadId,
          },
        );
        await append(drafts);
        return text(`Sent to ${agentName} (thread ${threadId}). Its reply will arrive as a message from that thread.`);
      });
      return result ?? text(`${THREAD_TOOL}: the session ended`, true);
    },
  };
}

/**
 * A subagent's turn that ends with a reply answers the thread that gave it
 * the work: with the appended batch that holds its last `agent.message` and
 * its end-of-turn idle (model-step lands them together), the reply goes back
 * as `agent.thread_message_sent` here and `agent.thread_message_received`
 * in the parent's log, in the same transaction, so a crash can neither lose
 * nor repeat it.
 */
export function withReply(scope: Scope, drafts: EventDraft[]): EventDraft[] {
  if (!scope?.parentId) return drafts;
  const idle = drafts.find(
    (d) => d.type === "session.thread_status_idle" && (d.fields.stop_reason as { type?: string })?.type === "end_turn",
  );
  const reply = [...drafts].reverse().find((d) => d.type === "agent.message");
  if (!idle || !reply) return drafts;
  const content = Array.isArray(reply.fields.content) ? reply.fields.content : [];
  return [
    ...drafts,
    {
      type: "agent.thread_message_sent",
      fields: { to_session_thread_id: scope.parentId, content },
      dedupeKey: `${idle.dedupeKey}:reply_sent`,
      threadId: scope.id,
    },
    {
      type: "agent.thread_message_received",
      fields: { from_session_thread_id: scope.id, from_agent_name: scope.agentName, content },
      dedupeKey: `${idle.dedupeKey}:reply_received`,
      // Back to the primary thread: the coordinator is the only parent a thread has here.
      threadId: null,
    },
  ];
}
