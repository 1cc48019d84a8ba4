/**
 * The session event stream (SSE) on both storage backends, through the SDK's
 * `events.stream` and, for wire details the SDK hides (headers timing,
 * `id:` lines, Last-Event-ID, comments), raw fetch read with the SDK's own
 * SSE parser. Waits are on promises (the next message), never on timers.
 */
import { EventEmitter, once } from "node:events";
import Anthropic from "@anthropic-ai/sdk";
import { Stream } from "@anthropic-ai/sdk/core/streaming";
import { betaTool } from "@anthropic-ai/sdk/helpers/beta/json-schema";
import { silentLogger } from "@openma/api";
import { type ChangeBus, type Dialect, newId, type Storage, systemClock } from "@openma/storage";
import { BACKENDS, openTestStorage } from "@openma/storage/testing";
import {
  type KyselyPlugin,
  type PluginTransformQueryArgs,
  type PluginTransformResultArgs,
  type QueryResult,
  type RootOperationNode,
  SelectQueryNode,
  type UnknownRow,
} from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../apps/openma/src/config.ts";
import { startServer } from "../../apps/openma/src/server.ts";
import { appendEvents, sessionTopic } from "../../packages/api/src/event-log.ts";
import { type ChildServer, startChildServer } from "../support/child-server.ts";
import { startTestServer, TEST_API_KEY, type TestServer } from "../support/server.ts";

const text = (t: string) => ({ type: "user.message" as const, content: [{ type: "text" as const, text: t }] });

interface RawStream {
  response: Response;
  /** The next SSE message (comments are skipped by the parser). */
  next(): Promise<{ event: string | null; id: string | undefined; data: Record<string, unknown> }>;
  close(): void;
}

async function openRaw(
  baseURL: string,
  sessionId: string,
  opts: { token?: string; headers?: Record<string, string>; query?: string } = {},
) {
  const controller = new AbortController();
  const response = await fetch(`${baseURL}/v1/sessions/${sessionId}/events/stream${opts.query ?? ""}`, {
    headers: { authorization: `Bearer ${opts.token ?? TEST_API_KEY}`, accept: "application/json", ...opts.headers },
    signal: controller.signal,
  });
  const messages = Stream.rawEvents(response, controller);
  const raw: RawStream = {
    response,
    async next() {
      const { value, done } = await messages.next();
      if (done || !value) throw new Error("stream ended");
      const idLine = value.raw.find((line) => line.startsWith("id: "));
      return { event: value.event, id: idLine?.slice(4), data: JSON.parse(value.data) };
    },
    close: () => controller.abort(),
  };
  return raw;
}

async function setup(t: { client: Anthropic }, config?: { type: "self_hosted" }) {
  const agent = await t.client.beta.agents.create({ name: "a", model: "claude-sonnet-4-5" });
  const env = await t.client.beta.environments.create({ name: "e", ...(config ? { config } : {}) });
  return { agentId: agent.id, env: env as typeof env & { environment_key?: string } };
}

