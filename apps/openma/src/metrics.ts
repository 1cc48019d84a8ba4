/**
 * Metrics of `openma serve`: the Prometheus registry, what it reads from the
 * database at scrape time, and the decorators that time the ports the
 * packages already take (model, sandbox backend, execution worker events), so
 * no package imports a metrics library.
 */
import type { WorkerEvent } from "@openma/execution";
import { queueStats } from "@openma/execution/queue-stats";
import type { ModelPort } from "@openma/harness";
import type { RuntimeRunResult } from "@openma/host";
import { type Histogram, type Labels, type OpenmaMetrics, openmaMetrics, secondsSince } from "@openma/metrics";
import { type PrometheusMetrics, prometheusMetrics } from "@openma/metrics/prometheus";
import type { RuntimeHostInstruments } from "@openma/runtime-host";
import type { Clock, Storage } from "@openma/storage";
import type { Tracer } from "@opentelemetry/api";
import type { SandboxBackend } from "./sandbox.ts";
import { inSpan } from "./spans.ts";

export interface ServeMetrics {
  metrics: OpenmaMetrics;
  prometheus: PrometheusMetrics;
}

export function serveMetrics(storage: Storage, clock: Clock): ServeMetrics {
  const prometheus = prometheusMetrics();
  const metrics = openmaMetrics(prometheus.port, {
    executionQueue: () => queueStats(storage, clock.now()),
    orphans: async () => {
      const rows = await storage.db
        .selectFrom("runtime_orphans")
        .select((eb) => ["state", eb.fn.countAll<number>().as("n")])
        .groupBy("state")
        .execute();
      const counts: Record<string, number> = { pending: 0, reaped: 0, dead_letter: 0 };
      for (const row of rows) counts[row.state] = Number(row.n);
      return counts;
    },
  });
  return { metrics, prometheus };
}

/**
 * Times each model request and counts its tokens; the outcome label is the
 * failure type, never its message. With a tracer, each request is a span
 * (`openma.model.request`) of the turn's trace.
 */
export function meteredModel(model: ModelPort, metrics: OpenmaMetrics, tracer?: Tracer): ModelPort {
  return {
    retry: model.retry,
    async send(request, signal, observer) {
      const started = performance.now();
      // The observer carries the stream to `event_deltas` previews: dropping it would silence them.
      const send = () => model.send(request, signal, observer);
      const attempt = tracer
        ? await inSpan(tracer, "openma.model.request", { "gen_ai.request.model": request.model }, async (span) => {
            const a = await send();
            span.setAttribute("openma.outcome", a.type === "failure" ? a.failure.errorType : a.type);
            if (a.type === "response") {
              // The OpenTelemetry GenAI names, as the SDK's own span (turned off in harness/model.ts) would carry them.
              span.setAttribute("gen_ai.usage.input_tokens", a.response.usage.input_tokens);
              span.setAttribute("gen_ai.usage.output_tokens", a.response.usage.output_tokens);
            }
            return a;
          })
        : await send();
      const outcome = attempt.type === "failure" ? attempt.failure.errorType : attempt.type;
      metrics.modelRequestDuration.observe({ outcome }, secondsSince(started));
      if (attempt.type === "response") {
        const u = attempt.response.usage;
        metrics.modelTokens.inc({ type: "input" }, u.input_tokens);
        metrics.modelTokens.inc({ type: "output" }, u.output_tokens);
        metrics.modelTokens.inc({ type: "cache_read" }, u.cache_read_input_tokens);
        metrics.modelTokens.inc({ type: "cache_creation" }, u.cache_creation_input_tokens);
      }
      return attempt;
    },
  };
}

/**
 * A view of `target` with some methods replaced. A Proxy keeps the other
 * methods of a driver's class instance working (bound to the instance),
 * which spreading the object would lose.
 */
function withMethods<T extends object>(target: T, overrides: Partial<T>): T {
  return new Proxy(target, {
    get(t, key, receiver) {
      if (Object.hasOwn(overrides, key)) return overrides[key as keyof T];
      const value = Reflect.get(t, key, receiver);
      return typeof value === "function" ? value.bind(t) : value;
    },
  });
}

/**
 * Runs `run` and observes its duration with the outcome its result names
 * (`threw` when it throws); with a tracer, inside a span named `spanName`.
 */
async function timed<T extends { type: string }>(
  histogram: Histogram,
  labels: Labels,
  run: () => Promise<T>,
  traced?: { tracer: Tracer; spanName: string },
): Promise<T> {
  const started = performance.now();
  let outcome = "threw";
  try {
    const result = traced ? await inSpan(traced.tracer, traced.spanName, { ...labels }, run) : await run();
    outcome = result.type;
    return result;
  } finally {
    histogram.observe({ ...labels, outcome }, secondsSince(started));
  }
}

