/**
 * The Runtime Host's named steps as OpenTelemetry spans: a run is the span
 * `openma.host.run` and each step (`materialize_workspace`, `run_harness`,
 * `checkpoint_workspace`, `publish`, ...) a child span `openma.host.<step>`
 * carrying how it ended. Under `openma serve` with tracing configured they
 * join the trace of whatever started the run; without a registered tracer
 * provider the API's no-op tracer makes them free. Only the OpenTelemetry
 * API is used here, never an SDK.
 */
import { type Attributes, type Span, SpanStatusCode, trace } from "@opentelemetry/api";

const tracer = trace.getTracer("@openma/host");

/** Runs `fn` inside an active span named `name`, which `fn` ends the status of through `settle`. */
export function inHostSpan<T>(name: string, attributes: Attributes, fn: (span: Span) => Promise<T>): Promise<T> {
  return tracer.startActiveSpan(name, { attributes }, async (span) => {
    try {
      return await fn(span);
    } finally {
      span.end();
    }
  });
}

/** Records how a step or run ended: `ok`, or the end (failed, lease_lost, cancelled, ...) as an error status. */
export function settle(span: Span, status: string): void {
  span.setAttribute("openma.host.status", status);
  if (status !== "ok") span.setStatus({ code: SpanStatusCode.ERROR, message: status });
}