describe.each(BACKENDS)("session event stream on %s", (dialect) => {
  let t: TestServer;
  let agentId: string;
  let envId: string;

  beforeAll(async () => {
    // A short keep-alive makes the comment (and the re-read it triggers) observable in a test.
    t = await startTestServer(dialect, { OPENMA_SSE_KEEPALIVE_MS: "200" });
    ({
      agentId,
      env: { id: envId },
    } = await setup(t));
  });
  afterAll(async () => t?.close());

  const newSession = async () => (await t.client.beta.sessions.create({ agent: agentId, environment_id: envId })).id;
  const send = async (id: string, ...events: ReturnType<typeof text>[]) =>
    (await t.client.beta.sessions.events.send(id, { events })).data ?? [];

  it("sends 200 text/event-stream headers at once, before any event exists", async () => {
    const id = await newSession();
    const controller = new AbortController();
    const res = await fetch(`${t.baseURL}/v1/sessions/${id}/events/stream`, {
      headers: { authorization: `Bearer ${t.apiKey}`, accept: "application/json" },
      signal: controller.signal,
    });
    // The session has no events and nothing was sent: resolving here means the headers were flushed on connect.
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const reader = res.body?.getReader();
    const first = new TextDecoder().decode((await reader?.read())?.value);
    expect(first).toMatch(/^: connected\n\n/);
    controller.abort();
  });

  it("delivers every event appended after the connection, once, in order, with event and id lines", async () => {
    const id = await newSession();
    await send(id, text("before"));
    const stream = await t.client.beta.sessions.events.stream(id);
    const sent = [...(await send(id, text("one"), text("two"))), ...(await send(id, text("three")))];
    await t.client.beta.sessions.update(id, { title: "renamed" });
    const received = [];
    for await (const event of stream) {
      received.push(event);
      if (received.length === 4) break;
    }
    expect(received.slice(0, 3)).toEqual(sent);
    expect(received[3]).toMatchObject({ type: "session.updated", title: "renamed" });

    const raw = await openRaw(t.baseURL, id, { query: `?after_id=${sent[0]?.id}` });
    const message = await raw.next();
    expect(message).toEqual({ event: "user.message", id: sent[1]?.id, data: sent[1] });
    raw.close();
  });

  it("replays everything after Last-Event-ID on reconnect, without loss or duplicates", async () => {
    const id = await newSession();
    const first = await openRaw(t.baseURL, id);
    const [e1, e2] = await send(id, text("e1"), text("e2"));
    expect((await first.next()).id).toBe(e1?.id);
    expect((await first.next()).id).toBe(e2?.id);
    first.close();

    const missed = await send(id, text("e3"), text("e4"));
    const second = await openRaw(t.baseURL, id, { headers: { "last-event-id": String(e2?.id) } });
    const [e5] = await send(id, text("e5"));
    const replayed = [await second.next(), await second.next(), await second.next()];
    expect(replayed.map((m) => m.id)).toEqual([...missed, e5].map((e) => e?.id));
    expect(replayed.map((m) => m.data)).toEqual([...missed, e5]);
    second.close();

    const unknown = await fetch(`${t.baseURL}/v1/sessions/${id}/events/stream`, {
      headers: { authorization: `Bearer ${t.apiKey}`, "last-event-id": "sevt_not_here" },
    });
    expect(unknown.status).toBe(400);
    expect(await unknown.json()).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
  });

  it("delivers concurrent appends exactly once in log order", async () => {
    const id = await newSession();
    const stream = await t.client.beta.sessions.events.stream(id);
    await Promise.all(Array.from({ length: 20 }, (_, i) => send(id, text(`c${i}`), text(`d${i}`))));
    const logged = [];
    for await (const e of t.client.beta.sessions.events.list(id, { limit: 1000 })) logged.push(e.id);
    const received: string[] = [];
    for await (const event of stream) {
      received.push((event as { id: string }).id);
      if (received.length === 40) break;
    }
    expect(received).toEqual(logged);
  });

  it("keeps the connection alive with comments only, and a keep-alive re-read finds events whose wake-up was lost", async () => {
    const id = await newSession();
    const controller = new AbortController();
    const res = await fetch(`${t.baseURL}/v1/sessions/${id}/events/stream`, {
      headers: { authorization: `Bearer ${t.apiKey}` },
      signal: controller.signal,
    });
    const reader = res.body?.getReader() as ReadableStreamDefaultReader<Uint8Array>;
    const decoder = new TextDecoder();
    let seen = "";
    while (!seen.includes(": keep-alive")) seen += decoder.decode((await reader.read()).value, { stream: true });
    expect(seen).not.toContain("event:");

    // Appended inside a transaction with no notification afterwards: only the keep-alive re-read can find it.
    const deps = { storage: t.store.storage, clock: systemClock, ids: newId };
    const silent = await t.store.storage.db
      .transaction()
      .execute((trx) => appendEvents(deps, id, [{ type: "agent.message", fields: { content: [] }, dedupeKey: null }], { trx }));
    while (!seen.includes("event: agent.message")) seen += decoder.decode((await reader.read()).value, { stream: true });
    expect(seen).toContain(`id: ${silent.events[0]?.id}`);
    controller.abort();
  });

  it("serves the SDK's SessionToolRunner: a tool use runs once, its result lands, session.status_terminated ends it", async () => {
    const hosted = await setup(t, { type: "self_hosted" });
    const id = (await t.client.beta.sessions.create({ agent: agentId, environment_id: hosted.env.id })).id;
    const echo = betaTool({
      name: "echo",
      description: "echoes",
      inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
      run: ({ text }) => `echo: ${text}`,
    });
    const runner = t.clientWith(String(hosted.env.environment_key)).beta.sessions.events.toolRunner(id, { tools: [echo] });
    const calls = (async () => {
      const names = [];
      for await (const call of runner) names.push(call.name);
      return names;
    })();
    const observer = await t.client.beta.sessions.events.stream(id);
    const deps = { storage: t.store.storage, clock: systemClock, ids: newId };
    const [use] = (
      await appendEvents(deps, id, [{ type: "agent.tool_use", fields: { name: "echo", input: { text: "hi" } }, dedupeKey: null }])
    ).events;
    for await (const event of observer) {
      if (event.type !== "user.tool_result") continue;
      expect(event).toMatchObject({ tool_use_id: use?.id, is_error: false, content: [{ type: "text", text: "echo: hi" }] });
      break;
    }
    await appendEvents(deps, id, [{ type: "session.status_terminated", fields: {}, dedupeKey: null }]);
    expect(await calls).toEqual(["echo"]);
  });

  it("sends session.deleted and ends the stream when the session is deleted", async () => {
    const id = await newSession();
    const stream = await t.client.beta.sessions.events.stream(id);
    await t.client.beta.sessions.delete(id);
    const received = [];
    for await (const event of stream) received.push(event.type);
    expect(received).toEqual(["session.deleted"]);
  });

  it("authorises like the events list and validates its query", async () => {
    const hosted = await setup(t, { type: "self_hosted" });
    const id = await newSession();
    const foreign = await fetch(`${t.baseURL}/v1/sessions/${id}/events/stream`, {
      headers: { authorization: `Bearer ${hosted.env.environment_key}` },
    });
    expect(foreign.status).toBe(403);
    const err = await t.client.beta.sessions.events.stream("sesn_missing").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.NotFoundError);
    const badDelta = await t.client.beta.sessions.events
      .stream(id, { event_deltas: ["agent.nope" as "agent.message"] })
      .catch((e: unknown) => e);
    expect(badDelta).toBeInstanceOf(Anthropic.BadRequestError);

    const withDeltas = await t.client.beta.sessions.events.stream(id, { event_deltas: ["agent.message", "agent.thinking"] });
    const [sent] = await send(id, text("x"));
    for await (const event of withDeltas) {
      expect(event).toEqual(sent);
      break;
    }
  });
});

