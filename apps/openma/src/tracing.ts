/**
 * OpenTelemetry traces of `openma serve`, off unless an OTLP endpoint is
 * configured (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or
 * `OTEL_EXPORTER_OTLP_ENDPOINT`, the SDK's own variables; see config.ts), sent
 * as OTLP/HTTP JSON (the exporter reads `OTEL_EXPORTER_OTLP_HEADERS` itself).
 * Every span is exported; the batch processor reads `OTEL_BSP_SCHEDULE_DELAY`
 * and the other `OTEL_BSP_*` variables itself. Protobuf would not be cheaper:
 * it serializes in the same CPU time as JSON (docs/benchmarks.md, "Operations
 * overhead"), only smaller.
 *
 * Loaded only when tracing is on (the SDK stays out of a server without it);
 * the spans themselves are made in spans.ts, on the API alone.
 *
 * The provider is this server's, not registered globally, so two servers in
 * one process (tests) keep their traces apart; only the context manager is
 * global, and it is the same for everyone. So is the W3C trace context
 * propagator, registered here: it writes the `traceparent` stored with a
 * queued turn and reads it back where the turn runs (@openma/host's spans.ts),
 * and without tracing the API's no-op propagator does neither.
 */

import type { Tracer } from "@opentelemetry/api";
import { context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BasicTracerProvider, BatchSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { VERSION } from "./version.ts";

export interface Tracing {
  tracer: Tracer;
  /** Exports what is buffered and stops. */
  shutdown(): Promise<void>;
}

let contextManager: AsyncLocalStorageContextManager | null = null;

export function startTracing(endpoint: string): Tracing {
  if (contextManager === null) {
    contextManager = new AsyncLocalStorageContextManager().enable();
    context.setGlobalContextManager(contextManager);
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  }
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ "service.name": "openma", "service.version": VERSION }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: endpoint }))],
  });
  // Global too: packages that only know the OpenTelemetry API (the Runtime Host's step spans) find it there.
  trace.setGlobalTracerProvider(provider);
  return { tracer: provider.getTracer("openma", VERSION), shutdown: () => provider.shutdown() };
}
