/**
 * What operations cost a request: four `openma serve` processes (SQLite, brain
 * on, the scripted model answering at once), two with Prometheus metrics and
 * OpenTelemetry tracing on (every span exported to an OTLP receiver in this
 * process, /metrics scraped every 100 iterations), two with both off. The
 * same requests go to all, interleaved, so load on the machine hits them
 * alike: create a session, send it a message (its turn runs and is traced),
 * read the session back. Prints p50/p95/mean per request kind and the on/off
 * ratio of the two "on" servers' requests to the two "off" servers' (target
 * ≤ 1.05).
 *
 * Two servers a side because one process differs from an identical other by
 * several percent for a whole run on a shared machine (where it was placed,
 * what it was compiled into): the A/A ratios (the second "off" server to the
 * first, the second "on" to the first) say how far, and are this run's noise
 * floor. Each server's own CPU time (utime + stime from /proc/<pid>/stat) per
 * iteration is printed too: other load on the machine moves it less than
 * latency.
 * Run: npx tsx bench/ops-overhead.ts [iterations=300]
 * With BENCH_CPU_PROF=<dir>, the servers run with `--cpu-prof` into that
 * directory, and the bench prints where "on" spends self time that "off" does
 * not (per iteration, by package and by function).
 */

import { mkdir, readdir } from "node:fs/promises";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { cpus } from "node:os";
import { join } from "node:path";
import { startScriptedModel } from "@openma/scripted-model";
import { type ChildServer, startServeProcess } from "../test/support/child-server.ts";
import { summarizeCpuProfile } from "./load-profile.ts";
import { readProcStat } from "./proc-stat.ts";
import { reportRatioAtMost } from "./report.ts";

const ITERATIONS = Number(process.argv[2] ?? 300);
const WARMUP = 20;
const MODEL_KEY = "sk-scripted-ops-bench";
const API_KEY = "sk-ant-api03-ops-bench-admin-key-0123456789";
const KINDS = ["create session", "send message", "retrieve session"] as const;

const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
type Mode = "off" | "on" | "off2" | "on2";
const MODES: readonly Mode[] = ["off", "on", "off2", "on2"];
const OFF: readonly Mode[] = ["off", "off2"];
const ON: readonly Mode[] = ["on", "on2"];
/** Each server's CPU time so far (user + system), in ms. */
const cpuMsOf = async (servers: Record<Mode, ChildServer>) =>
  Object.fromEntries(
    await Promise.all(MODES.map(async (m) => [m, ((await readProcStat(servers[m].pid))?.cpuSeconds ?? 0) * 1000])),
  ) as Record<Mode, number>;

/** How many spans an OTLP/JSON export request carries. */
function spansIn(body: Buffer): number {
  const request = JSON.parse(body.toString("utf8")) as { resourceSpans?: { scopeSpans?: { spans?: unknown[] }[] }[] };
  return (request.resourceSpans ?? []).flatMap((r) => r.scopeSpans ?? []).reduce((n, s) => n + (s.spans?.length ?? 0), 0);
}