/** Times a backend's acquire and terminate and its tool sandboxes' exec and spawn, labelled by driver; spans `openma.sandbox.<operation>`. */
export function meteredBackend(backend: SandboxBackend, metrics: OpenmaMetrics, tracer?: Tracer): SandboxBackend {
  const h = metrics.sandboxOperationDuration;
  const driver = backend.name;
  const span = (operation: string) => (tracer ? { tracer, spanName: `openma.sandbox.${operation}` } : undefined);
  const sandbox = withMethods(backend.sandbox, {
    acquire: (input) => timed(h, { driver, operation: "acquire" }, () => backend.sandbox.acquire(input), span("acquire")),
    terminate: (input) => timed(h, { driver, operation: "terminate" }, () => backend.sandbox.terminate(input), span("terminate")),
  });
  return {
    ...backend,
    sandbox,
    toolSandbox(lease) {
      const port = backend.toolSandbox(lease);
      const overrides: Partial<typeof port> = {
        exec: (input) => timed(h, { driver, operation: "exec" }, () => port.exec(input), span("exec")),
      };
      // The persistent bash shell is one long-lived process per sandbox (spawnProcess), not an exec per call.
      const spawn = port.spawnProcess?.bind(port);
      if (spawn) overrides.spawnProcess = (input) => timed(h, { driver, operation: "spawn" }, () => spawn(input), span("spawn"));
      return withMethods(port, overrides);
    },
  };
}

/** Turns running, attempts and their durations, lease renewals and losses, from the execution worker's events. */
export function workerMetrics(metrics: OpenmaMetrics): (event: WorkerEvent) => void {
  // At most `concurrency` entries: one per claimed attempt, removed when it ends.
  const started = new Map<string, number>();
  return (event) => {
    switch (event.type) {
      case "claimed":
        started.set(event.sessionId, performance.now());
        metrics.turnsRunning.inc();
        return;
      case "renewal":
        metrics.leaseRenewals.inc({ lease: "execution", result: event.result });
        return;
      case "ended": {
        const since = started.get(event.sessionId);
        started.delete(event.sessionId);
        if (since !== undefined) metrics.turnsRunning.dec();
        const result = event.result.type;
        metrics.turnAttempts.inc({ result });
        if (since !== undefined) metrics.turnDuration.observe({ result }, secondsSince(since));
        if (result === "lease_lost") metrics.leaseLosses.inc({ lease: "execution" });
      }
    }
  };
}

/**
 * The runtime host's ports, metered: fence renewals (a thrown renewal is the
 * controller's `transient`), workspace checkpoint and restore durations, and
 * the bytes its storage moves through the blob store.
 */
export function runtimeHostMetrics(
  storage: Storage,
  metrics: OpenmaMetrics,
): { storage: Storage; instrument: RuntimeHostInstruments; onResult: (ticket: unknown, result: RuntimeRunResult) => void } {
  const blobs = withMethods(storage.blobs, {
    put: async (key, data) => {
      await storage.blobs.put(key, data);
      metrics.runtimeBlobBytes.inc({ direction: "upload" }, data.length);
    },
    get: async (key) => {
      const data = await storage.blobs.get(key);
      if (data) metrics.runtimeBlobBytes.inc({ direction: "download" }, data.length);
      return data;
    },
    ...(storage.blobs.readInto && {
      readInto: async (key: string, into: Buffer) => {
        const data = await storage.blobs.readInto!(key, into);
        if (data) metrics.runtimeBlobBytes.inc({ direction: "download" }, data.length);
        return data;
      },
    }),
  });
  const h = metrics.workspacePersistenceDuration;
  return {
    storage: withMethods(storage, { blobs } as Partial<Storage>),
    instrument: {
      fences: (port) =>
        withMethods(port, {
          renew: async (input) => {
            try {
              const result = await port.renew(input);
              metrics.leaseRenewals.inc({ lease: "runtime_fence", result: result.type === "renewed" ? "renewed" : "lost" });
              return result;
            } catch (err) {
              metrics.leaseRenewals.inc({ lease: "runtime_fence", result: "transient" });
              throw err;
            }
          },
        }),
      workspace: (port) =>
        withMethods(port, {
          checkpoint: (input) => timed(h, { operation: "checkpoint" }, () => port.checkpoint(input)),
          // A materialize with a candidate restores it; one without starts an empty workspace.
          materialize: (input) => timed(h, { operation: input.candidate ? "restore" : "create" }, () => port.materialize(input)),
        }),
    },
    onResult: (_ticket, result) => {
      metrics.runtimeRuns.inc({ result: result.type });
      if (result.type === "lease_lost") metrics.leaseLosses.inc({ lease: "runtime_fence" });
    },
  };
}
