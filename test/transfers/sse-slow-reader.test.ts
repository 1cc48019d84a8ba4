/**
 * A session event stream whose reader stops reading (docs/transfers.md), served
 * by a real `openma serve` child process under the memory probe: while 10,000
 * events of 16 KiB (about 160 MiB of stream) are appended to the shared
 * Postgres log by another process (so the child's memory is the stream's, not
 * that of parsing the appends), the reader reads nothing; the server holds at most its send buffer for that connection, then
 * closes the stream, and its memory grows by less than the event-stream budget
 * (a server keeping the backlog for the reader would hold all 160 MiB, twice:
 * as strings and encoded). The reader, resuming with `Last-Event-ID`, receives
 * every event exactly once and in order.
 *
 * No clock is involved: the reader stays stalled until every event has been
 * appended (a condition), and the close is driven by bytes queued, not by time.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { type IncomingMessage, request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { newId, systemClock } from "@openma/storage";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { appendEvents, type EventLogDeps } from "../../packages/api/src/event-log.ts";
import { type ChildServer, startChildServer } from "../support/child-server.ts";
import { growthOver, type MemoryPeaks, memoryPeaks, memoryProbeEnv } from "../support/memory-peaks.ts";
import { startTestServer, type TestServer } from "../support/server.ts";

const MiB = 1024 * 1024;
const EVENTS = 10_000;
const PER_APPEND = 250;
const SEND_BUFFER = 1 * MiB;
const TEXT = "x".repeat(16 * 1024);
/** Events the stream reads from the log at a time (docs/transfers.md#memory-budget). */
const LOG_BATCH = 200;
/**
 * The budget docs/transfers.md states for one event stream (its send buffer plus one batch read from the log)
 * plus the process-wide ~64 MiB V8 lets finished buffers reach before collecting them: about 68 MiB, against a
 * backlog of 160 MiB.
 */
const BOUND = SEND_BUFFER + LOG_BATCH * TEXT.length + 64 * MiB;

/** Opens the stream (optionally resuming) and hands back the paused response. */
function openStream(srv: ChildServer, sessionId: string, lastEventId?: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = request(new URL(`/v1/sessions/${sessionId}/events/stream`, srv.baseURL), {
      agent: false,
      headers: {
        "x-api-key": srv.apiKey,
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

/** Reads `res` until it ends or `want` ids have arrived in all; returns whether the server ended it. */
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

describe("a session event stream whose reader stops reading, in a child server", () => {
  /** Where the events are appended (in this process), on the Postgres storage the child serves. */
  let t: TestServer;
  let deps: EventLogDeps;
  /** The server the reader streams from, under the memory probe (its brain off: no turn runs). */
  let srv: ChildServer;
  let probeDir: string;
  let probe: ReturnType<typeof memoryPeaks>;

  beforeAll(async () => {
    t = await startTestServer("postgres");
    deps = { storage: t.store.storage, clock: systemClock, ids: newId };
    probeDir = await mkdtemp(join(tmpdir(), "openma-sse-probe-"));
    const probeFile = join(probeDir, "peaks.json");
    probe = memoryPeaks(probeFile, () => srv.pid);
    srv = await startChildServer(t.store, t.apiKey, {
      OPENMA_SSE_SEND_BUFFER_BYTES: String(SEND_BUFFER),
      ...memoryProbeEnv(probeFile),
    });
    await probe.peaks();
  });
  afterAll(async () => {
    await srv?.close();
    await t?.close();
    if (probeDir) await rm(probeDir, { recursive: true, force: true });
  });

  async function expectWithinBound(base: MemoryPeaks, what: string): Promise<void> {
    const growth = growthOver(base, await probe.peaks());
    expect(growth.rss, `${what}: RSS growth ${(growth.rss / MiB).toFixed(1)} MiB`).toBeLessThan(BOUND);
    expect(growth.heap, `${what}: heap + off-heap growth ${(growth.heap / MiB).toFixed(1)} MiB`).toBeLessThan(BOUND);
  }

  it("holds a bounded buffer, closes the stream, and loses nothing on resuming with Last-Event-ID", async () => {
    const agent = await t.client.beta.agents.create({ name: "a", model: "claude-sonnet-4-5" });
    const env = await t.client.beta.environments.create({ name: "e" });
    const session = await t.client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    const append = async (sessionId: string, from: number) => {
      const drafts = Array.from({ length: PER_APPEND }, (_, j) => ({
        type: "user.message",
        fields: { content: [{ type: "text", text: `${from + j} ${TEXT}` }] },
        dedupeKey: null,
      }));
      return (await appendEvents(deps, sessionId, drafts)).events.map((e) => e.id);
    };
    const base = await probe.reset();
    const stalled = await openStream(srv, session.id);
    const appended: string[] = [];
    for (let i = 0; i < EVENTS; i += PER_APPEND) appended.push(...(await append(session.id, i)));
    expect(appended).toHaveLength(EVENTS);
    await expectWithinBound(base, "appending while the reader is stalled");

    // What reached the socket before the server gave up on this reader, then the end of the stream.
    const received: string[] = [];
    const first = await collectIds(stalled, received, EVENTS);
    expect(first.ended).toBe(true);
    expect(received.length).toBeGreaterThan(0);
    expect(received.length).toBeLessThan(EVENTS);

    // Resuming after the last event it saw, the reader catches up: every event once, in order.
    while (received.length < EVENTS) {
      const resumed = await openStream(srv, session.id, received.at(-1));
      await collectIds(resumed, received, EVENTS);
    }
    expect(received).toEqual(appended);
  }, 300_000);
});
