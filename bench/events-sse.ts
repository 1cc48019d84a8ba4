/**
 * Event log + SSE benchmark, on each storage backend:
 *   1. throughput: events appended through the event log and delivered to an
 *      SSE client per second, against raw single-row inserts per second into
 *      the same database (the floor of any durable append);
 *   2. latency: p50/p99 append→delivery with 100 SSE subscribers on one
 *      session, against the p50/p99 of one raw insert.
 * Run: npx tsx bench/events-sse.ts [events=2000] [subscribers=100]
 */
import { cpus } from "node:os";
import { Stream } from "@anthropic-ai/sdk/core/streaming";
import type { Dialect } from "@openma/storage";
import { BACKENDS } from "@openma/storage/testing";
import { sql } from "kysely";
import { appendEvents } from "../packages/api/src/event-log.ts";
import { startTestServer, type TestServer } from "../test/support/server.ts";

const EVENTS = Number(process.argv[2] ?? 2000);
const SUBSCRIBERS = Number(process.argv[3] ?? 100);
const LATENCY_EVENTS = 200;

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
}

interface Subscriber {
  /** Resolves when `count` events arrived; records each arrival time. */
  done: Promise<void>;
  arrivals: Array<{ text: string; at: number }>;
  close(): void;
}

async function subscribe(t: TestServer, sessionId: string, count: number): Promise<Subscriber> {
  const controller = new AbortController();
  const response = await fetch(`${t.baseURL}/v1/sessions/${sessionId}/events/stream`, {
    headers: { authorization: `Bearer ${t.apiKey}`, accept: "application/json" },
    signal: controller.signal,
  });
  const arrivals: Subscriber["arrivals"] = [];
  const done = (async () => {
    for await (const message of Stream.rawEvents(response, controller)) {
      const event = JSON.parse(message.data) as { content?: Array<{ text: string }> };
      arrivals.push({ text: event.content?.[0]?.text ?? "", at: performance.now() });
      if (arrivals.length >= count) return;
    }
  })();
  return { done, arrivals, close: () => controller.abort() };
}

const draft = (text: string) => ({ type: "user.message", fields: { content: [{ type: "text", text }] }, dedupeKey: null });

async function rawInserts(t: TestServer, n: number): Promise<{ perSec: number; latencies: number[] }> {
  const { db } = t.store.storage;
  await sql`create table bench_raw (id text primary key, session_id text not null, seq bigint not null, body text not null)`.execute(db);
  const latencies: number[] = [];
  const started = performance.now();
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await db.transaction().execute(async (trx) => {
      await sql`insert into bench_raw (id, session_id, seq, body) values (${`raw_${i}`}, ${"s"}, ${i}, ${JSON.stringify(draft(String(i)).fields)})`.execute(
        trx,
      );
    });
    latencies.push(performance.now() - t0);
  }
  return { perSec: n / ((performance.now() - started) / 1000), latencies: latencies.sort((a, b) => a - b) };
}

async function newSession(t: TestServer): Promise<string> {
  const agent = await t.client.beta.agents.create({ name: "bench", model: "claude-sonnet-4-5" });
  const env = await t.client.beta.environments.create({ name: "bench" });
  return (await t.client.beta.sessions.create({ agent: agent.id, environment_id: env.id })).id;
}

async function benchBackend(dialect: Dialect) {
  const t = await startTestServer(dialect);
  const deps = { storage: t.store.storage, clock: { now: () => Date.now() }, ids: (await import("@openma/storage")).newId };
  try {
    const raw = await rawInserts(t, EVENTS);

    // Throughput: one subscriber, one producer appending as fast as it can.
    const s1 = await newSession(t);
    const sub = await subscribe(t, s1, EVENTS);
    const started = performance.now();
    for (let i = 0; i < EVENTS; i++) await appendEvents(deps, s1, [draft(String(i))]);
    const appendedAt = performance.now();
    await sub.done;
    const deliveredPerSec = EVENTS / ((performance.now() - started) / 1000);
    const appendPerSec = EVENTS / ((appendedAt - started) / 1000);
    sub.close();
    const order = sub.arrivals.map((a) => Number(a.text));
    if (order.some((v, i) => v !== i)) throw new Error("events were delivered out of order or with gaps");

    // Latency: many subscribers, paced appends (one every 5 ms) so the queue never builds up.
    const s2 = await newSession(t);
    const subs = await Promise.all(Array.from({ length: SUBSCRIBERS }, () => subscribe(t, s2, LATENCY_EVENTS)));
    const sentAt = new Map<string, number>();
    for (let i = 0; i < LATENCY_EVENTS; i++) {
      sentAt.set(String(i), performance.now());
      await appendEvents(deps, s2, [draft(String(i))]);
      await new Promise((r) => setTimeout(r, 5));
    }
    await Promise.all(subs.map((s) => s.done));
    for (const s of subs) s.close();
    const latencies = subs.flatMap((s) => s.arrivals.map((a) => a.at - (sentAt.get(a.text) ?? Number.NaN))).sort((a, b) => a - b);
    return {
      dialect,
      rawPerSec: raw.perSec,
      appendPerSec,
      deliveredPerSec,
      rawP50: quantile(raw.latencies, 0.5),
      rawP99: quantile(raw.latencies, 0.99),
      p50: quantile(latencies, 0.5),
      p99: quantile(latencies, 0.99),
      max: latencies[latencies.length - 1] ?? Number.NaN,
      deliveries: latencies.length,
    };
  } finally {
    await t.close();
  }
}

const f = (n: number, digits = 0) => n.toFixed(digits);
console.log(`# events + SSE benchmark  (${new Date().toISOString()}, node ${process.version}, ${cpus().length} cpus)`);
console.log(`events=${EVENTS} subscribers=${SUBSCRIBERS} latency_events=${LATENCY_EVENTS}\n`);
console.log(
  "| backend | raw inserts/s | appends/s | appended+delivered over SSE/s | ratio vs raw | raw insert p50 / p99 ms | delivery p50 / p99 / max ms (100 subs) | p99 ratio vs raw p99 |",
);
console.log("|---|---|---|---|---|---|---|---|");
for (const dialect of BACKENDS) {
  const r = await benchBackend(dialect);
  console.log(
    `| ${r.dialect} | ${f(r.rawPerSec)} | ${f(r.appendPerSec)} | ${f(r.deliveredPerSec)} | ${f(r.deliveredPerSec / r.rawPerSec, 2)} | ${f(r.rawP50, 2)} / ${f(r.rawP99, 2)} | ${f(r.p50, 2)} / ${f(r.p99, 2)} / ${f(r.max, 2)} (${r.deliveries} deliveries) | ${f(r.p99 / r.rawP99, 1)} |`,
  );
}
