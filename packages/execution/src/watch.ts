/**
 * Watches a session's log while a turn runs, so a `user.interrupt` (or the
 * session being terminated or deleted) reaches the running turn promptly
 * instead of at its next model call. Follows the bus topic the event log
 * publishes after every append and re-reads the table from a cursor (the
 * bus carries no data), reading only `seq` and `type`.
 */
import type { Storage } from "@openma/storage";

/** Must equal `sessionTopic()` in packages/api/src/event-log.ts (asserted by a test). */
export function sessionTopic(sessionId: string): string {
  return `session:${sessionId}`;
}

/** Event types that end a running turn early. */
export const STOP_TYPES: ReadonlySet<string> = new Set(["user.interrupt", "session.status_terminated"]);

const SCAN_BATCH = 500;

export interface SessionWatch {
  close(): void;
}

export type StopReason = { type: "event"; eventType: string; seq: number } | { type: "deleted" };

/**
 * Starts watching from the current head: events already in the log are the
 * turn's input (it reads them itself); anything appended after this resolves
 * is seen here. `onStop` is called at most once.
 */
export async function watchSession(
  storage: Storage,
  sessionId: string,
  onStop: (reason: StopReason) => void,
  onError: (err: Error) => void = () => {},
): Promise<SessionWatch> {
  const { db, bus } = storage;
  let cursor = 0;
  let stopped = false;
  let closed = false;
  let scanning = false;
  let again = false;
  // Wake-ups before the head is known must not scan from 0 (old interrupts are the turn's input, not news).
  let ready = false;
  let wokenEarly = false;
  const stop = (reason: StopReason) => {
    if (stopped || closed) return;
    stopped = true;
    onStop(reason);
  };
  const scan = async (): Promise<void> => {
    if (scanning) {
      again = true;
      return;
    }
    scanning = true;
    try {
      do {
        again = false;
        for (;;) {
          const rows = await db
            .selectFrom("session_events")
            .select(["seq", "type"])
            .where("session_id", "=", sessionId)
            .where("seq", ">", cursor)
            .orderBy("seq")
            .limit(SCAN_BATCH)
            .execute();
          const hit = rows.find((r) => STOP_TYPES.has(r.type));
          if (hit) return stop({ type: "event", eventType: hit.type, seq: hit.seq });
          cursor = rows.at(-1)?.seq ?? cursor;
          if (rows.length < SCAN_BATCH) break;
        }
        // Deletion removes the log and the row; an empty read is then the only sign.
        const exists = await db.selectFrom("sessions").select("id").where("id", "=", sessionId).executeTakeFirst();
        if (!exists) return stop({ type: "deleted" });
      } while (again && !closed);
    } catch (err) {
      onError(err as Error);
    } finally {
      scanning = false;
    }
  };
  // Subscribe before reading the head, so an append in between still wakes us.
  const unsubscribe = bus.subscribe(sessionTopic(sessionId), () => {
    if (closed || stopped) return;
    if (ready) void scan();
    else wokenEarly = true;
  });
  try {
    const head = await db.selectFrom("sessions").select("last_seq").where("id", "=", sessionId).executeTakeFirst();
    if (!head) stop({ type: "deleted" });
    else cursor = head.last_seq;
  } catch (err) {
    unsubscribe();
    throw err;
  }
  ready = true;
  if (wokenEarly) void scan();
  return {
    close() {
      closed = true;
      unsubscribe();
    },
  };
}
