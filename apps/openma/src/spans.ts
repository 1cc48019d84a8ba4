/**
 * The spans of `openma serve` (tracing.ts exports them when configured): one
 * trace per turn, from the API request that queued it (`openma.api.send_events`,
 * whose W3C trace context is stored with the queued turn) to `openma.turn`,
 * which wraps the turn runner as that request's child; the model requests and
 * sandbox calls made inside it are its children (the active span travels
 * through async calls with AsyncLocalStorage). Logs
 * written while a span is active carry its `trace_id` and `span_id`. Only the
 * OpenTelemetry API is used here: without a configured tracer it costs nothing.
 */

import type { RequestTracing } from "@openma/api";
import type { TurnRunner } from "@openma/execution";
import { activeTraceparent, inTraceOf } from "@openma/host/spans";
import { context, ROOT_CONTEXT, type Span, SpanStatusCode, type Tracer, trace } from "@opentelemetry/api";

/** Runs `fn` inside a new active span, ending it with the error status when `fn` throws. */
export async function inSpan<T>(
  tracer: Tracer,
  name: string,
  attributes: Record<string, string>,
  fn: (span: Span) => Promise<T>,
): Promise<T> {
  return tracer.startActiveSpan(name, { attributes }, async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      span.recordException(err as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
      throw err;
    } finally {
      span.end();
    }
  });
}

/**
 * The runner's turn becomes the span `openma.turn`: a child of the request
 * that queued it when that request was traced (its stored `traceparent`), a
 * root otherwise.
 */
export function tracedRunner(runner: TurnRunner, tracer: Tracer): TurnRunner {
  return {
    needsTurn: (sessionId) => runner.needsTurn(sessionId),
    giveUp: (sessionId, input) => runner.giveUp(sessionId, input),
    runTurn: (sessionId, signal, traceparent) =>
      inTraceOf(traceparent, () =>
        inSpan(tracer, "openma.turn", { "openma.session_id": sessionId }, async (span) => {
          const outcome = await runner.runTurn(sessionId, signal, traceparent);
          span.setAttribute("openma.turn.outcome", outcome.type);
          return outcome;
        }),
      ),
  };
}

/** The API's requests that queue turns, as spans whose trace context goes with the turn. */
export function requestTracing(tracer: Tracer): RequestTracing {
  return {
    inSpan: (name, attributes, fn) => inSpan(tracer, name, attributes, fn),
    traceparent: activeTraceparent,
    detached: (fn) => context.with(ROOT_CONTEXT, fn),
  };
}

/** The active span's ids for a log line (pino `mixin`), or nothing outside a span. */
export function traceFields(): Record<string, string> {
  const span = trace.getSpan(context.active());
  if (!span) return {};
  const { traceId, spanId } = span.spanContext();
  return { trace_id: traceId, span_id: spanId };
}
