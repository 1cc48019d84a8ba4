/**
 * A session's live subagent threads (docs/adr/0024-session-threads.md), read
 * by the loop (which of them may take a turn) and by the end of a session:
 * each thread still live (not archived on its own) ends with it, with a
 * `session.thread_status_terminated` in its own log, so a thread's stream and
 * status say it ended like the session's do. The primary thread's end is the
 * session's own `session.status_terminated`.
 */
import type { Database } from "@openma/storage";
import type { Kysely } from "kysely";
import type { EventDraft } from "./schemas/events.ts";

export interface LiveThread {
  id: string;
  agent_name: string;
  parent_thread_id: string | null;
}

/** The session's threads besides the primary one that are not archived, oldest first. */
export function liveThreads(db: Kysely<Database>, sessionId: string): Promise<LiveThread[]> {
  return db
    .selectFrom("session_threads")
    .select(["id", "agent_name", "parent_thread_id"])
    .where("session_id", "=", sessionId)
    .where("parent_thread_id", "is not", null)
    .where("archived_at", "is", null)
    .orderBy("created_at", "asc")
    .orderBy("id", "asc")
    .execute();
}

/** The terminated status of each live thread, for the transaction that ends the session. */
export async function threadsTerminated(db: Kysely<Database>, sessionId: string): Promise<EventDraft[]> {
  return (await liveThreads(db, sessionId)).map((t) => ({
    type: "session.thread_status_terminated",
    fields: { session_thread_id: t.id, agent_name: t.agent_name },
    dedupeKey: `thread_terminated:${t.id}`,
    threadId: t.id,
  }));
}
