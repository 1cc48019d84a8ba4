/**
 * `kill -9` of a real `openma serve` process while a subagent thread is
 * mid-turn (issue 13's evidence for multi-agent threads), on both backends:
 * a coordinator messages two subagents, the first one's model stream is held
 * open between two chunks by the scripted model's manual clock, the server is
 * SIGKILLed there and started again on the same database. Through the
 * official SDK: every thread finishes, every event id appears once, the log
 * says exactly what an uncrashed run says (the same events, in the same
 * order, with the same content), and the threads' usage still adds up to the
 * session's. The only trace of the crash is the one repeated model request.
 */
import type Anthropic from "@anthropic-ai/sdk";
import type { BetaManagedAgentsSessionEvent } from "@anthropic-ai/sdk/resources/beta/sessions/events";
import type { BetaManagedAgentsSessionThread } from "@anthropic-ai/sdk/resources/beta/sessions/threads/threads";
import { ManualScheduler, type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterEach, describe, expect, it } from "vitest";
import { type ChildServer, startServeProcess } from "../support/child-server.ts";
import { freePort } from "../support/ports.ts";
import { TEST_API_KEY } from "../support/server.ts";

const MODEL_KEY = "sk-scripted-threads-kill9";
const CHUNK_MS = 1000;
const send = (agent: string, message: string) => ({ type: "tool_use" as const, name: "send_thread_message", input: { agent, message } });

function script() {
  return [
    {
      match: { system_contains: "ROLE:lead", last_user_text_contains: "plan the trip" },
      response: {
        content: [send("researcher", "find flights"), send("writer", "draft the note")],
        usage: { input_tokens: 100, output_tokens: 10 },
      },
    },
    { match: { system_contains: "ROLE:lead", tool_result_for: "send_thread_message" }, response: "Waiting for my team." },
    {
      match: { system_contains: "ROLE:researcher", last_user_text_contains: "find flights" },
      // Held between chunks on the manual clock: the crash lands while this thread's model stream is open.
      delay: { chunk_ms: CHUNK_MS },
      response: {
        content: [{ type: "text" as const, text: "flights: 2 options" }],
        chunk_chars: 4,
        usage: { input_tokens: 30, output_tokens: 7 },
      },
    },
    {
      match: { system_contains: "ROLE:writer", last_user_text_contains: "draft the note" },
      response: { content: [{ type: "text" as const, text: "note drafted" }], usage: { input_tokens: 40, output_tokens: 9 } },
    },
    { match: { system_contains: "ROLE:lead", last_user_text_contains: "flights: 2 options" }, response: "Got the flights." },
    { match: { system_contains: "ROLE:lead", last_user_text_contains: "note drafted" }, response: "All done." },
  ];
}

type Event = BetaManagedAgentsSessionEvent;

async function allEvents(client: Anthropic, sessionId: string): Promise<Event[]> {
  const out: Event[] = [];
  for await (const e of client.beta.sessions.events.list(sessionId)) out.push(e);
  return out;
}

const saidAllDone = (e: Event) => e.type === "agent.message" && e.content.some((b) => b.type === "text" && b.text === "All done.");

/** Resolves once the coordinator's last reply and the session's idle after it are in the log (read first, then the live stream). */
async function finished(client: Anthropic, sessionId: string): Promise<void> {
  const stream = await client.beta.sessions.events.stream(sessionId);
  try {
    const done = (events: Event[]) => {
      const i = events.findIndex(saidAllDone);
      return i >= 0 && events.slice(i).some((e) => e.type === "session.status_idle");
    };
    const seen = await allEvents(client, sessionId);
    if (done(seen)) return;
    for await (const e of stream) {
      seen.push(e as Event);
      if (done(seen)) return;
    }
    throw new Error("the stream ended first");
  } finally {
    stream.controller.abort();
  }
}

/** What an event says, without what differs between two runs: ids, times (wall-clock `active_seconds`), which thread id a name has. */
function fingerprint(e: Event, threadNames: Map<string, string>): string {
  return JSON.stringify(e, (key, value) => {
    if (key === "id" || key === "processed_at" || key === "tool_use_id" || key === "model_request_start_id" || key === "active_seconds")
      return undefined;
    if (typeof value !== "string") return value;
    return value.replace(/sthr_[0-9a-z]+/g, (id) => `thread:${threadNames.get(id) ?? "?"}`);
  });
}

async function threadsOf(client: Anthropic, sessionId: string): Promise<BetaManagedAgentsSessionThread[]> {
  const out: BetaManagedAgentsSessionThread[] = [];
  for await (const th of client.beta.sessions.threads.list(sessionId)) out.push(th);
  return out;
}

