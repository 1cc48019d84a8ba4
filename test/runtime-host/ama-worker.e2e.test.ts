/**
 * The ama_worker lane end to end, on both local drivers: a runtime host
 * claims the Environment Work of a self-hosted environment, restores the
 * session's workspace into a fresh sandbox (bubblewrap, or a Docker
 * container) and starts the unmodified official EnvironmentWorker inside it
 * through `handleItem()`. The brain runs in the server against the scripted
 * model; the worker's tools run in the sandbox. Each turn boundary is
 * published under the fence; the second message gets a new claim, a new
 * generation and a fresh sandbox that sees the first turn's files (by bash
 * and by the worker's `glob`, which needs the sandbox's Node 24). At the
 * end the output manifest lists the deliverable with its sha256 and no
 * sandbox of the session is left. Each run's spans are the host's named
 * steps (an in-memory exporter stands for the collector), in the trace of
 * the API request that queued its Work: the server exports its spans
 * (tracing configured) to an in-process OTLP receiver, and each
 * `openma.host.run` is the child of one `openma.api.send_events`.
 *
 * With a warm pool (ADR 0032) the same two turns each run in a sandbox the
 * pool started before the turn's generation existed: the trace says so, the
 * restored files are there and writable, and once the host is closed
 * nothing of its pool is left.
 */
import { createHash } from "node:crypto";
import { hostname } from "node:os";
import { join } from "node:path";
import { silentLogger } from "@openma/api";
import { sqlRuntimePorts } from "@openma/host";
import { type RunningRuntimeHost, type RuntimeHostDriver, startRuntimeHost } from "@openma/runtime-host";
import { type ScriptedModel, startScriptedModel, type TurnInput } from "@openma/scripted-model";
import { systemClock } from "@openma/storage";
import { context, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type OtlpReceiver, otlpAttr, startOtlpReceiver } from "../support/otlp-receiver.ts";
import { startTestServer, type TestServer } from "../support/server.ts";
import { until } from "../support/until.ts";
import { allEvents, createSelfHostedEnvironment, endTurnIdle, resultText, sendAndWait } from "../support/worker-e2e.ts";
import { acquiredRuntimes, activeOutputs, bwrapLeftovers, dockerHostLeftovers, dockerLeftovers, ResultQueue } from "./support.ts";

const consoleLogger = {
  info: (o: object, m: string) => console.log("INFO", m, JSON.stringify(o)),
  warn: (o: object, m: string) => console.log("WARN", m, JSON.stringify(o)),
  error: (o: object, m: string) => console.log("ERROR", m, JSON.stringify(o)),
};

const MODEL_KEY = "sk-scripted-ama-worker";
const USAGE = { input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 };
const REPORT = "quarterly report\n";

const SCRIPT: TurnInput[] = [
  {
    label: "write",
    match: { last_user_text_contains: "FIRST" },
    response: {
      content: [
        {
          type: "tool_use",
          name: "bash",
          input: {
            command: `echo one > /workspace/notes.txt && printf '${REPORT.replace("\n", "\\n")}' > /mnt/session/outputs/report.md && id -u && hostname && echo WROTE-OK`,
          },
        },
      ],
      usage: USAGE,
    },
  },
  {
    label: "first-done",
    match: { tool_result_contains: "WROTE-OK" },
    response: { content: [{ type: "text", text: "wrote" }], usage: USAGE },
  },
  {
    label: "read",
    match: { last_user_text_contains: "SECOND" },
    response: {
      content: [
        { type: "tool_use", name: "bash", input: { command: "cat /workspace/notes.txt && ls /mnt/session/outputs && echo READ-OK" } },
      ],
      usage: USAGE,
    },
  },
  {
    label: "glob",
    match: { tool_result_contains: "READ-OK" },
    response: { content: [{ type: "tool_use", name: "glob", input: { pattern: "**/*.txt" } }], usage: USAGE },
  },
  {
    label: "second-done",
    match: { tool_result_for: "glob" },
    response: { content: [{ type: "text", text: "read" }], usage: USAGE },
  },
];

// The runtime host runs in this process: its spans go to the globally registered provider, as under `openma runtime-host`.
const spans = new InMemorySpanExporter();
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }));

/** The step spans under each `openma.host.run` span of a session, run by run. */
function hostRuns(sessionId: string): string[][] {
  const finished = spans.getFinishedSpans();
  return finished
    .filter((s) => s.name === "openma.host.run" && s.attributes["openma.session_id"] === sessionId)
    .map((run) =>
      finished
        .filter((s) => s.parentSpanContext?.spanId === run.spanContext().spanId && s.spanContext().traceId === run.spanContext().traceId)
        .map((s) => s.name),
    );
}

const CASES: Array<[RuntimeHostDriver, "cold" | "warm"]> = [
  ["bubblewrap", "cold"],
  ["docker", "cold"],
  ["bubblewrap", "warm"],
  ["docker", "warm"],
];

