import { context } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { describe, expect, it } from "vitest";
import { inSpan, traceFields } from "./spans.ts";

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
});