async function main(): Promise<void> {
  let exportRequests = 0;
  let exportedSpans = 0;
  const receiver = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      exportedSpans += spansIn(Buffer.concat(chunks));
      exportRequests++;
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  const otlp = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}`;
  const model = await startScriptedModel({ apiKey: MODEL_KEY, script: [{ response: "ok", times: 1_000_000 }] });
  const common = {
    LOG_LEVEL: "silent",
    OPENMA_BRAIN: "on",
    OPENMA_SANDBOX: "none",
    OPENMA_MODEL_BASE_URL: model.url,
    OPENMA_MODEL_API_KEY: MODEL_KEY,
  };
  const profileDir = process.env.BENCH_CPU_PROF;
  if (profileDir) {
    await mkdir(profileDir, { recursive: true });
    Object.assign(common, { NODE_OPTIONS: `--cpu-prof --cpu-prof-interval=250 --cpu-prof-dir=${profileDir}` });
  }
  const offEnv = { ...common, OPENMA_METRICS: "off" };
  const onEnv = { ...common, OPENMA_METRICS: "on", OTEL_EXPORTER_OTLP_ENDPOINT: otlp };
  const servers: Record<Mode, ChildServer> = {
    off: await startServeProcess({ apiKey: API_KEY, env: offEnv }),
    on: await startServeProcess({ apiKey: API_KEY, env: onEnv }),
    off2: await startServeProcess({ apiKey: API_KEY, env: offEnv }),
    on2: await startServeProcess({ apiKey: API_KEY, env: onEnv }),
  };
  let closed = false;
  try {
    const setup = async (s: ChildServer) => ({
      env: (await s.client.beta.environments.create({ name: "bench" })).id,
      agent: (await s.client.beta.agents.create({ name: "bench", model: "claude-test-1" })).id,
    });
    const ids = Object.fromEntries(await Promise.all(MODES.map(async (m) => [m, await setup(servers[m])]))) as Record<
      Mode,
      { env: string; agent: string }
    >;
    const samples = Object.fromEntries(MODES.map((m) => [m, new Map<string, number[]>()])) as Record<Mode, Map<string, number[]>>;
    const time = async <T>(mode: Mode, kind: string, run: () => Promise<T>): Promise<T> => {
      const t0 = performance.now();
      const result = await run();
      const list = samples[mode].get(kind) ?? [];
      list.push(performance.now() - t0);
      samples[mode].set(kind, list);
      return result;
    };
    const once = async (mode: Mode) => {
      const { client } = servers[mode];
      const session = await time(mode, "create session", () =>
        client.beta.sessions.create({ agent: ids[mode].agent, environment_id: ids[mode].env }),
      );
      await time(mode, "send message", () =>
        client.beta.sessions.events.send(session.id, { events: [{ type: "user.message", content: [{ type: "text", text: "hi" }] }] }),
      );
      await time(mode, "retrieve session", () => client.beta.sessions.retrieve(session.id));
    };
    // Warm-up, not measured.
    for (let i = 0; i < WARMUP; i++) for (const mode of MODES) await once(mode);
    for (const m of Object.values(samples)) m.clear();
    const cpuBefore = await cpuMsOf(servers);
    const measured = { fromUs: Number(process.hrtime.bigint() / 1000n), toUs: 0 };
    for (let i = 0; i < ITERATIONS; i++) {
      // Rotate which goes first, so none always follows another's turn.
      for (let j = 0; j < MODES.length; j++) await once(MODES[(i + j) % MODES.length] as Mode);
      if (i % 100 === 99)
        for (const m of ON)
          await fetch(`${servers[m].baseURL}/metrics`, { headers: { authorization: `Bearer ${API_KEY}` } }).then((r) => r.text());
    }
    measured.toUs = Number(process.hrtime.bigint() / 1000n);
    const cpuAfter = await cpuMsOf(servers);
    const cpuPerIteration = Object.fromEntries(MODES.map((m) => [m, (cpuAfter[m] - cpuBefore[m]) / ITERATIONS])) as Record<Mode, number>;
    console.log(`# operations overhead benchmark  (${new Date().toISOString()}, node ${process.version}, ${cpus().length} cpus)`);
    console.log(`${ITERATIONS} iterations per server; metrics + tracing on (2 servers) vs off (2 servers)`);
    console.log("request            | off p50 / p95 / mean (ms) | on p50 / p95 / mean (ms) | ratio p50 | ratio mean");
    const of = (modes: readonly Mode[], kind: string) => modes.flatMap((m) => samples[m].get(kind) ?? []);
    /** Per request kind, the mean latency of `a`'s requests over `b`'s; then the mean of those ratios. */
    const ratioOf = (a: readonly Mode[], b: readonly Mode[]) => mean(KINDS.map((k) => mean(of(a, k)) / mean(of(b, k))));
    for (const kind of KINDS) {
      const off = of(OFF, kind).sort((a, b) => a - b);
      const on = of(ON, kind).sort((a, b) => a - b);
      const r50 = quantile(on, 0.5) / quantile(off, 0.5);
      const rMean = mean(on) / mean(off);
      const f = (xs: number[]) => `${quantile(xs, 0.5).toFixed(2)} / ${quantile(xs, 0.95).toFixed(2)} / ${mean(xs).toFixed(2)}`;
      console.log(`${kind.padEnd(18)} | ${f(off).padEnd(25)} | ${f(on).padEnd(24)} | ${r50.toFixed(3).padEnd(9)} | ${rMean.toFixed(3)}`);
    }
    const overall = ratioOf(ON, OFF);
    console.log(`overall (mean of per-kind mean ratios): ${overall.toFixed(3)}  (target ≤ 1.05)`);
    console.log(
      `noise floor, same statistic: off2/off ${ratioOf(["off2"], ["off"]).toFixed(3)}, on2/on ${ratioOf(["on2"], ["on"]).toFixed(3)}; one server a side: on/off ${ratioOf(["on"], ["off"]).toFixed(3)}, on2/off2 ${ratioOf(["on2"], ["off2"]).toFixed(3)}`,
    );
    const cpu = (modes: readonly Mode[]) => mean(modes.map((m) => cpuPerIteration[m]));
    const f = (m: Mode) => cpuPerIteration[m].toFixed(2);
    console.log(
      `server CPU per iteration (ms): off ${f("off")} / ${f("off2")}, on ${f("on")} / ${f("on2")}; on/off ${(cpu(ON) / cpu(OFF)).toFixed(3)} (+${(cpu(ON) - cpu(OFF)).toFixed(2)} ms), A/A off2/off ${(cpuPerIteration.off2 / cpuPerIteration.off).toFixed(3)}, on2/on ${(cpuPerIteration.on2 / cpuPerIteration.on).toFixed(3)}`,
    );
    // Issue 19's target.
    reportRatioAtMost("ops-overhead", "request latency, metrics + tracing on vs off (mean of per-kind mean ratios)", overall, 1.05);
    for (const server of Object.values(servers)) await server.close();
    closed = true;
    // "on" exports every span (no sampling): its shutdown flushed the last batch.
    console.log(
      `spans exported over OTLP: ${exportedSpans} in ${exportRequests} requests, for ${ON.length * (ITERATIONS + WARMUP)} traced turns`,
    );
    if (profileDir) await compareProfiles(profileDir, servers, measured);
  } finally {
    if (!closed) for (const server of Object.values(servers)) await server.close();
    await model.close();
    receiver.close();
  }
}