describe.each(BACKENDS)("stream subscriptions on %s", (dialect: Dialect) => {
  it("releases the bus subscription when the client disconnects", async () => {
    const store = await openTestStorage(dialect);
    const subscriptions = new EventEmitter();
    let live = 0;
    const inner = store.storage.bus;
    const bus: ChangeBus = {
      publish: (topic) => inner.publish(topic),
      subscribe: (topic, cb) => {
        const unsubscribe = inner.subscribe(topic, cb);
        live++;
        subscriptions.emit("change", topic);
        return () => {
          unsubscribe();
          live--;
          subscriptions.emit("change", topic);
        };
      },
      broadcast: (topic, payload) => inner.broadcast(topic, payload),
      listen: (topic, cb) => inner.listen(topic, cb),
      close: () => inner.close(),
    };
    const storage: Storage = { ...store.storage, bus };
    const config = loadConfig({
      PORT: "0",
      OPENMA_DATA_DIR: store.dataDir,
      OPENMA_API_KEY: TEST_API_KEY,
      LOG_LEVEL: "silent",
      OPENMA_BRAIN: "off",
    });
    const server = await startServer(config, { storage, logger: silentLogger });
    try {
      const client = new Anthropic({ baseURL: server.url, apiKey: TEST_API_KEY, maxRetries: 0 });
      const { agentId, env } = await setup({ client });
      const id = (await client.beta.sessions.create({ agent: agentId, environment_id: env.id })).id;
      const stream = await client.beta.sessions.events.stream(id);
      expect(live).toBe(1);
      const released = once(subscriptions, "change");
      stream.controller.abort();
      expect(await released).toEqual([sessionTopic(id)]);
      expect(live).toBe(0);
    } finally {
      await server.close();
      await store.cleanup();
    }
  });
});

describe.each(BACKENDS)("many subscribers on one session on %s", (dialect: Dialect) => {
  let t: TestServer;
  // A keep-alive far beyond the test timeout: a wake-up lost by read sharing cannot be rescued by a keep-alive re-read.
  beforeAll(async () => {
    t = await startTestServer(dialect, { OPENMA_SSE_KEEPALIVE_MS: "600000" });
  });
  afterAll(async () => t?.close());

  it("delivers every event to every one of 25 subscribers in order, with reads shared between them", async () => {
    const { agentId, env } = await setup(t);
    const id = (await t.client.beta.sessions.create({ agent: agentId, environment_id: env.id })).id;
    const streams = await Promise.all(Array.from({ length: 25 }, () => openRaw(t.baseURL, id)));
    const sent: string[] = [];
    // Appends race the readers' shared queries: some readers join a read that began before their wake-up.
    await Promise.all(
      Array.from({ length: 10 }, async (_, i) => {
        for (const e of await t.client.beta.sessions.events
          .send(id, { events: [text(`m${i}`), text(`n${i}`)] })
          .then((r) => r.data ?? [])) {
          sent.push(e.id);
        }
      }),
    );
    const log = (await t.client.beta.sessions.events.list(id, { limit: 100 })).data.map((e) => e.id);
    expect(new Set(log)).toEqual(new Set(sent));
    for (const stream of streams) {
      const got: string[] = [];
      while (got.length < log.length) got.push((await stream.next()).id ?? "");
      expect(got).toEqual(log);
      stream.close();
    }
  });
});