describe.each(BACKENDS)("kill -9 mid-thread on %s", (dialect) => {
  let store: TestStorage | null = null;
  let server: ChildServer | null = null;
  let model: ScriptedModel | null = null;
  afterEach(async () => {
    await server?.kill9();
    await model?.close();
    await store?.cleanup();
    server = null;
    model = null;
    store = null;
  });

  it("recovers a subagent's turn without duplicated events, and every thread finishes", async () => {
    const clock = new ManualScheduler();
    const m = await startScriptedModel({ apiKey: MODEL_KEY, scheduler: clock, script: [...script(), ...script()] });
    model = m;
    const s = await openTestStorage(dialect);
    store = s;
    const port = await freePort();
    const start = async () => {
      server = await startServeProcess({
        apiKey: TEST_API_KEY,
        postgres: dialect === "postgres" ? s : null,
        dataDir: s.dataDir,
        port,
        env: {
          LOG_LEVEL: "silent",
          OPENMA_BRAIN: "on",
          OPENMA_MODEL_BASE_URL: m.url,
          OPENMA_MODEL_API_KEY: MODEL_KEY,
          // The shortest lease the server accepts: the restarted process reclaims the dead one's turn after it.
          OPENMA_EXECUTION_LEASE_TTL_MS: "3000",
          OPENMA_EXECUTION_POLL_MS: "200",
        },
      });
      return server.client;
    };
    let client = await start();

    const researcher = await client.beta.agents.create({ name: "researcher", model: "claude-test-1", system: "ROLE:researcher" });
    const writer = await client.beta.agents.create({ name: "writer", model: "claude-test-1", system: "ROLE:writer" });
    const lead = await client.beta.agents.create({
      name: "lead",
      model: "claude-test-1",
      system: "ROLE:lead",
      multiagent: { type: "coordinator", agents: [researcher.id, writer.id] },
    });
    const env = await client.beta.environments.create({ name: "none", config: { type: "none" } as never });
    const message = { type: "user.message" as const, content: [{ type: "text" as const, text: "plan the trip" }] };

    /** Runs one session to the end, driving the model's clock whenever a scripted delay sleeps. */
    const drive = async (sessionId: string) => {
      let over = false;
      const done = finished(client, sessionId).finally(() => {
        over = true;
      });
      while (!over) {
        await Promise.race([clock.untilSleeping(), done]);
        if (clock.pending.length) clock.advance(CHUNK_MS);
      }
      await done;
    };

    // The reference: the same session without a crash.
    const reference = await client.beta.sessions.create({ agent: lead.id, environment_id: env.id });
    await client.beta.sessions.events.send(reference.id, { events: [message] });
    await drive(reference.id);
    const requestsBefore = m.requests.length;

    // The crash: the researcher's model stream is open, held between two chunks.
    const session = await client.beta.sessions.create({ agent: lead.id, environment_id: env.id });
    await client.beta.sessions.events.send(session.id, { events: [message] });
    await clock.untilSleeping();
    const inFlight = m.requests.slice(requestsBefore);
    expect(inFlight.map((r) => r.outcome)).toEqual(["completed", "completed", "pending"]);
    const researcherThread = (await threadsOf(client, session.id)).find(
      (th) => th.agent.type === "agent" && th.agent.name === "researcher",
    );
    if (!researcherThread) throw new Error("the researcher's thread was not created before the crash");
    const beforeCrash = await allEvents(client, session.id);
    const last = beforeCrash.at(-1);
    expect(last?.type).toBe("span.model_request_start");
    expect(beforeCrash.some((e) => e.type === "session.thread_status_running" && e.session_thread_id === researcherThread.id)).toBe(true);
    await server?.kill9();
    server = null;
    await m.idle(); // the model saw the connection die
    expect(m.requests.slice(requestsBefore).map((r) => r.outcome)).toEqual(["completed", "completed", "aborted"]);

    client = await start();
    await drive(session.id);

    // Every request of the reference run, plus the one the crash cut.
    const after = m.requests.slice(requestsBefore);
    expect(after.map((r) => r.outcome)).toEqual(["completed", "completed", "aborted", ...Array(requestsBefore - 2).fill("completed")]);

    const events = await allEvents(client, session.id);
    expect(new Set(events.map((e) => e.id)).size).toBe(events.length);
    const rows = await s.storage.db
      .selectFrom("session_events")
      .select(["seq", "id"])
      .where("session_id", "=", session.id)
      .orderBy("seq")
      .execute();
    expect(rows.map((r) => Number(r.seq))).toEqual(rows.map((_, i) => i + 1));
    expect(rows.map((r) => r.id)).toEqual(events.map((e) => e.id));

    const refEvents = await allEvents(client, reference.id);
    const names = async (sessionId: string) =>
      new Map((await threadsOf(client, sessionId)).map((th) => [th.id, th.agent.type === "agent" ? th.agent.name : "?"]));
    const refNames = await names(reference.id);
    const crashNames = await names(session.id);
    expect(events.map((e) => fingerprint(e, crashNames))).toEqual(refEvents.map((e) => fingerprint(e, refNames)));

    // Each thread finished and is idle; per-thread usage adds up to the session's.
    const threads = await threadsOf(client, session.id);
    expect(threads.map((th) => [th.agent.type === "agent" && th.agent.name, th.status])).toEqual([
      ["lead", "idle"],
      ["researcher", "idle"],
      ["writer", "idle"],
    ]);
    const usage = (await client.beta.sessions.retrieve(session.id)).usage;
    for (const k of ["input_tokens", "output_tokens", "cache_read_input_tokens"] as const) {
      expect(
        threads.reduce((n, th) => n + (th.usage?.[k] ?? 0), 0),
        k,
      ).toBe(usage[k]);
    }
    expect(threads.reduce((n, th) => n + (th.usage?.cache_creation?.ephemeral_5m_input_tokens ?? 0), 0)).toBe(
      usage.cache_creation?.ephemeral_5m_input_tokens,
    );
    expect(threads.find((th) => th.id === researcherThread.id)?.usage).toMatchObject({ input_tokens: 30, output_tokens: 7 });
    // The same tokens as the uncrashed run (the cut request left no usage behind); active seconds are wall-clock time.
    const tokens = ({ active_seconds: _, ...rest }: typeof usage) => rest;
    expect(tokens(usage)).toEqual(tokens((await client.beta.sessions.retrieve(reference.id)).usage));
    // Two server starts and two multi-thread sessions: bounded at 4 minutes for a loaded CI host, not the default minute.
  }, 240_000);
});
