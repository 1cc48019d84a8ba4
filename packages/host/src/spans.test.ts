import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { context, propagation, SpanStatusCode, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { activeTraceparent, inTraceOf } from "./spans.ts";
import { openRig } from "./testing/rig.ts";

describe("the host's steps as OpenTelemetry spans", () => {
  const exporter = new InMemorySpanExporter();
  let storage: TestStorage;
  beforeAll(async () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
    trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
    storage = await openTestStorage("sqlite");
  });
  afterAll(async () => {
    trace.disable();
    context.disable();
    await storage?.cleanup();
  });
  beforeEach(() => exporter.reset());

  /** The run's root span and its direct children, by name. */
  function tree(): { run: ReadableSpan; steps: ReadableSpan[] } {
    const spans = exporter.getFinishedSpans();
    const runs = spans.filter((s) => s.name === "openma.host.run");
    expect(runs).toHaveLength(1);
    const run = runs[0] as ReadableSpan;
    const steps = spans.filter((s) => s.parentSpanContext?.spanId === run.spanContext().spanId);
    return { run, steps };
  }

  it("makes one run span whose children are the named steps, in one trace", async () => {
    const rig = openRig(storage);
    rig.harness.script(async (input) => {
      Object.assign(rig.workspace.files(input.workspace.bindingId), { "a.txt": "a" });
      return { type: "completed" };
    });
    const result = await rig.run();
    expect(result.type).toBe("completed");
    const { run, steps } = tree();
    expect(run.attributes).toMatchObject({ "openma.session_id": rig.scope.sessionId, "openma.host.status": "ok" });
    const names = steps.map((s) => s.name);
    for (const step of ["materialize_workspace", "acquire_compute", "run_harness", "checkpoint_workspace", "publish", "release_workspace"])
      expect(names).toContain(`openma.host.${step}`);
    for (const span of steps) {
      expect(span.spanContext().traceId).toBe(run.spanContext().traceId);
      expect(span.attributes["openma.host.status"]).toBe("ok");
    }
  });

  it("marks the failing step and the run with an error status", async () => {
    const rig = openRig(storage);
    rig.harness.script(async () => ({ type: "failed", error: "the harness gave up" }));
    const result = await rig.run();
    expect(result.type).toBe("failed");
    const { run, steps } = tree();
    expect(run.status.code).toBe(SpanStatusCode.ERROR);
    expect(run.attributes["openma.host.status"]).toBe("failed");
    const harness = steps.find((s) => s.name === "openma.host.run_harness");
    expect(harness?.status.code).toBe(SpanStatusCode.ERROR);
  });

  it("marks a cleanup step that fails", async () => {
    const rig = openRig(storage);
    rig.harness.script(async () => ({ type: "completed" }));
    rig.faults.arm("workspace.release", { type: "throw", message: "volume busy" });
    await rig.run();
    const release = tree().steps.find((s) => s.name === "openma.host.release_workspace");
    expect(release?.attributes["openma.host.status"]).toBe("failed");
    expect(release?.status.code).toBe(SpanStatusCode.ERROR);
  });

  it("carries a span's trace context as a traceparent, and continues it in spans started under inTraceOf", () => {
    propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    try {
      const tracer = trace.getTracer("test");
      expect(activeTraceparent()).toBeNull();
      const queued = tracer.startActiveSpan("openma.api.send_events", (span) => {
        span.end();
        return activeTraceparent();
      });
      const request = exporter.getFinishedSpans()[0] as ReadableSpan;
      expect(queued).toBe(`00-${request.spanContext().traceId}-${request.spanContext().spanId}-01`);
      inTraceOf(queued, () => tracer.startSpan("openma.host.run").end());
      inTraceOf(null, () => tracer.startSpan("a root").end());
      const [, continued, root] = exporter.getFinishedSpans();
      expect(continued?.spanContext().traceId).toBe(request.spanContext().traceId);
      expect(continued?.parentSpanContext?.spanId).toBe(request.spanContext().spanId);
      expect(root?.spanContext().traceId).not.toBe(request.spanContext().traceId);
      expect(root?.parentSpanContext).toBeUndefined();
    } finally {
      propagation.disable();
    }
  });
});
