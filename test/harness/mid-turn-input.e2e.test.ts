/**
 * A user.message that lands while the turn's model request is in flight is
 * input the model has not seen: the response to the earlier request must not
 * close it with the turn's final idle. That response is dropped (as after an
 * interrupt) and the turn asks again with both messages. Found by
 * bench/load.ts: with two servers, a third turn went missing.
 */
import type { ModelPort } from "@openma/harness";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Harness, startHarness, TOOLSET } from "./support.ts";

const text = (t: string) => ({ content: [{ type: "text" as const, text: t }] });

describe.each(BACKENDS)("input that arrives mid-turn on %s", (dialect) => {
  let h: Harness;
  let agentId: string;
  let cloud: string;
  beforeAll(async () => {
    h = await startHarness(dialect);
    agentId = await h.agent([TOOLSET]);
    cloud = await h.environment("cloud");
  });
  afterAll(async () => h?.close());

  it("a message sent while the model answers the previous one gets its own turn", async () => {
    h.model.load([{ response: text("answer one") }, { response: text("answer two") }]);
    const sessionId = await h.session(agentId, cloud, "first task");
    const inner = h.deps.model;
    let sent = false;
    // The second message lands after the model answered but before the answer is recorded.
    const model: ModelPort = {
      retry: inner.retry,
      async send(request, signal, observer) {
        const result = await inner.send(request, signal, observer);
        if (!sent) {
          sent = true;
          await h.say(sessionId, "second task");
        }
        return result;
      },
    };
    expect(await h.run(sessionId, { model })).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(await h.needsTurn(sessionId)).toBe(false);
    const requests = h.model.requests.map((r) => JSON.stringify(r.body));
    expect(requests).toHaveLength(2);
    expect(requests[0]).not.toContain("second task");
    expect(requests[1]).toContain("first task");
    expect(requests[1]).toContain("second task");
    expect(requests[1]).not.toContain("answer one");
    const events = await h.events(sessionId);
    const messages = events.filter((e) => e.type === "agent.message").map((e) => JSON.stringify(e));
    expect(messages).toHaveLength(1);
    expect(messages[0]).toContain("answer two");
    // The dropped response's span is closed, not left open, and one idle ends the turn.
    expect(events.filter((e) => e.type === "span.model_request_end")).toHaveLength(2);
    expect(events.filter((e) => e.type === "session.status_idle")).toHaveLength(1);
  });
});
