/**
 * SSE fan-out curve, on each storage backend (issue 16 target 2): for 10, 100
 * and 1,000 SSE subscribers on one session, the p50/p99 append→delivery
 * latency and the server's memory per subscriber.
 *
 * Run: npm run bench:events-fanout [-- <events per count, 100> <counts, 10,100,1000>]
 *
 * How it is measured, per backend and subscriber count N, on a new session:
 *   - The server runs in this process (startTestServer, as bench/events-sse.ts
 *     does), and events are appended here through the event log
 *     (appendEvents, the path the API and the agent loop take).
 *   - The N subscribers run in a separate child process (this file with
 *     `--subscribers`), each its own HTTP connection to
 *     `/v1/sessions/{id}/events/stream`. Keeping the clients out of this
 *     process is what isolates the server's memory: the sockets, parsers and
 *     buffers of the clients are not in this heap or RSS.
 *   - Memory: gc (exposed through v8 flags) twice, heapUsed and RSS of this
 *     process; the child opens N streams and says "ready" once every response
 *     has its headers; 500 ms to settle, gc twice again, measure again. The
 *     delta over N is the server's cost per subscriber (heap is the JS
 *     objects; RSS also counts native socket buffers, and it does not shrink
 *     when freed, which is why counts go in increasing order).
 *   - Latency: events appended one at a time, paced (every 5 ms, or N x 0.03
 *     ms when longer: 30 ms at 1,000, so one client process can parse the
 *     1,000 copies of one event before the next is due and the curve shows
 *     the server, not a client backlog). Send time is taken just before the
 *     append, arrival time when the child parses the event; both as
 *     performance.timeOrigin + performance.now(), so the two processes share
 *     a clock. The latency is arrival - send, over every (subscriber, event),
 *     after 5 unmeasured warm-up events.
 * Postgres server processes (one backend connection per pool slot, no
 * per-subscriber state there: the change bus is one LISTEN per process) are
 * not in these figures.
 */
import { spawn } from "node:child_process";
import http from "node:http";
import { cpus } from "node:os";
import { fileURLToPath } from "node:url";
import v8 from "node:v8";
import vm from "node:vm";
import { type Dialect, newId } from "@openma/storage";
import { BACKENDS } from "@openma/storage/testing";
import { appendEvents } from "../packages/api/src/event-log.ts";
import { startTestServer, type TestServer } from "../test/support/server.ts";
import { reportTarget } from "./report.ts";

const SUBSCRIBER_MODE = "--subscribers";
const WARMUP_EVENTS = 5;
const epochNow = () => performance.timeOrigin + performance.now();

// ---- the child: N subscribers, arrival times per event ----------------------------------------------------

/** Opens `count` streams; prints "ready" once all have headers, then one JSON line of arrival times per stream. */
async function runSubscribers(url: string, count: number, events: number): Promise<void> {
  const apiKey = process.env.BENCH_API_KEY ?? "";
  let connected = 0;
  const all = Array.from(
    { length: count },
    () =>
      new Promise<number[]>((resolve, reject) => {
        const arrivals: number[] = new Array(events).fill(Number.NaN);
        let got = 0;
        let buffer = "";
        const req = http.get(url, { agent: false, headers: { authorization: `Bearer ${apiKey}`, accept: "text/event-stream" } }, (res) => {
          if (res.statusCode !== 200) return reject(new Error(`stream answered ${res.statusCode}`));
          if (++connected === count) process.stdout.write("ready\n");
          res.setEncoding("utf8");
          res.on("data", (chunk: string) => {
            const at = epochNow();
            buffer += chunk;
            let end = buffer.indexOf("\n");
            while (end >= 0) {
              const line = buffer.slice(0, end);
              buffer = buffer.slice(end + 1);
              end = buffer.indexOf("\n");
              if (!line.startsWith("data:")) continue;
              const event = JSON.parse(line.slice(5)) as { type?: string; content?: Array<{ text?: string }> };
              if (event.type !== "user.message") continue;
              const index = Number(event.content?.[0]?.text);
              if (Number.isInteger(index) && index >= 0 && index < events && Number.isNaN(arrivals[index])) {
                arrivals[index] = at;
                if (++got === events) {
                  req.destroy();
                  resolve(arrivals);
                }
              }
            }
          });
          res.on("error", () => {});
        });
        req.on("error", (err) => {
          if (got < events) reject(err);
        });
      }),
  );
  const results = await Promise.all(all);
  process.stdout.write(`${JSON.stringify(results)}\n`);
}

// ---- the parent: server, appends, memory ------------------------------------------------------------------

v8.setFlagsFromString("--expose-gc");
const gc = vm.runInNewContext("gc") as () => void;

function memory(): { heap: number; rss: number } {
  gc();
  gc();
  const m = process.memoryUsage();
  return { heap: m.heapUsed, rss: m.rss };
}

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
}

const draft = (text: string) => ({ type: "user.message", fields: { content: [{ type: "text", text }] }, dedupeKey: null });

async function newSession(t: TestServer): Promise<string> {
  const agent = await t.client.beta.agents.create({ name: "bench", model: "claude-sonnet-4-5" });
  const env = await t.client.beta.environments.create({ name: "bench" });
  return (await t.client.beta.sessions.create({ agent: agent.id, environment_id: env.id })).id;
}

interface Point {
  subscribers: number;
  paceMs: number;
  p50: number;
  p99: number;
  max: number;
  heapPerSub: number;
  rssPerSub: number;
}