/**
 * Holds the results of `session_events` reads while closed, so a test can make
 * a reader join a shared read that started before the append that woke it.
 */
class EventReadGate implements KyselyPlugin {
  private closed = false;
  private opened: Promise<void> = Promise.resolve();
  private release: () => void = () => {};
  private readonly gated = new WeakSet<object>();
  close(): void {
    this.closed = true;
    this.opened = new Promise((resolve) => (this.release = resolve));
  }
  open(): void {
    this.closed = false;
    this.release();
  }
  transformQuery(args: PluginTransformQueryArgs): RootOperationNode {
    const node = args.node;
    if (SelectQueryNode.is(node) && JSON.stringify(node.from).includes('"session_events"')) this.gated.add(args.queryId);
    return node;
  }
  async transformResult(args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    if (this.closed && this.gated.has(args.queryId)) await this.opened;
    return args.result;
  }
}

// Postgres only: the gate pauses a read while it still holds its connection, and
// SQLite has exactly one connection, so the append the test needs would wait behind it.
describe.each(["postgres"] as const)("shared reads on %s", (dialect: Dialect) => {
  it("a subscriber that joins a read begun before its wake-up reads again and misses nothing", async () => {
    const store = await openTestStorage(dialect);
    const gate = new EventReadGate();
    const wakeups = new EventEmitter();
    const inner = store.storage.bus;
    const bus: ChangeBus = {
      publish: (topic) => inner.publish(topic),
      subscribe: (topic, cb) =>
        inner.subscribe(topic, () => {
          cb();
          wakeups.emit("wake");
        }),
      broadcast: (topic, payload) => inner.broadcast(topic, payload),
      listen: (topic, cb) => inner.listen(topic, cb),
      close: () => inner.close(),
    };
    const storage: Storage = { ...store.storage, bus, db: store.storage.db.withPlugin(gate) };
    // No keep-alive re-read within the test: only the wake-up logic can deliver.
    const config = loadConfig({
      PORT: "0",
      OPENMA_DATA_DIR: store.dataDir,
      OPENMA_API_KEY: TEST_API_KEY,
      LOG_LEVEL: "silent",
      OPENMA_SSE_KEEPALIVE_MS: "600000",
      OPENMA_BRAIN: "off",
    });
    const server = await startServer(config, { storage, logger: silentLogger });
    try {
      const client = new Anthropic({ baseURL: server.url, apiKey: TEST_API_KEY, maxRetries: 0 });
      const { agentId, env } = await setup({ client });
      const id = (await client.beta.sessions.create({ agent: agentId, environment_id: env.id })).id;
      const idle = await openRaw(server.url, id); // finishes its first read and waits
      await client.beta.sessions.events.send(id, { events: [text("warm-up")] });
      expect((await idle.next()).data).toMatchObject({ type: "user.message" });
      gate.close();
      const busy = await openRaw(server.url, id); // its first read is now held by the gate
      const woken = once(wakeups, "wake");
      const [appended] = (await client.beta.sessions.events.send(id, { events: [text("while a read is held")] })).data ?? [];
      await woken;
      // One turn of the event loop: the woken reader asks for its page (and joins the held read).
      await new Promise((resolve) => setImmediate(resolve));
      gate.open();
      expect((await idle.next()).id).toBe(appended?.id);
      expect((await busy.next()).id).toBe(appended?.id);
      idle.close();
      busy.close();
    } finally {
      gate.open();
      await server.close();
      await store.cleanup();
    }
  });
});

describe("event stream across two server processes (postgres)", () => {
  let t: TestServer;
  let child: ChildServer;
  beforeAll(async () => {
    t = await startTestServer("postgres");
    child = await startChildServer(t.store, t.apiKey);
  });
  afterAll(async () => {
    await child?.close();
    await t?.close();
  });

  it("delivers events appended on one process to a stream held on the other, both ways", async () => {
    const { agentId, env } = await setup(t);
    const id = (await t.client.beta.sessions.create({ agent: agentId, environment_id: env.id })).id;

    const onChild = await child.client.beta.sessions.events.stream(id);
    const [fromParent] = (await t.client.beta.sessions.events.send(id, { events: [text("from parent")] })).data ?? [];
    for await (const event of onChild) {
      expect(event).toEqual(fromParent);
      break;
    }

    const onParent = await t.client.beta.sessions.events.stream(id);
    const [fromChild] = (await child.client.beta.sessions.events.send(id, { events: [text("from child")] })).data ?? [];
    for await (const event of onParent) {
      expect(event).toEqual(fromChild);
      break;
    }
  });
});
