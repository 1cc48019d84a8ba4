/**
 * A reader that hangs up mid-stream must leave nothing behind that the next
 * stream needs: while events are being appended, a stream is read for a
 * while and its socket destroyed; the next stream on the same server must
 * get its headers and every later event. Run against the server in this
 * process (SQLite and Postgres) and against an `openma serve` child on
 * Postgres, each time after a client hang-up and after the server itself
 * closed a stream whose reader fell behind its 1 MiB send buffer.
 *
 * No clock is involved: the appender runs until the second stream has seen
 * what it waits for (conditions, not sleeps).
 */
import { type IncomingMessage, request } from "node:http";
import { newId, systemClock } from "@openma/storage";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { appendEvents, type EventLogDeps } from "../../packages/api/src/event-log.ts";
import { type ChildServer, startChildServer } from "../support/child-server.ts";
import { startTestServer, type TestServer } from "../support/server.ts";

const PER_APPEND = 25;
const WARM_UP = 250;
/** Small enough that a reader in the same process as the appender stays well inside the 1 MiB send buffer. */
const TEXT = "x".repeat(1024);
/** 16 MiB for the stalled reader: far more than the socket buffers and the send buffer. */
const BIG_TEXT = "x".repeat(16 * 1024);

interface Target {
  baseURL: string;
  apiKey: string;
}

/** Opens the stream and hands back the paused response (rejects if the request fails). */
function openStream(target: Target, sessionId: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = request(new URL(`/v1/sessions/${sessionId}/events/stream`, target.baseURL), {
      agent: false,
      headers: {
        "x-api-key": target.apiKey,
        "anthropic-version": "2023-06-01",
        "anthropic-beta": "managed-agents-2026-04-01",
        accept: "text/event-stream",
      },
    });
    req.on("response", (res) => {
      res.pause();
      resolve(res);
    });
    req.on("error", reject).end();
  });
}

/** Reads event ids until at least `want` have arrived (then destroys the socket) or the stream ends. */
function readIds(res: IncomingMessage, want: number): Promise<{ ids: string[]; ended: boolean }> {
  return new Promise((resolve) => {
    const ids: string[] = [];
    let buf = "";
    let done = false;
    const finish = (ended: boolean) => {
      if (done) return;
      done = true;
      resolve({ ids, ended });
    };
    res.setEncoding("utf8");
    res.on("data", (chunk: string) => {
      buf += chunk;
      for (let i = buf.indexOf("\n\n"); i >= 0; i = buf.indexOf("\n\n")) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const id = /^id: (.+)$/m.exec(block)?.[1];
        if (id && /^event: user\.message$/m.test(block)) ids.push(id);
      }
      if (ids.length >= want) {
        res.destroy();
        finish(false);
      }
    });
    res.on("end", () => finish(true));
    res.on("close", () => finish(true));
    res.resume();
  });
}

/** Appends batches of events until `stop` resolves (or `most` were appended); hands back every id appended. */
function appendUntil(
  deps: EventLogDeps,
  sessionId: string,
  stop: Promise<unknown>,
  most = Number.POSITIVE_INFINITY,
  onMost?: (v: unknown) => void,
  text = TEXT,
): Promise<string[]> {
  let stopped = false;
  void stop.finally(() => {
    stopped = true;
  });
  return (async () => {
    const ids: string[] = [];
    while (!stopped && ids.length < most) {
      const drafts = Array.from({ length: PER_APPEND }, (_, j) => ({
        type: "user.message",
        fields: { content: [{ type: "text", text: `${ids.length + j} ${text}` }] },
        dedupeKey: null,
      }));
      ids.push(...(await appendEvents(deps, sessionId, drafts)).events.map((e) => e.id));
      // Let the server in this process serve its sockets between appends (SQLite calls do not yield).
      await new Promise((resolve) => setImmediate(resolve));
    }
    onMost?.(undefined);
    return ids;
  })();
}

