/**
 * A session event stream whose reader stops reading (docs/transfers.md): while
 * 10,000 events (about 20 MB) are appended, the server holds at most its send
 * buffer for that connection and then closes the stream; the reader, resuming
 * with `Last-Event-ID`, receives every event exactly once and in order.
 *
 * No clock is involved: the close is driven by bytes queued, not by time.
 */
import { type IncomingMessage, request } from "node:http";
import { newId, systemClock } from "@openma/storage";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { appendEvents, type EventLogDeps } from "../../packages/api/src/event-log.ts";
import { startTestServer, type TestServer } from "../support/server.ts";

const EVENTS = 10_000;
const SEND_BUFFER = 64 * 1024;
const TEXT = "x".repeat(2000);

/** Opens the stream (optionally resuming) and hands back the paused response. */
function openStream(t: TestServer, sessionId: string, lastEventId?: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = request(new URL(`/v1/sessions/${sessionId}/events/stream`, t.baseURL), {
      headers: {
        "x-api-key": t.apiKey,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "managed-agents-2026-04-01",
        accept: "text/event-stream",
        ...(lastEventId ? { "last-event-id": lastEventId } : {}),
      },
    });
    req.on("response", (res) => {
      res.pause();
      resolve(res);
    });
    req.on("error", reject).end();
  });
}

/** Reads `res` until it ends or `want` ids have arrived in all; returns the ids seen and whether the server ended it. */
function collectIds(res: IncomingMessage, into: string[], want: number): Promise<{ ended: boolean }> {
  return new Promise((resolve) => {
    let buf = "";
    res.setEncoding("utf8");
    res.on("data", (chunk: string) => {
      buf += chunk;
      let i = buf.indexOf("\n\n");
      while (i >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const id = /^id: (.+)$/m.exec(block)?.[1];
        const type = /^event: (.+)$/m.exec(block)?.[1];
        if (id && type === "user.message") into.push(id);
        i = buf.indexOf("\n\n");
      }
      if (into.length >= want) {
        res.destroy();
        resolve({ ended: false });
      }
    });
    res.on("end", () => resolve({ ended: true }));
    res.on("close", () => resolve({ ended: into.length < want }));
    res.resume();
  });
}

describe("a session event stream whose reader stops reading", () => {
  let t: TestServer;
  let deps: EventLogDeps;
  beforeAll(async () => {
    t = await startTestServer("sqlite", { OPENMA_SSE_SEND_BUFFER_BYTES: String(SEND_BUFFER) });
    deps = { storage: t.store.storage, clock: systemClock, ids: newId };
  });
  afterAll(async () => t?.close());

  it("is closed once it is a send buffer behind, and loses nothing on resuming with Last-Event-ID", async () => {
    const agent = await t.client.beta.agents.create({ name: "a", model: "claude-sonnet-4-5" });
    const env = await t.client.beta.environments.create({ name: "e" });
    const session = await t.client.beta.sessions.create({ agent: agent.id, environment_id: env.id });

    const stalled = await openStream(t, session.id);
    const appended: string[] = [];
    for (let i = 0; i < EVENTS; i += 250) {
      const drafts = Array.from({ length: 250 }, (_, j) => ({
        type: "user.message",
        fields: { content: [{ type: "text", text: `${i + j} ${TEXT}` }] },
        dedupeKey: null,
      }));
      const { events } = await appendEvents(deps, session.id, drafts);
      appended.push(...events.map((e) => e.id));
    }

    // What reached the socket before the server gave up on this reader, then the end of the stream.
    const received: string[] = [];
    const first = await collectIds(stalled, received, EVENTS);
    expect(first.ended).toBe(true);
    expect(received.length).toBeGreaterThan(0);
    expect(received.length).toBeLessThan(EVENTS);

    // Resuming after the last event it saw, the reader catches up: every event once, in order.
    while (received.length < EVENTS) {
      const resumed = await openStream(t, session.id, received.at(-1));
      await collectIds(resumed, received, EVENTS);
    }
    expect(received).toEqual(appended);
  });
});
