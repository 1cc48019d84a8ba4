/**
 * OpenTelemetry traces of a real `openma serve` (SQLite and PostgreSQL, brain on, bubblewrap
 * sandboxes) sent by the official SDK's OTLP/HTTP exporter to an in-process
 * receiver: one connected trace for the turn, from the API request that
 * queued it (`openma.api.send_events`, the root) to `openma.turn` (its child,
 * through the trace context stored with the queued turn), with the turn's
 * model requests and sandbox calls as child spans of `openma.turn`. The
 * server's close flushes the exporter, so nothing here waits on time.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalSandboxServer, startLocalSandboxServer, toolTurnScript } from "../harness/local-sandbox-support.ts";
import { otlpAttr as attr, type OtlpReceiver, type OtlpSpan, startOtlpReceiver } from "../support/otlp-receiver.ts";

describe.each(["sqlite", "postgres"] as const)("OpenTelemetry traces of a turn on %s (bubblewrap, scripted model)", (dialect) => {
  let receiver: OtlpReceiver;
  let s: LocalSandboxServer | null = null;
  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    s = await startLocalSandboxServer(dialect, "bubblewrap", toolTurnScript("echo traced", "notes"), {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    });
  });
  afterAll(async () => {
    await s?.close();
    await receiver?.close();
  });

  it("exports one connected trace: the request that queued the turn, the turn, its model requests and its sandbox calls", async () => {
    const server = s as LocalSandboxServer;
    const sessionId = await server.createToolsetSession("traced");
    const events = await server.sendUntilIdle(sessionId, "use the sandbox");
    expect(events.filter((e) => e.type === "session.error")).toEqual([]);
    // Closing the server shuts the tracer provider down, which exports every ended span.
    await server.close();
    s = null;

    const ofSession = (name: string) => receiver.spans.filter((x) => x.name === name && attr(x, "openma.session_id") === sessionId);
    // The SDK's one POST of the user message: the trace's root.
    const sends = ofSession("openma.api.send_events");
    expect(sends).toHaveLength(1);
    const send = sends[0] as OtlpSpan;
    expect(send.parentSpanId ?? "").toBe("");
    const turns = ofSession("openma.turn");
    expect(turns).toHaveLength(1);
    const turn = turns[0] as OtlpSpan;
    // Claimed by the execution worker from the queue, yet in the request's trace, as its child.
    expect(turn.traceId).toBe(send.traceId);
    expect(turn.parentSpanId).toBe(send.spanId);
    const children = receiver.spans.filter((x) => x.traceId === turn.traceId && x.spanId !== turn.spanId);
    const named = (name: string) => children.filter((x) => x.name === name);
    // bash, write, read, then the answer: four model requests.
    expect(named("openma.model.request")).toHaveLength(4);
    expect(named("openma.sandbox.acquire")).toHaveLength(1);
    // bash runs in the session's persistent shell: one spawned process for the session's sandbox.
    expect(named("openma.sandbox.spawn")).toHaveLength(1);
    for (const child of [...named("openma.model.request"), ...named("openma.sandbox.acquire"), ...named("openma.sandbox.spawn")]) {
      expect(child.parentSpanId).toBe(turn.spanId);
    }
    expect(attr(named("openma.sandbox.acquire")[0] as OtlpSpan, "driver")).toBe("bubblewrap");
  });
});
