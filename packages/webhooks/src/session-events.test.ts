/** Which webhook events a session-log event reports, and with what data. */
import { describe, expect, it } from "vitest";
import { sessionWebhookChanges } from "./session-events.ts";

const row = (type: string, fields: object = {}, seq = 7) => ({ seq, type, body: JSON.stringify({ type, ...fields }) });
const at = { id: "sesn_1", orderKey: "sesn_1", orderSeq: 7 };

describe("sessionWebhookChanges", () => {
  it("maps status, update and outcome events to one webhook event at the row's seq", () => {
    expect(sessionWebhookChanges("sesn_1", row("session.status_running"))).toEqual([{ type: "session.status_run_started", ...at }]);
    expect(sessionWebhookChanges("sesn_1", row("session.updated", { title: "x" }))).toEqual([{ type: "session.updated", ...at }]);
    expect(sessionWebhookChanges("sesn_1", row("span.outcome_evaluation_end", { result: "satisfied" }))).toEqual([
      { type: "session.outcome_evaluation_ended", ...at },
    ]);
  });

  it("sends nothing for events the SDK has no webhook for", () => {
    for (const type of ["agent.message", "user.message", "span.outcome_evaluation_start", "session.thread_status_running"])
      expect(sessionWebhookChanges("sesn_1", row(type))).toEqual([]);
  });

  it("names the thread on thread events", () => {
    const thread = { session_thread_id: "sthr_1", agent_name: "helper" };
    expect(sessionWebhookChanges("sesn_1", row("session.thread_created", thread))).toEqual([
      { type: "session.thread_created", ...at, extra: { session_thread_id: "sthr_1" } },
    ]);
    expect(sessionWebhookChanges("sesn_1", row("session.thread_status_terminated", thread))).toEqual([
      { type: "session.thread_terminated", ...at, extra: { session_thread_id: "sthr_1" } },
    ]);
  });

  it("adds session.budget_reached after an idle whose stop reason is the budget, on the session or a thread", () => {
    expect(sessionWebhookChanges("sesn_1", row("session.status_idle", { stop_reason: { type: "end_turn" } }))).toEqual([
      { type: "session.status_idled", ...at },
    ]);
    expect(sessionWebhookChanges("sesn_1", row("session.status_idle", { stop_reason: { type: "budget_reached" } }))).toEqual([
      { type: "session.status_idled", ...at },
      { type: "session.budget_reached", ...at },
    ]);
    expect(
      sessionWebhookChanges(
        "sesn_1",
        row("session.thread_status_idle", { session_thread_id: "sthr_1", stop_reason: { type: "budget_reached" } }),
      ),
    ).toEqual([
      { type: "session.thread_idled", ...at, extra: { session_thread_id: "sthr_1" } },
      { type: "session.budget_reached", ...at },
    ]);
  });
});