/** The child process of `count` subscribers: resolves `ready` once all are connected, `arrivals` when it ends. */
function startSubscribers(t: TestServer, sessionId: string, count: number, events: number) {
  const child = spawn(
    process.execPath,
    [
      ...process.execArgv,
      fileURLToPath(import.meta.url),
      SUBSCRIBER_MODE,
      `${t.baseURL}/v1/sessions/${sessionId}/events/stream`,
      String(count),
      String(events),
    ],
    // The key goes through the environment, never argv.
    { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, BENCH_API_KEY: t.apiKey } },
  );
  let out = "";
  let onReady: () => void = () => {};
  const ready = new Promise<void>((resolve) => {
    onReady = resolve;
  });
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (chunk: string) => {
    out += chunk;
    if (out.startsWith("ready\n")) onReady();
  });
  const arrivals = new Promise<number[][]>((resolve, reject) => {
    child.once("close", (code) => {
      if (code !== 0) return reject(new Error(`the subscriber process exited ${code}`));
      const last = out.trim().split("\n").at(-1) ?? "[]";
      resolve(JSON.parse(last) as number[][]);
    });
  });
  // A child that dies before "ready" must not leave the caller waiting for it.
  return { ready: Promise.race([ready, arrivals.then(() => {})]), arrivals };
}

async function point(t: TestServer, count: number, events: number): Promise<Point> {
  const deps = { storage: t.store.storage, clock: { now: () => Date.now() }, ids: newId };
  const sessionId = await newSession(t);
  const before = memory();
  const subs = startSubscribers(t, sessionId, count, events);
  await subs.ready;
  await new Promise((resolve) => setTimeout(resolve, 500));
  const after = memory();
  const paceMs = Math.max(5, count * 0.03);
  // Warm-up, not measured (the subscribers skip events whose text is not an index): the first wake-ups of new streams.
  for (let i = 0; i < WARMUP_EVENTS; i++) {
    await appendEvents(deps, sessionId, [draft(`warm-up ${i}`)]);
    await new Promise((resolve) => setTimeout(resolve, paceMs));
  }
  const sentAt: number[] = [];
  for (let i = 0; i < events; i++) {
    sentAt.push(epochNow());
    await appendEvents(deps, sessionId, [draft(String(i))]);
    await new Promise((resolve) => setTimeout(resolve, paceMs));
  }
  const arrivals = await subs.arrivals;
  if (arrivals.length !== count) throw new Error(`${arrivals.length} of ${count} subscribers reported`);
  const latencies = arrivals.flatMap((a) => a.map((at, i) => at - (sentAt[i] as number)));
  if (latencies.some(Number.isNaN)) throw new Error("an event was not delivered to every subscriber");
  latencies.sort((a, b) => a - b);
  return {
    subscribers: count,
    paceMs,
    p50: quantile(latencies, 0.5),
    p99: quantile(latencies, 0.99),
    max: latencies.at(-1) ?? Number.NaN,
    heapPerSub: (after.heap - before.heap) / count,
    rssPerSub: (after.rss - before.rss) / count,
  };
}

async function main(): Promise<void> {
  const events = Math.max(10, Number(process.argv[2] ?? 100) || 100);
  const counts = (process.argv[3] ?? "10,100,1000").split(",").map(Number);
  const cpu = cpus()[0]?.model ?? "unknown CPU";
  console.log(
    `# SSE fan-out curve  (${new Date().toISOString()}, node ${process.version}, ${cpus().length} CPUs (${cpu}), ${events} events per point)\n`,
  );
  console.log(
    "| backend | subscribers | append pace | delivery p50 / p99 / max ms | server heap per subscriber | server RSS per subscriber |",
  );
  console.log("|---|---|---|---|---|---|");
  const kb = (bytes: number) => `${(bytes / 1024).toFixed(1)} KiB`;
  const points: Array<Point & { dialect: Dialect }> = [];
  for (const dialect of BACKENDS) {
    const t = await startTestServer(dialect);
    try {
      for (const count of counts) {
        const p = await point(t, count, events);
        points.push({ ...p, dialect });
        console.log(
          `| ${dialect} | ${count} | ${p.paceMs.toFixed(0)} ms | ${p.p50.toFixed(2)} / ${p.p99.toFixed(2)} / ${p.max.toFixed(2)} | ${kb(p.heapPerSub)} | ${kb(p.rssPerSub)} |`,
        );
      }
    } finally {
      await t.close();
    }
  }
  for (const p of points) {
    if (p.subscribers === 100)
      reportTarget({
        bench: "events-fanout",
        metric: `SSE append -> delivery p99, 100 subscribers (${p.dialect})`,
        target: "< 10 ms",
        measured: p.p99,
        unit: "ms",
        pass: p.p99 < 10,
      });
    if (p.subscribers === Math.max(...counts) && p.subscribers !== 100)
      reportTarget({
        bench: "events-fanout",
        metric: `SSE append -> delivery p99, ${p.subscribers} subscribers (${p.dialect})`,
        target: "none (recorded)",
        measured: p.p99,
        unit: "ms",
        pass: true,
      });
    if (p.subscribers === Math.max(...counts))
      reportTarget({
        bench: "events-fanout",
        metric: `server heap per SSE subscriber, ${p.subscribers} subscribers (${p.dialect})`,
        target: "none (recorded)",
        measured: p.heapPerSub / 1024,
        unit: "KiB",
        pass: true,
      });
  }
}

if (process.argv[2] === SUBSCRIBER_MODE) {
  await runSubscribers(process.argv[3] as string, Number(process.argv[4]), Number(process.argv[5]));
} else {
  await main();
}
