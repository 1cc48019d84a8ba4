/**
 * The Runtime Host's named steps as OpenTelemetry spans: a run is the span
 * `openma.host.run` and each step (`materialize_workspace`, `run_harness`,
 * `checkpoint_workspace`, `publish`, ...) a child span `openma.host.<step>`
 * carrying how it ended. Under `openma serve` with tracing configured they
 * join the trace of whatever started the run, or of the API request that
 * queued it (`inTraceOf`); without a registered tracer provider the API's
 * no-op tracer makes them free. Only the OpenTelemetry API is used here,
 * never an SDK.
 */
import { type Attributes, context, propagation, type Span, SpanStatusCode, trace } from "@opentelemetry/api";

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

/**
 * The active span's W3C trace context (`traceparent`) through the registered
 * propagator, to be stored with what a request queues; null outside a span
 * or without tracing (the API's no-op propagator writes nothing).
 */
export function activeTraceparent(): string | null {
  const carrier: { traceparent?: string } = {};
  propagation.inject(context.active(), carrier);
  return carrier.traceparent ?? null;
}

/**
 * Runs `fn` with the span `traceparent` names (a stored `activeTraceparent`)
 * as the active remote parent, so the spans `fn` starts continue that trace.
 * Without one, or without tracing, `fn` just runs.
 */
export function inTraceOf<T>(traceparent: string | null | undefined, fn: () => T): T {
  if (!traceparent) return fn();
  return context.with(propagation.extract(context.active(), { traceparent }), fn);
}
