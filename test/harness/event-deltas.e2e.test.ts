/**
 * `event_deltas` on the session stream (§5.7), through the official SDK on
 * both backends, while the scripted model streams a thinking block and a
 * text block in 16-character chunks: a stream that asked for previews gets
 * `event_start` (thinking: start-only) and `event_delta` frames before the
 * final events, under the final events' ids; a stream that asked only for
 * `agent.message` gets only those; a stream that did not ask gets none; the
 * durable events are the same on every stream and equal the log; a resume
 * with Last-Event-ID replays the log exactly, previews never included.
 */
import type { BetaManagedAgentsStreamSessionEvents } from "@anthropic-ai/sdk/resources/beta/sessions/events";
import type { BetaManagedAgentsDeltaType } from "@anthropic-ai/sdk/resources/beta/sessions/sessions";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Harness, startHarness, TOOLSET } from "./support.ts";

const ANSWER = "The answer is forty-two, worked out carefully and streamed in pieces.";
const SCRIPT = [
  {
    match: { last_user_text_contains: "think aloud" },
    response: {
      content: [
        { type: "thinking" as const, thinking: "Let me weigh the question before answering it.", signature: "sig" },
        { type: "text" as const, text: ANSWER },
      ],
    },
  },
];

const isPreview = (e: BetaManagedAgentsStreamSessionEvents) => e.type === "event_start" || e.type === "event_delta";

describe.each(BACKENDS)("event_deltas on %s", (dialect) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(dialect, SCRIPT);
  });
  afterAll(async () => h?.close());

  async function open(sessionId: string, deltas?: BetaManagedAgentsDeltaType[], lastEventId?: string) {
    const stream = await h.t.client.beta.sessions.events.stream(
      sessionId,
      deltas ? { event_deltas: deltas } : {},
      lastEventId ? { headers: { "last-event-id": lastEventId } } : {},
    );
    // Wrapped: an async function returning a promise would wait for the whole collection.
    const collected = (async () => {
      const seen: BetaManagedAgentsStreamSessionEvents[] = [];
      for await (const event of stream) {
        seen.push(event);
        if (event.type === "session.status_idle") break;
      }
      return seen;
    })();
    return { collected };
  }

  it("previews agent.message and agent.thinking only for streams that ask, then the final events; replay stays exact", async () => {
    const sessionId = await h.session(await h.agent([TOOLSET]), await h.environment("cloud"));
    const both = await open(sessionId, ["agent.message", "agent.thinking"]);
    const messageOnly = await open(sessionId, ["agent.message"]);
    const plain = await open(sessionId);
    await h.say(sessionId, "think aloud");
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    const [withBoth, withMessage, without] = await Promise.all([both.collected, messageOnly.collected, plain.collected]);
    const logged = await h.events(sessionId);

    // The durable events are the log, on every stream.
    for (const seen of [withBoth, withMessage, without]) {
      expect(seen.map((e) => (e.type === "event_start" || e.type === "event_delta" ? null : e.id)).filter((id) => id !== null)).toEqual(
        logged.map((e) => e.id),
      );
    }
    expect(without.filter(isPreview)).toEqual([]);

    const message = logged.find((e) => e.type === "agent.message");
    const thinking = logged.find((e) => e.type === "agent.thinking");
    if (message?.type !== "agent.message" || thinking?.type !== "agent.thinking")
      throw new Error("the turn recorded no message or thinking");
    expect(message.content).toEqual([{ type: "text", text: ANSWER }]);

    const at = (seen: BetaManagedAgentsStreamSessionEvents[], match: (e: BetaManagedAgentsStreamSessionEvents) => boolean) =>
      seen.findIndex(match);
    for (const seen of [withBoth, withMessage]) {
      const start = at(seen, (e) => e.type === "event_start" && e.event.type === "agent.message");
      const final = at(seen, (e) => e.type === "agent.message");
      const startFrame = seen[start];
      expect(startFrame).toEqual({ type: "event_start", event: { type: "agent.message", id: message.id } });
      const deltas = seen.flatMap((e, i) => (e.type === "event_delta" ? [{ i, e }] : []));
      expect(deltas.length).toBeGreaterThan(0);
      for (const { i, e } of deltas) {
        expect(e.event_id).toBe(message.id);
        expect(i).toBeGreaterThan(start);
        expect(i).toBeLessThan(final);
      }
      expect(deltas.map(({ e }) => e.delta.content.text).join("")).toBe(ANSWER);
      expect(deltas.every(({ e }) => e.delta.type === "content_delta" && e.delta.content.type === "text")).toBe(true);
    }

    // Thinking previews are start-only, and only where asked for.
    const thinkingStart = at(withBoth, (e) => e.type === "event_start" && e.event.type === "agent.thinking");
    expect(withBoth[thinkingStart]).toEqual({ type: "event_start", event: { type: "agent.thinking", id: thinking.id } });
    expect(thinkingStart).toBeLessThan(at(withBoth, (e) => e.type === "agent.thinking"));
    expect(withBoth.filter((e) => e.type === "event_delta" && e.event_id === thinking.id)).toEqual([]);
    expect(withMessage.filter((e) => e.type === "event_start" && e.event.type === "agent.thinking")).toEqual([]);

    // A resume after the first event replays the log from there, with no previews of what already ended.
    const first = logged[0];
    if (!first) throw new Error("empty log");
    const resumed = await open(sessionId, ["agent.message", "agent.thinking"], first.id);
    expect((await resumed.collected).map((e) => (e.type === "event_start" || e.type === "event_delta" ? null : e.id))).toEqual(
      logged.slice(1).map((e) => e.id),
    );
  });

  it("refuses an unknown event_deltas type with the API's error shape", async () => {
    const sessionId = await h.session(await h.agent([TOOLSET]), await h.environment("cloud"));
    const res = await fetch(`${h.t.baseURL}/v1/sessions/${sessionId}/events/stream?event_deltas=agent.tool_use`, {
      headers: { "x-api-key": h.t.apiKey, "anthropic-beta": "managed-agents-2026-04-01" },
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
  });
});
