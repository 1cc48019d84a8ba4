/**
 * What each part of metrics and tracing costs a lightly loaded server, one
 * part per fresh process, all at once (so load on the machine hits them
 * alike): every 150 ms (about how often each server of bench/ops-overhead.ts
 * gets an iteration) the process does one iteration's worth of that part and
 * allocates like a request would, and after 30 s prints its CPU time
 * (process.cpuUsage) per iteration. The baseline does the allocation and the
 * timer alone; each part's cost is its CPU per iteration minus the baseline's.
 *
 * Code that runs once every 150 ms runs cold (caches, branch predictors), so
 * these costs are far above what a hot loop of the same calls measures; they
 * are what the server pays.
 * Run: npx tsx bench/ops-cost-parts.ts [seconds=30]
 */
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { openmaMetrics } from "@openma/metrics";
import { prometheusMetrics } from "@openma/metrics/prometheus";
import { context, type Tracer } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { BasicTracerProvider, BatchSpanProcessor, type SpanExporter } from "@opentelemetry/sdk-trace-base";
import { inSpan } from "../apps/openma/src/spans.ts";
import { startTracing } from "../apps/openma/src/tracing.ts";

const PERIOD_MS = 150;
const PARTS = {
  baseline: "the timer and the allocation alone",
  "metrics ops": "one iteration's metric updates (3 requests, an append, a turn, a model request and its tokens), no default metrics",
  "default metrics": "prom-client's process metrics (event loop lag sampled every 100 ms, GC observer), no updates",
  spans: "the turn's two spans (openma.turn, openma.model.request), batched, exported nowhere",
  "spans + OTLP export": "the two spans exported as openma serve does (OTLP/HTTP JSON, batches every 5 s)",
  "spans + OTLP export every 30 s": "the same with the batch processor's delay at 30 s (OTEL_BSP_SCHEDULE_DELAY=30000)",
} as const;
type Part = keyof typeof PARTS;

let kept: unknown[] = [];
/** About the garbage an iteration's requests leave, so the GC observer has collections to observe. */
function allocate(): void {
  kept = [];
  for (let i = 0; i < 20_000; i++) kept.push({ i, s: `x${i}` });
}

/** The OTLP receiver, in the parent (its CPU is not the exporting process's). */
async function startReceiver(): Promise<{ url: string; close(): void }> {
  const server = createServer((req, res) => {
    req.resume();
    req.on("end", () => res.writeHead(200, { "content-type": "application/json" }).end("{}"));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`, close: () => server.close() };
}

function tracerWith(exporter: SpanExporter, scheduledDelayMillis: number): Tracer {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  const provider = new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(exporter, { scheduledDelayMillis })] });
  return provider.getTracer("openma");
}

function iterationOf(part: Part, otlpUrl: string): () => Promise<void> | void {
  switch (part) {
    case "baseline":
      return () => {};
    case "metrics ops": {
      const m = openmaMetrics(prometheusMetrics({ defaultMetrics: false }).port);
      return () => {
        for (const [method, route] of [
          ["POST", "/v1/sessions"],
          ["POST", "/v1/sessions/:session_id/events"],
          ["GET", "/v1/sessions/:session_id"],
        ] as const) {
          m.httpRequests.inc({ method, route, status: "200" });
          m.httpRequestDuration.observe({ method, route }, 0.008);
        }
        m.eventAppendDuration.observe({}, 0.002);
        m.turnsRunning.inc();
        m.modelRequestDuration.observe({ outcome: "response" }, 0.05);
        for (const type of ["input", "output", "cache_read", "cache_creation"]) m.modelTokens.inc({ type }, 3);
        m.turnsRunning.dec();
        m.turnAttempts.inc({ result: "ran" });
        m.turnDuration.observe({ result: "ran" }, 0.1);
      };
    }
    case "default metrics":
      prometheusMetrics();
      return () => {};
    case "spans":
      return turnSpans(tracerWith({ export: (_spans, done) => done({ code: 0 }), shutdown: async () => {} }, 5_000));
    case "spans + OTLP export":
      return turnSpans(startTracing(otlpUrl).tracer);
    case "spans + OTLP export every 30 s":
      return turnSpans(tracerWith(new OTLPTraceExporter({ url: otlpUrl }), 30_000));
  }
}

/** A turn's spans as spans.ts and metrics.ts make them. */
function turnSpans(tracer: Tracer): () => Promise<void> {
  return async () => {
    await inSpan(tracer, "openma.turn", { "openma.session_id": "sesn_011CZkZfTmLk9fB6c1PNaLhV" }, async (turn) => {
      await inSpan(tracer, "openma.model.request", { "gen_ai.request.model": "claude-test-1" }, async (span) => {
        await Promise.resolve();
        span.setAttribute("openma.outcome", "response");
        span.setAttribute("gen_ai.usage.input_tokens", 17);
        span.setAttribute("gen_ai.usage.output_tokens", 1);
      });
      turn.setAttribute("openma.turn.outcome", "idle");
    });
  };
}

/** In a child: runs one part, prints its CPU ms per iteration. */
async function runPart(part: Part, seconds: number, otlpUrl: string): Promise<void> {
  const iteration = iterationOf(part, otlpUrl);
  const tick = async () => {
    allocate();
    await iteration();
    await new Promise((resolve) => setTimeout(resolve, PERIOD_MS));
  };
  // Two seconds of warm-up, not measured.
  for (const end = Date.now() + 2_000; Date.now() < end; ) await tick();
  const before = process.cpuUsage();
  let n = 0;
  for (const end = Date.now() + seconds * 1000; Date.now() < end; n++) await tick();
  const used = process.cpuUsage(before);
  console.log(JSON.stringify({ part, msPerIteration: (used.user + used.system) / 1000 / n, iterations: n }));
  process.exit(0);
}

async function main(): Promise<void> {
  const seconds = Number(process.argv[2] ?? 30);
  const self = fileURLToPath(import.meta.url);
  const receiver = await startReceiver();
  const results = await Promise.all(
    (Object.keys(PARTS) as Part[]).map(
      (part) =>
        new Promise<{ part: Part; msPerIteration: number; iterations: number }>((resolve, reject) => {
          const child = spawn(process.execPath, ["--import", "tsx", self, "--part", part, String(seconds), receiver.url], {
            stdio: ["ignore", "pipe", "inherit"],
          });
          let out = "";
          child.stdout.on("data", (chunk: Buffer) => {
            out += chunk.toString();
          });
          child.on("exit", (code) => (code === 0 ? resolve(JSON.parse(out)) : reject(new Error(`${part} exited ${code}`))));
        }),
    ),
  );
  receiver.close();
  const base = results.find((r) => r.part === "baseline")?.msPerIteration ?? Number.NaN;
  console.log(`# cost of each operations part, one iteration every ${PERIOD_MS} ms for ${seconds} s  (${new Date().toISOString()})`);
  console.log("part                            | CPU ms / iteration | minus baseline | what");
  for (const r of results)
    console.log(
      `${r.part.padEnd(31)} | ${r.msPerIteration.toFixed(3).padEnd(18)} | ${(r.msPerIteration - base).toFixed(3).padEnd(14)} | ${PARTS[r.part]}`,
    );
}

if (process.argv[2] === "--part") await runPart(process.argv[3] as Part, Number(process.argv[4]), process.argv[5] ?? "");
else await main();