describe.each(CASES)("the official worker inside a %s sandbox (ama_worker, %s)", (driver, start) => {
  let model: ScriptedModel;
  let t: TestServer;
  let rh: RunningRuntimeHost;
  let receiver: OtlpReceiver;
  const results = new ResultQueue();

  beforeAll(async () => {
    model = await startScriptedModel({ apiKey: MODEL_KEY, script: SCRIPT });
    receiver = await startOtlpReceiver();
    t = await startTestServer("sqlite", {
      OPENMA_BRAIN: "on",
      OPENMA_MODEL_BASE_URL: model.url,
      OPENMA_MODEL_API_KEY: MODEL_KEY,
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    });
  });
  afterAll(async () => {
    await rh?.close();
    await t?.close();
    await model?.close();
    await receiver?.close();
  });

  it("serves two turns in two fresh sandboxes, restoring the workspace and publishing the deliverable", async () => {
    const { client } = t;
    const env = await createSelfHostedEnvironment(client, `rh-${driver}-${start}`);
    rh = await startRuntimeHost({
      driver,
      apiUrl: t.baseURL,
      environmentId: env.id,
      environmentKey: env.key,
      storage: t.store.storage,
      stateDir: join(t.store.dataDir, "runtime-host"),
      logger: process.env.OPENMA_TEST_LOG ? consoleLogger : silentLogger,
      concurrency: 1,
      workerMaxIdleMs: 200,
      onResult: (_ticket, result) => results.push(result),
      ...(start === "warm" ? { warmPool: { target: 1 } } : {}),
    });
    const agent = await client.beta.agents.create({ name: "hands", model: "claude-test-1", tools: [{ type: "agent_toolset_20260401" }] });
    const session = await client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    // A warm run finds its pool full (the pool starts with the host; a turn sent at once would start cold).
    const poolReady = () => until(async () => start === "cold" || rh.warmPool()?.ready === 1, "a full warm pool");

    await poolReady();
    await sendAndWait(client, session.id, [{ type: "user.message", content: [{ type: "text", text: "FIRST" }] }], endTurnIdle);
    expect(await results.next()).toMatchObject({ type: "completed", generation: 1 });

    await poolReady();
    await sendAndWait(client, session.id, [{ type: "user.message", content: [{ type: "text", text: "SECOND" }] }], endTurnIdle);
    const second = await results.next();
    expect(second).toMatchObject({ type: "completed", generation: 2 });

    const events = await allEvents(client, session.id);
    const texts = events.filter((e) => e.type === "user.tool_result").map(resultText);
    expect(texts).toHaveLength(3);
    // Ran isolated: bwrap maps the sandbox user to an unprivileged uid; Docker runs in its own container (own hostname).
    const [uid, host] = texts[0]?.split("\n") ?? [];
    if (driver === "bubblewrap") expect(uid).not.toBe("0");
    expect(host).not.toBe(hostname());
    // The second sandbox was fresh, yet /workspace held the first turn's file: restored from the publication.
    expect(texts[1]).toContain("one");
    // The worker's glob (Node's fs.glob, Node >= 22) works on the sandbox's Node: the restored file, by full path.
    expect(texts[2]).toBe("/workspace/notes.txt");
    expect(second.trace.find((s) => s.step === "materialize_workspace")?.status).toBe("ok");

    const scope = { environmentId: env.id, sessionId: session.id };
    const report = (await activeOutputs(t.store.storage, scope)).find((f) => f.path === "report.md");
    expect(report).toMatchObject({ size: REPORT.length, sha256: createHash("sha256").update(REPORT).digest("hex") });

    const { fences } = sqlRuntimePorts(t.store.storage.db, systemClock);
    expect((await fences.active({ scope, signal: AbortSignal.timeout(5000) }))?.generation).toBe(2);

    // Two runs, two traces, each with the host's steps as child spans.
    const runs = hostRuns(session.id);
    expect(runs).toHaveLength(2);
    for (const steps of runs)
      expect(steps).toEqual(
        expect.arrayContaining([
          "openma.host.materialize_workspace",
          "openma.host.run_harness",
          "openma.host.checkpoint_workspace",
          "openma.host.publish",
        ]),
      );

    const acquired = acquiredRuntimes(results.all);
    if (start === "warm") {
      // Both generations ran in pooled sandboxes, bound after their fence (the trace's order), never the same one.
      for (const result of results.all) {
        const trace = result.trace.map((s) => `${s.step}:${s.status}`);
        expect(trace.indexOf("acquire_fence:ok")).toBeLessThan(trace.indexOf("acquire_compute:ok"));
        expect(result.trace.filter((s) => s.step === "acquire_compute").map((s) => s.detail)).toEqual([expect.stringMatching(/^warm /)]);
      }
      expect(new Set(acquired).size).toBe(2);
      expect(rh.warmPool()).toMatchObject({ target: 1, claimed: 2 });
      await rh.close();
      if (driver === "docker") expect(await dockerHostLeftovers(rh.hostId)).toEqual([]);
      else expect(await bwrapLeftovers([join(t.store.dataDir, "runtime-host")])).toEqual([]);
    }
    if (driver === "docker") expect(await dockerLeftovers(session.id)).toEqual([]);
    else expect(await bwrapLeftovers(acquired)).toEqual([]);

    // Each run continues the trace of the request whose message queued its Work: the server's close
    // exports its spans (the requests'), the host's went to the in-memory exporter as they ended.
    await rh.close();
    await t.server.close();
    // The two messages' and the worker's own posts (tool results, agent events) of the session.
    const sends = receiver.spans
      .filter((s) => s.name === "openma.api.send_events" && otlpAttr(s, "openma.session_id") === session.id)
      .map((s) => `${s.traceId}/${s.spanId}`);
    const runParents = spans
      .getFinishedSpans()
      .filter((s) => s.name === "openma.host.run" && s.attributes["openma.session_id"] === session.id)
      .map((run) => `${run.spanContext().traceId}/${run.parentSpanContext?.spanId}`);
    expect(runParents).toHaveLength(2);
    expect(new Set(runParents).size).toBe(2);
    for (const parent of runParents) expect(sends).toContain(parent);
  });
});
