/**
 * Every OpenMA metric, named in one place. Instrumented code reaches these
 * through `OpenmaMetrics` (built on any `MetricsPort`), so names, help texts,
 * label sets and buckets cannot drift between call sites.
 */
import { type Counter, type Gauge, type Histogram, type MetricsPort, noopMetrics, type Sample } from "./port.ts";

/** Latency buckets in seconds: 5 ms to 2 minutes (model requests and sandbox starts are slow). */
const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120] as const;
/** Turns run for minutes. */
const TURN_BUCKETS = [0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800] as const;

/** What the server reads from its database at scrape time. */
export interface ScrapeSources {
  /** Sessions in the execution queue by state, and the age of the oldest pending request and running claim. */
  executionQueue?: () => Promise<ExecutionQueueStats>;
  /** Runtime orphan records by state (pending, reaped, dead_letter). */
  orphans?: () => Promise<Readonly<Record<string, number>>>;
}

export interface ExecutionQueueStats {
  byState: Readonly<Record<string, number>>;
  /** Seconds since the oldest pending session asked for a turn (0 when none waits). */
  oldestPendingAgeSeconds: number;
  /** Seconds since the oldest running claim was taken (0 when none runs). */
  oldestClaimAgeSeconds: number;
}

export interface OpenmaMetrics {
  httpRequests: Counter;
  httpRequestDuration: Histogram;
  sseSubscribers: Gauge;
  eventAppendDuration: Histogram;
  turnsRunning: Gauge;
  turnAttempts: Counter;
  turnDuration: Histogram;
  modelRequestDuration: Histogram;
  modelTokens: Counter;
  sandboxOperationDuration: Histogram;
  leaseRenewals: Counter;
  leaseLosses: Counter;
  runtimeRuns: Counter;
  runtimeBlobBytes: Counter;
  workspacePersistenceDuration: Histogram;
}

export function openmaMetrics(port: MetricsPort = noopMetrics, sources: ScrapeSources = {}): OpenmaMetrics {
  const queue = sources.executionQueue;
  if (queue) {
    // One query per scrape feeds the three queue gauges.
    let last: Promise<ExecutionQueueStats> | null = null;
    const read = () => {
      last ??= queue().finally(() => {
        last = null;
      });
      return last;
    };
    port.gauge({
      name: "openma_execution_queue_sessions",
      help: "Sessions in the execution queue by state (pending: waiting for a brain turn; running: claimed)",
      labelNames: ["state"],
      collect: async () => Object.entries((await read()).byState).map(([state, value]) => ({ labels: { state }, value })),
    });
    port.gauge({
      name: "openma_execution_oldest_pending_age_seconds",
      help: "Age of the oldest pending turn request (0 when none waits)",
      collect: async () => [{ labels: {}, value: (await read()).oldestPendingAgeSeconds }],
    });
    port.gauge({
      name: "openma_execution_oldest_claim_age_seconds",
      help: "Age of the oldest running execution claim (0 when none runs)",
      collect: async () => [{ labels: {}, value: (await read()).oldestClaimAgeSeconds }],
    });
  }
  const orphans = sources.orphans;
  if (orphans) {
    port.gauge({
      name: "openma_runtime_orphans",
      help: "Runtime orphan records by state (dead_letter: given up, needs an operator)",
      labelNames: ["state"],
      collect: async (): Promise<Sample[]> => Object.entries(await orphans()).map(([state, value]) => ({ labels: { state }, value })),
    });
  }
  return {
    httpRequests: port.counter({
      name: "openma_http_requests_total",
      help: "HTTP requests by method, route pattern and status code",
      labelNames: ["method", "route", "status"],
    }),
    httpRequestDuration: port.histogram({
      name: "openma_http_request_duration_seconds",
      help: "HTTP request latency (to the response head; SSE streams end later) by method and route pattern",
      labelNames: ["method", "route"],
      buckets: LATENCY_BUCKETS,
    }),
    sseSubscribers: port.gauge({ name: "openma_sse_subscribers", help: "Open session event streams" }),
    eventAppendDuration: port.histogram({
      name: "openma_event_append_duration_seconds",
      help: "Latency of appending client events to a session log (one transaction)",
      buckets: LATENCY_BUCKETS,
    }),
    turnsRunning: port.gauge({ name: "openma_turns_running", help: "Brain turns running in this process" }),
    turnAttempts: port.counter({
      name: "openma_turn_attempts_total",
      help: "Claimed execution attempts by how they ended",
      labelNames: ["result"],
    }),
    turnDuration: port.histogram({
      name: "openma_turn_duration_seconds",
      help: "Claimed execution attempts, claim to release, by how they ended",
      labelNames: ["result"],
      buckets: TURN_BUCKETS,
    }),
    modelRequestDuration: port.histogram({
      name: "openma_model_request_duration_seconds",
      help: "Model requests (one streamed Messages API call) by outcome",
      labelNames: ["outcome"],
      buckets: LATENCY_BUCKETS,
    }),
    modelTokens: port.counter({
      name: "openma_model_tokens_total",
      help: "Model tokens by type (input, output, cache_read, cache_creation)",
      labelNames: ["type"],
    }),
    sandboxOperationDuration: port.histogram({
      name: "openma_sandbox_operation_duration_seconds",
      help: "Sandbox acquire, exec and terminate latency by driver and outcome",
      labelNames: ["driver", "operation", "outcome"],
      buckets: LATENCY_BUCKETS,
    }),
    leaseRenewals: port.counter({
      name: "openma_lease_renewals_total",
      help: "Lease renewals by lease kind (execution, runtime_fence) and result (renewed, lost, transient)",
      labelNames: ["lease", "result"],
    }),
    leaseLosses: port.counter({
      name: "openma_lease_losses_total",
      help: "Leases lost while their work ran (the work was aborted) by lease kind",
      labelNames: ["lease"],
    }),
    runtimeRuns: port.counter({
      name: "openma_runtime_runs_total",
      help: "Runtime host runs (one turn in a sandbox) by how they ended",
      labelNames: ["result"],
    }),
    runtimeBlobBytes: port.counter({
      name: "openma_runtime_blob_bytes_total",
      help: "Bytes the runtime host moved through the blob store: uploads (workspace checkpoints, outputs) and downloads (restores)",
      labelNames: ["direction"],
    }),
    workspacePersistenceDuration: port.histogram({
      name: "openma_workspace_persistence_duration_seconds",
      help: "Workspace checkpoint and restore durations in the runtime host by outcome",
      labelNames: ["operation", "outcome"],
      buckets: LATENCY_BUCKETS,
    }),
  };
}

/** Seconds since `startedMs` (performance.now() time). */
export function secondsSince(startedMs: number): number {
  return (performance.now() - startedMs) / 1000;
}
