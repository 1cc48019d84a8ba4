/**
 * Which webhook events one appended session-log event reports. The event log
 * calls this inside its append transaction, so each webhook event is written
 * with the log row it is derived from, ordered by that row's seq.
 */
import type { WebhookChange } from "./outbox.ts";

/** Log event type → the webhook event type it emits. */
const SESSION_WEBHOOK: Record<string, string> = {
  "session.status_running": "session.status_run_started",
  "session.status_idle": "session.status_idled",
  "session.status_rescheduled": "session.status_rescheduled",
  "session.status_terminated": "session.status_terminated",
  "session.updated": "session.updated",
  "span.outcome_evaluation_end": "session.outcome_evaluation_ended",
  "session.thread_created": "session.thread_created",
  "session.thread_status_idle": "session.thread_idled",
  "session.thread_status_terminated": "session.thread_terminated",
};

const THREAD_EVENTS = new Set(["session.thread_created", "session.thread_idled", "session.thread_terminated"]);
const IDLES = new Set(["session.status_idle", "session.thread_status_idle"]);

export interface LoggedEvent {
  seq: number;
  type: string;
  /** The stored event JSON. */
  body: string;
}

export function sessionWebhookChanges(sessionId: string, row: LoggedEvent): WebhookChange[] {
  const type = SESSION_WEBHOOK[row.type];
  if (!type) return [];
  const at = { id: sessionId, orderKey: sessionId, orderSeq: row.seq };
  const needsBody = THREAD_EVENTS.has(type) || IDLES.has(row.type);
  const event = needsBody ? (JSON.parse(row.body) as { session_thread_id?: string; stop_reason?: { type?: string } | null }) : {};
  const changes: WebhookChange[] = [
    THREAD_EVENTS.has(type) && event.session_thread_id
      ? { type, ...at, extra: { session_thread_id: event.session_thread_id } }
      : { type, ...at },
  ];
  // The SDK has no stop-reason field on session events: a stop at the budget is its own event.
  if (IDLES.has(row.type) && event.stop_reason?.type === "budget_reached") changes.push({ type: "session.budget_reached", ...at });
  return changes;
}
