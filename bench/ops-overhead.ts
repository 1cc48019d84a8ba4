/**
 * What operations cost a request: two `openma serve` processes (SQLite, brain
 * on, the scripted model answering at once), one with Prometheus metrics and
 * OpenTelemetry tracing on (spans exported to an OTLP receiver in this
 * process, /metrics scraped every 100 requests), one with both off. The same
 * requests go to both, interleaved, so load on the machine hits both alike:
 * create a session, send it a message (its turn runs and is traced), read the
 * session back. Prints p50/p95/mean per request kind and the on/off ratio
 * (target ≤ 1.05).
 *
 * Two controls say how far to trust that ratio on a shared machine: a third
 * server, configured like "off", gets the same requests, and its ratio to
 * "off" (A/A) is the noise floor of this run; and each server's own CPU time
 * (utime + stime from /proc/<pid>/stat) per iteration, which other load on
 * the machine moves far less than latency.
 * Run: npx tsx bench/ops-overhead.ts [iterations=300]
 */

import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { cpus } from "node:os";
import { startScriptedModel } from "@openma/scripted-model";
import { type ChildServer, startServeProcess } from "../test/support/child-server.ts";
import { readProcStat } from "./proc-stat.ts";
import { reportRatioAtMost } from "./report.ts";

const ITERATIONS = Number(process.argv[2] ?? 300);
const MODEL_KEY = "sk-scripted-ops-bench";
const API_KEY = "sk-ant-api03-ops-bench-admin-key-0123456789";
const KINDS = ["create session", "send message", "retrieve session"] as const;

const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
type Mode = "off" | "on" | "control";
const MODES: readonly Mode[] = ["off", "on", "control"];
/** Each server's CPU time so far (user + system), in ms. */
const cpuMsOf = async (servers: Record<Mode, ChildServer>) =>
  Object.fromEntries(
    await Promise.all(MODES.map(async (m) => [m, ((await readProcStat(servers[m].pid))?.cpuSeconds ?? 0) * 1000])),
  ) as Record<Mode, number>;

async function main(): Promise<void> {
  let spans = 0;
  const receiver = createServer((req, res) => {
    req.on("data", () => {});
    req.on("end", () => {
      spans++;
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
  const servers: Record<Mode, ChildServer> = {
    off: await startServeProcess({ apiKey: API_KEY, env: { ...common, OPENMA_METRICS: "off" } }),
    control: await startServeProcess({ apiKey: API_KEY, env: { ...common, OPENMA_METRICS: "off" } }),
    on: await startServeProcess({ apiKey: API_KEY, env: { ...common, OPENMA_METRICS: "on", OTEL_EXPORTER_OTLP_ENDPOINT: otlp } }),
  };
  try {
    const setup = async (s: ChildServer) => ({
      env: (await s.client.beta.environments.create({ name: "bench" })).id,
      agent: (await s.client.beta.agents.create({ name: "bench", model: "claude-test-1" })).id,
    });
    const ids = { off: await setup(servers.off), on: await setup(servers.on), control: await setup(servers.control) };
    const samples: Record<Mode, Map<string, number[]>> = { off: new Map(), on: new Map(), control: new Map() };
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
    for (let i = 0; i < 20; i++) for (const mode of MODES) await once(mode);
    for (const m of Object.values(samples)) m.clear();
    const cpuBefore = await cpuMsOf(servers);
    for (let i = 0; i < ITERATIONS; i++) {
      // Rotate which goes first, so none always follows another's turn.
      for (let j = 0; j < MODES.length; j++) await once(MODES[(i + j) % MODES.length] as Mode);
      if (i % 100 === 99)
        await fetch(`${servers.on.baseURL}/metrics`, { headers: { authorization: `Bearer ${API_KEY}` } }).then((r) => r.text());
    }
    const cpuAfter = await cpuMsOf(servers);
    const cpuPerIteration = Object.fromEntries(MODES.map((m) => [m, (cpuAfter[m] - cpuBefore[m]) / ITERATIONS])) as Record<Mode, number>;
    console.log(`# operations overhead benchmark  (${new Date().toISOString()}, node ${process.version}, ${cpus().length} cpus)`);
    console.log(`${ITERATIONS} iterations per server; metrics + tracing on vs off; OTLP export requests received: ${spans}`);
    console.log("request            | off p50 / p95 / mean (ms) | on p50 / p95 / mean (ms) | ratio p50 | ratio mean");
    const ratios: number[] = [];
    const controlRatios: number[] = [];
    for (const kind of KINDS) {
      controlRatios.push(mean(samples.control.get(kind) ?? []) / mean(samples.off.get(kind) ?? []));
      const off = [...(samples.off.get(kind) ?? [])].sort((a, b) => a - b);
      const on = [...(samples.on.get(kind) ?? [])].sort((a, b) => a - b);
      const r50 = quantile(on, 0.5) / quantile(off, 0.5);
      const rMean = mean(on) / mean(off);
      ratios.push(rMean);
      const f = (xs: number[]) => `${quantile(xs, 0.5).toFixed(2)} / ${quantile(xs, 0.95).toFixed(2)} / ${mean(xs).toFixed(2)}`;
      console.log(`${kind.padEnd(18)} | ${f(off).padEnd(25)} | ${f(on).padEnd(24)} | ${r50.toFixed(3).padEnd(9)} | ${rMean.toFixed(3)}`);
    }
    console.log(`overall (mean of per-kind mean ratios): ${mean(ratios).toFixed(3)}  (target ≤ 1.05)`);
    console.log(`noise floor: a second "off" server vs "off", same statistic: ${mean(controlRatios).toFixed(3)}`);
    const f = (m: Mode) => cpuPerIteration[m].toFixed(2);
    console.log(
      `server CPU per iteration (ms): off ${f("off")}, on ${f("on")}, control ${f("control")}; on/off ${(cpuPerIteration.on / cpuPerIteration.off).toFixed(3)}, control/off ${(cpuPerIteration.control / cpuPerIteration.off).toFixed(3)}`,
    );
    // Issue 19's target.
    reportRatioAtMost("ops-overhead", "request latency, metrics + tracing on vs off (mean of per-kind mean ratios)", mean(ratios), 1.05);
  } finally {
    for (const server of Object.values(servers)) await server.close();
    await model.close();
    receiver.close();
  }
}

await main();