/** Frames of the operations code itself: the SDKs and what calls them. */
const OPS_CODE =
  /@opentelemetry\/|prom-client|packages\/metrics\/|apps\/openma\/src\/(metrics|spans|tracing)\.ts|packages\/host\/src\/spans\.ts/;

/**
 * Where "on" spends its CPU, from the samples of the measured part alone, per
 * iteration: the self time of the operations code itself (zero in "off"),
 * and the self time "on" spends beyond "off" by package and by function,
 * beside "off2" minus "off" by package (how much such a difference moves
 * with nothing changed).
 */
async function compareProfiles(dir: string, servers: Record<Mode, ChildServer>, window: { fromUs: number; toUs: number }): Promise<void> {
  const files = await readdir(dir);
  const profileOf = async (m: Mode) => {
    const file = files.find((f) => f.includes(`.${servers[m].pid}.`) && f.endsWith(".cpuprofile"));
    if (!file) throw new Error(`no CPU profile of the ${m} server (pid ${servers[m].pid}) in ${dir}`);
    return summarizeCpuProfile(join(dir, file), 100_000, { origins: 100_000, window });
  };
  const [on, off, off2] = [await profileOf("on"), await profileOf("off"), await profileOf("off2")];
  const ms = (x: number) => (x / ITERATIONS).toFixed(3);
  console.log(`CPU profiles (${dir}), busy ms per iteration: off ${ms(off.busyMs)}, on ${ms(on.busyMs)}, off2 ${ms(off2.busyMs)}`);
  const direct = on.top.filter((r) => OPS_CODE.test(r.frame));
  console.log(`self time in the operations code of "on": ${ms(direct.reduce((n, r) => n + r.ms, 0))} ms per iteration; top:`);
  for (const r of direct.slice(0, 12)) console.log(`  ${ms(r.ms).padStart(7)} ms  ${r.frame}`);
  const diff = (a: { frame: string; ms: number }[], b: { frame: string; ms: number }[], n: number) => {
    const base = new Map(b.map((r) => [r.frame, r.ms]));
    const rows = a.map((r) => ({ frame: r.frame, ms: r.ms, delta: r.ms - (base.get(r.frame) ?? 0) }));
    for (const r of rows.sort((x, y) => y.delta - x.delta).slice(0, n))
      console.log(`  ${ms(r.delta).padStart(7)} ms  (of ${ms(r.ms)})  ${r.frame}`);
  };
  console.log("self time on minus off, per iteration, by package:");
  diff(on.byOrigin, off.byOrigin, 10);
  console.log("self time off2 minus off (nothing changed), per iteration, by package:");
  diff(off2.byOrigin, off.byOrigin, 5);
  console.log("self time on minus off, per iteration, by function:");
  diff(on.top, off.top, 15);
}

await main();