function scenarios(name: string, setup: () => Promise<{ t: TestServer; target: Target; close: () => Promise<void> }>) {
  describe(name, () => {
    let t: TestServer;
    let target: Target;
    let close: () => Promise<void>;
    let deps: EventLogDeps;
    beforeAll(async () => {
      ({ t, target, close } = await setup());
      deps = { storage: t.store.storage, clock: systemClock, ids: newId };
    });
    afterAll(async () => {
      await close?.();
    });

    async function newSession(): Promise<string> {
      const agent = await t.client.beta.agents.create({ name: "a", model: "claude-sonnet-4-5" });
      const env = await t.client.beta.environments.create({ name: "e" });
      return (await t.client.beta.sessions.create({ agent: agent.id, environment_id: env.id })).id;
    }

    /** The second stream, opened while the appender still runs, gets headers and live events. */
    async function expectNextStreamWorks(sessionId: string, stopAppending: (v: unknown) => void, appending: Promise<string[]>) {
      const next = await openStream(target, sessionId);
      expect(next.statusCode).toBe(200);
      const { ids, ended } = await readIds(next, PER_APPEND * 2);
      stopAppending(undefined);
      const appended = await appending;
      expect(ended).toBe(false);
      expect(ids.length).toBeGreaterThanOrEqual(PER_APPEND * 2);
      // What it saw is a run of the log, in order.
      const start = appended.indexOf(ids[0] ?? "");
      expect(start).toBeGreaterThanOrEqual(0);
      expect(appended.slice(start, start + ids.length)).toEqual(ids);
    }

    it("serves the next stream after a reader destroys its socket mid-stream", async () => {
      const sessionId = await newSession();
      for (let round = 0; round < 3; round++) {
        const first = await openStream(target, sessionId);
        let stopAppending: (v: unknown) => void = () => {};
        const appending = appendUntil(deps, sessionId, new Promise((r) => (stopAppending = r)));
        try {
          const warm = await readIds(first, WARM_UP);
          expect(warm.ended).toBe(false);
          expect(warm.ids.length).toBeGreaterThanOrEqual(WARM_UP);
          await expectNextStreamWorks(sessionId, stopAppending, appending);
        } finally {
          stopAppending(undefined);
          await appending;
        }
      }
    }, 120_000);

    it("serves the next stream after the server closed one whose reader fell behind", async () => {
      const sessionId = await newSession();
      const stalled = await openStream(target, sessionId);
      const backlog = 1_000;
      let stopBacklog: (v: unknown) => void = () => {};
      const filling = appendUntil(deps, sessionId, new Promise((r) => (stopBacklog = r)), backlog, stopBacklog, BIG_TEXT);
      await filling;
      const first = await readIds(stalled, Number.POSITIVE_INFINITY);
      expect(first.ended).toBe(true);
      expect(first.ids.length).toBeGreaterThan(0);
      expect(first.ids.length).toBeLessThan(backlog);
      let stopAppending: (v: unknown) => void = () => {};
      const appending = appendUntil(deps, sessionId, new Promise((r) => (stopAppending = r)));
      try {
        await expectNextStreamWorks(sessionId, stopAppending, appending);
      } finally {
        stopAppending(undefined);
        await appending;
      }
    }, 120_000);
  });
}

/** The default send buffer, stated so the sizes above stay meaningful. */
const SERVER_ENV = { OPENMA_SSE_SEND_BUFFER_BYTES: String(1024 * 1024) };

scenarios("an event stream hung up on, on SQLite (server in this process)", async () => {
  const t = await startTestServer("sqlite", SERVER_ENV);
  return { t, target: t, close: () => t.close() };
});

scenarios("an event stream hung up on, on Postgres (server in this process)", async () => {
  const t = await startTestServer("postgres", SERVER_ENV);
  return { t, target: t, close: () => t.close() };
});

scenarios("an event stream hung up on, on Postgres (an openma serve child)", async () => {
  const t = await startTestServer("postgres");
  let srv: ChildServer | undefined;
  try {
    srv = await startChildServer(t.store, t.apiKey, SERVER_ENV);
  } catch (err) {
    await t.close();
    throw err;
  }
  const child = srv;
  return {
    t,
    target: child,
    close: async () => {
      await child.close();
      await t.close();
    },
  };
});
