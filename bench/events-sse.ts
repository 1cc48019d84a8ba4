/**
 * Event log + SSE benchmark, on each storage backend:
 *   1. throughput: events appended through the event log and delivered to an
 *      SSE client per second, against raw single-row inserts per second into
 *      the same database (the floor of any durable append); the two run in
 *      alternating blocks so both see the same machine load;
 *   2. latency: p50/p99 append→delivery with 100 SSE subscribers on one
 *      session, against the p50/p99 of one raw insert.
 * Run: npx tsx bench/events-sse.ts [events=2000] [subscribers=100]
 */
import { cpus, loadavg } from "node:os";
import { Stream } from "@anthropic-ai/sdk/core/streaming";
import type { Dialect } from "@openma/storage";
import { sql } from "kysely";
import { appendEvents } from "../packages/api/src/event-log.ts";
import { startTestServer, type TestServer } from "../test/support/server.ts";
import { backends } from "./backends.ts";
import { reportRatioAtLeast, reportTarget } from "./report.ts";

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
  /** Resolves once `n` events arrived. */
  reached(n: number): Promise<void>;
  close(): void;
}

async function subscribe(t: TestServer, sessionId: string, count: number): Promise<Subscriber> {
  const controller = new AbortController();
  const response = await fetch(`${t.baseURL}/v1/sessions/${sessionId}/events/stream`, {
    headers: { authorization: `Bearer ${t.apiKey}`, accept: "application/json" },
    signal: controller.signal,
  });
  const arrivals: Subscriber["arrivals"] = [];
  const waiters: Array<{ n: number; resolve: () => void }> = [];
  const done = (async () => {
    for await (const message of Stream.rawEvents(response, controller)) {
      const event = JSON.parse(message.data) as { content?: Array<{ text: string }> };
      arrivals.push({ text: event.content?.[0]?.text ?? "", at: performance.now() });
      for (const w of waiters.filter((w) => w.n <= arrivals.length)) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve();
      }
      if (arrivals.length >= count) return;
    }
  })();
  const reached = (n: number) => (arrivals.length >= n ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ n, resolve })));
  return { done, arrivals, reached, close: () => controller.abort() };
}

const draft = (text: string) => ({ type: "user.message", fields: { content: [{ type: "text", text }] }, dedupeKey: null });

/** `n` raw single-row inserts from `from` on, each in its own transaction; returns each one's latency. */
async function rawInserts(t: TestServer, from: number, n: number): Promise<number[]> {
  const { db } = t.store.storage;
  const latencies: number[] = [];
  for (let i = from; i < from + n; i++) {
    const t0 = performance.now();
    await db.transaction().execute(async (trx) => {
      await sql`insert into bench_raw (id, session_id, seq, body) values (${`raw_${i}`}, ${"s"}, ${i}, ${JSON.stringify(draft(String(i)).fields)})`.execute(
        trx,
      );
    });
    latencies.push(performance.now() - t0);
  }
  return latencies;
}

/** Raw inserts and log appends in alternating blocks of this many. */
const BLOCK = 100;

async function newSession(t: TestServer): Promise<string> {
  const agent = await t.client.beta.agents.create({ name: "bench", model: "claude-sonnet-4-5" });
  const env = await t.client.beta.environments.create({ name: "bench" });
  return (await t.client.beta.sessions.create({ agent: agent.id, environment_id: env.id })).id;
}

async function benchBackend(dialect: Dialect) {
  const t = await startTestServer(dialect);
  const deps = { storage: t.store.storage, clock: { now: () => Date.now() }, ids: (await import("@openma/storage")).newId };
  try {
    await sql`create table bench_raw (id text primary key, session_id text not null, seq bigint not null, body text not null)`.execute(
      t.store.storage.db,
    );
    // Throughput: one subscriber, one producer appending as fast as it can; each block of appends is
    // timed until its last event reached the subscriber, and alternates with a block of raw inserts.
    const s1 = await newSession(t);
    const sub = await subscribe(t, s1, EVENTS);
    const rawLatencies: number[] = [];
    let rawMs = 0;
    let appendMs = 0;
    let deliveredMs = 0;
    for (let from = 0; from < EVENTS; from += BLOCK) {
      const n = Math.min(BLOCK, EVENTS - from);
      const rawStarted = performance.now();
      rawLatencies.push(...(await rawInserts(t, from, n)));
      rawMs += performance.now() - rawStarted;
      const started = performance.now();
      for (let i = from; i < from + n; i++) await appendEvents(deps, s1, [draft(String(i))]);
      appendMs += performance.now() - started;
      await sub.reached(from + n);
      deliveredMs += performance.now() - started;
    }
    await sub.done;
    const raw = { perSec: EVENTS / (rawMs / 1000), latencies: rawLatencies.sort((a, b) => a - b) };
    const deliveredPerSec = EVENTS / (deliveredMs / 1000);
    const appendPerSec = EVENTS / (appendMs / 1000);
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
// Wall-clock figures here move with the machine's load (the same-run ratios less so): say what it was.
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(" / ");
console.log(
  `# events + SSE benchmark  (${new Date().toISOString()}, node ${process.version}, ${cpus().length} cpus, load average ${load()})`,
);
console.log(`events=${EVENTS} subscribers=${SUBSCRIBERS} latency_events=${LATENCY_EVENTS}\n`);
console.log(
  "| backend | raw inserts/s | appends/s | appended+delivered over SSE/s | ratio vs raw | raw insert p50 / p99 ms | delivery p50 / p99 / max ms (100 subs) | p99 ratio vs raw p99 |",
);
console.log("|---|---|---|---|---|---|---|---|");
const results: Array<Awaited<ReturnType<typeof benchBackend>>> = [];
for (const dialect of backends()) {
  const r = await benchBackend(dialect);
  console.log(
    `| ${r.dialect} | ${f(r.rawPerSec)} | ${f(r.appendPerSec)} | ${f(r.deliveredPerSec)} | ${f(r.deliveredPerSec / r.rawPerSec, 2)} | ${f(r.rawP50, 2)} / ${f(r.rawP99, 2)} | ${f(r.p50, 2)} / ${f(r.p99, 2)} / ${f(r.max, 2)} (${r.deliveries} deliveries) | ${f(r.p99 / r.rawP99, 1)} |`,
  );
  results.push(r);
}
console.log(`\nload average at the end: ${load()}`);
for (const r of results) {
  const ratio = Number((r.deliveredPerSec / r.rawPerSec).toFixed(2));
  reportRatioAtLeast("events-sse", `appends delivered over SSE vs raw single-row inserts (${r.dialect})`, ratio, 0.5);
  reportTarget({
    bench: "events-sse",
    metric: `append→delivery p99, ${SUBSCRIBERS} subscribers (${r.dialect})`,
    target: "< 10 ms",
    measured: Number(r.p99.toFixed(2)),
    unit: "ms",
    pass: r.p99 < 10,
  });
}
