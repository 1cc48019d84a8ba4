/**
 * First tool use, on each storage backend: time from `POST user.message` to
 * the first `agent.tool_use` arriving on an SSE client (the brain in the
 * server wakes on the message, rebuilds context from the log, streams the
 * model's answer and appends the tool use), against the scripted model's own
 * latency measured in the same run: time to the first `tool_use` content
 * block when the same kind of request goes to the scripted model directly
 * through the SDK's stream. Runs alternate so both see the same machine load.
 *
 * The session is on a `self_hosted` environment with no worker attached, so
 * the turn stops at the tool use (no tool runs) and every run starts clean.
 *
 * Run: npx tsx bench/first-tool-use.ts [runs=50]   (npm run bench:first-tool-use)
 */
import { cpus, loadavg } from "node:os";
import Anthropic from "@anthropic-ai/sdk";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import type { Dialect } from "@openma/storage";
import { startTestServer, type TestServer } from "../test/support/server.ts";
import { backends } from "./backends.ts";
import { reportTarget } from "./report.ts";

const RUNS = Math.max(1, Math.min(10_000, Number(process.argv[2] ?? 50) || 50));
const WARMUP = 3;
const MODEL_KEY = "sk-scripted-bench";
/** Issue 16's targets: the loop may add this much to the model's own p50. */
const ADDED_P50_TARGET_MS: Record<Dialect, number> = { sqlite: 10, postgres: 15 };
const TOOL_USE = { type: "tool_use" as const, name: "bash", input: { command: "echo hi" } };

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
}

/** Milliseconds from sending a user message to the first `agent.tool_use` on an already-open SSE stream. */
async function openmaOnce(t: TestServer, env: string, agent: string): Promise<number> {
  const session = await t.client.beta.sessions.create({ agent, environment_id: env });
  const stream = await t.client.beta.sessions.events.stream(session.id);
  try {
    const started = performance.now();
    await t.client.beta.sessions.events.send(session.id, {
      events: [{ type: "user.message", content: [{ type: "text", text: "run a tool" }] }],
    });
    for await (const event of stream) if (event.type === "agent.tool_use") return performance.now() - started;
    throw new Error("the stream ended before agent.tool_use");
  } finally {
    stream.controller.abort();
  }
}

/** Milliseconds from starting a streamed Messages request to the first tool_use content block. */
async function modelOnce(client: Anthropic): Promise<number> {
  const started = performance.now();
  const stream = client.messages.stream({
    model: "claude-test-1",
    max_tokens: 1024,
    messages: [{ role: "user", content: "run a tool" }],
    tools: [{ name: "bash", input_schema: { type: "object", properties: { command: { type: "string" } } } }],
  });
  try {
    for await (const event of stream) {
      if (event.type === "content_block_start" && event.content_block.type === "tool_use") return performance.now() - started;
    }
    throw new Error("the stream ended before a tool_use block");
  } finally {
    stream.abort();
  }
}

interface Row {
  dialect: Dialect;
  openma: number[];
  model: number[];
}

async function benchBackend(dialect: Dialect, model: ScriptedModel): Promise<Row> {
  const t = await startTestServer(dialect, { OPENMA_BRAIN: "on", OPENMA_MODEL_BASE_URL: model.url, OPENMA_MODEL_API_KEY: MODEL_KEY });
  try {
    const direct = new Anthropic({ baseURL: model.url, apiKey: MODEL_KEY, maxRetries: 0 });
    const env = (await t.client.beta.environments.create({ name: "bench", config: { type: "self_hosted" } } as never)).id;
    const agent = (
      await t.client.beta.agents.create({ name: "bench", model: "claude-test-1", tools: [{ type: "agent_toolset_20260401" }] })
    ).id;
    const row: Row = { dialect, openma: [], model: [] };
    for (let i = 0; i < WARMUP + RUNS; i++) {
      const o = await openmaOnce(t, env, agent);
      const m = await modelOnce(direct);
      if (i >= WARMUP) {
        row.openma.push(o);
        row.model.push(m);
      }
    }
    return row;
  } finally {
    await t.close();
  }
}

function summary(xs: number[]): { p50: number; p95: number } {
  const sorted = [...xs].sort((a, b) => a - b);
  return { p50: quantile(sorted, 0.5), p95: quantile(sorted, 0.95) };
}

/** The 1/5/15-minute load averages: wall-clock latencies here move with them. */
const load = () =>
  loadavg()
    .map((l) => l.toFixed(2))
    .join(" / ");

async function main(): Promise<void> {
  const loadAtStart = load();
  const model = await startScriptedModel({
    apiKey: MODEL_KEY,
    script: [{ response: { content: [TOOL_USE], usage: { input_tokens: 50, output_tokens: 10 } }, times: 1_000_000 }],
  });
  const rows: Row[] = [];
  try {
    for (const dialect of backends()) rows.push(await benchBackend(dialect, model));
  } finally {
    await model.close();
  }
  const cpu = cpus()[0]?.model ?? "unknown CPU";
  console.log(
    `First tool use: ${RUNS} runs per backend (after ${WARMUP} warm-up), ${cpus().length} CPUs (${cpu}), Node ${process.version}, load average ${loadAtStart} at start, ${load()} at end\n`,
  );
  console.log("| Backend | OpenMA p50 | OpenMA p95 | Scripted model p50 | Scripted model p95 | Ratio p50 | Ratio p95 | Added p50 |");
  console.log("|---|---|---|---|---|---|---|---|");
  for (const r of rows) {
    const o = summary(r.openma);
    const m = summary(r.model);
    const f = (x: number) => `${x.toFixed(2)} ms`;
    console.log(
      `| ${r.dialect} | ${f(o.p50)} | ${f(o.p95)} | ${f(m.p50)} | ${f(m.p95)} | ${(o.p50 / m.p50).toFixed(1)}x | ${(o.p95 / m.p95).toFixed(1)}x | ${f(o.p50 - m.p50)} |`,
    );
  }
  for (const r of rows) {
    const added = summary(r.openma).p50 - summary(r.model).p50;
    const max = ADDED_P50_TARGET_MS[r.dialect];
    reportTarget({
      bench: "first-tool-use",
      metric: `user.message → first agent.tool_use, p50 added to the scripted model's (${r.dialect})`,
      target: `<= ${max} ms`,
      measured: Number(added.toFixed(2)),
      unit: "ms",
      pass: added <= max,
    });
  }
}

main().catch((err: Error) => {
  console.error(err);
  process.exit(1);
});
