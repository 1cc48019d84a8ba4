import { context, propagation } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { describe, expect, it } from "vitest";
import { inSpan, requestTracing, traceFields } from "./spans.ts";

describe("spans", () => {
  it("puts the active span's ids into log fields, and none outside a span", async () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    const exporter = new InMemorySpanExporter();
    const tracer = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }).getTracer("test");
    expect(traceFields()).toEqual({});
    const inside = await inSpan(tracer, "outer", {}, async () => {
      await Promise.resolve();
      return traceFields();
    });
    const [span] = exporter.getFinishedSpans();
    expect(inside).toEqual({ trace_id: span?.spanContext().traceId, span_id: span?.spanContext().spanId });
    await expect(
      inSpan(tracer, "failing", {}, async () => {
        throw new Error("boom");
      }),
    ).rejects.toThrow("boom");
    expect(exporter.getFinishedSpans()[1]?.status).toMatchObject({ code: 2, message: "boom" });
    context.disable();
  });

  it("runs a request's detached work outside its span (a worker woken by the request outlives it)", async () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    const tracer = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(new InMemorySpanExporter())] }).getTracer("test");
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    const tracing = requestTracing(tracer);
    const seen = await tracing.inSpan("openma.api.send_events", {}, async () => ({
      inside: tracing.traceparent(),
      detached: tracing.detached(() => tracing.traceparent()),
    }));
    expect(seen.inside).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
    expect(seen.detached).toBeNull();
    propagation.disable();
    context.disable();
  });
});
