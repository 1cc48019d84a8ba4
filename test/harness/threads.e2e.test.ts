/**
 * Thread limits through the harness, on both backends: a coordinator whose
 * session may start one thread gets a `workflow_run.error`
 * (`thread_limit_error`) and an error result for the second, the first
 * thread still runs, and a re-run records nothing twice.
 */
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Harness, ofType, startHarness } from "./support.ts";

const send = (agent: string, message: string) => ({ type: "tool_use" as const, name: "send_thread_message", input: { agent, message } });

describe.each(BACKENDS)("thread limits on %s", (dialect) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(dialect, [
      {
        match: { system_contains: "ROLE:lead", last_user_text_contains: "go" },
        response: { content: [send("one", "first"), send("two", "second")] },
      },
      { match: { system_contains: "ROLE:lead", tool_result_for: "send_thread_message" }, response: "waiting" },
      { match: { system_contains: "ROLE:one" }, response: "one done" },
      { match: { system_contains: "ROLE:lead", last_user_text_contains: "one done" }, response: "finished" },
    ]);
  });
  afterAll(async () => h?.close());

  it("refuses a thread past the limit with thread_limit_error", async () => {
    const client = h.t.client.beta;
    const one = await client.agents.create({ name: "one", model: "claude-test-1", system: "ROLE:one" });
    const two = await client.agents.create({ name: "two", model: "claude-test-1", system: "ROLE:two" });
    const lead = await client.agents.create({
      name: "lead",
      model: "claude-test-1",
      system: "ROLE:lead",
      multiagent: { type: "coordinator", agents: [one.id, two.id] },
    });
    const session = await h.session(lead.id, await h.environment("none"), "go");
    expect(await h.run(session, { maxThreads: 1 })).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(await h.needsTurn(session)).toBe(false);
    const events = await h.events(session);
    const errors = ofType(events, "workflow_run.error");
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ workflow_run_id: null, error: { type: "thread_limit_error" } });
    const results = ofType(events, "agent.tool_result");
    expect(results.map((r) => r.is_error)).toEqual([false, true]);
    expect(ofType(events, "session.thread_created")).toHaveLength(1);
    expect(ofType(events, "agent.message").map((m) => (m.content as Array<{ text: string }>)[0]?.text)).toEqual([
      "waiting",
      "one done",
      "finished",
    ]);
    // Nothing left to do: a second run (a re-delivered claim) appends nothing.
    const before = events.length;
    await h.run(session, { maxThreads: 1 });
    expect((await h.events(session)).length).toBe(before);
  });
});
