/**
 * Metrics of `openma serve`: the Prometheus registry, what it reads from the
 * database at scrape time, and the decorators that time the ports the
 * packages already take (model, sandbox backend, execution worker events), so
 * no package imports a metrics library.
 */
import type { WorkerEvent } from "@openma/execution";
import { queueStats } from "@openma/execution/queue-stats";
import type { ModelPort } from "@openma/harness";
import { type OpenmaMetrics, openmaMetrics, secondsSince } from "@openma/metrics";
import { type PrometheusMetrics, prometheusMetrics } from "@openma/metrics/prometheus";
import type { Clock, Storage } from "@openma/storage";
import type { SandboxBackend } from "./sandbox.ts";

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

/** Times each model request and counts its tokens; the outcome label is the failure type, never its message. */
export function meteredModel(model: ModelPort, metrics: OpenmaMetrics): ModelPort {
  return {
    retry: model.retry,
    async send(request, signal) {
      const started = performance.now();
      const attempt = await model.send(request, signal);
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

/** Times a backend's acquire and terminate and its tool sandboxes' exec, labelled by driver. */
export function meteredBackend(backend: SandboxBackend, metrics: OpenmaMetrics): SandboxBackend {
  const driver = backend.name;
  const timed = async <T extends { type: string }>(operation: string, run: () => Promise<T>): Promise<T> => {
    const started = performance.now();
    let outcome = "threw";
    try {
      const result = await run();
      outcome = result.type;
      return result;
    } finally {
      metrics.sandboxOperationDuration.observe({ driver, operation, outcome }, secondsSince(started));
    }
  };
  // A Proxy keeps the driver's class methods (and `this`) intact; only two calls are timed.
  const sandbox = new Proxy(backend.sandbox, {
    get(target, key, receiver) {
      if (key === "acquire") return (input: Parameters<typeof target.acquire>[0]) => timed("acquire", () => target.acquire(input));
      if (key === "terminate") return (input: Parameters<typeof target.terminate>[0]) => timed("terminate", () => target.terminate(input));
      const value = Reflect.get(target, key, receiver);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return {
    ...backend,
    sandbox,
    toolSandbox(lease) {
      const port = backend.toolSandbox(lease);
      return new Proxy(port, {
        get(target, key, receiver) {
          if (key === "exec") return (input: Parameters<typeof target.exec>[0]) => timed("exec", () => target.exec(input));
          const value = Reflect.get(target, key, receiver);
          return typeof value === "function" ? value.bind(target) : value;
        },
      });
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
