/**
 * OpenTelemetry traces of a real `openma serve` (SQLite, brain on, bubblewrap
 * sandboxes) sent by the official SDK's OTLP/HTTP exporter to an in-process
 * receiver: one connected trace for the turn, its model requests and sandbox
 * calls as child spans of `openma.turn`. The server's close flushes the
 * exporter, so nothing here waits on time.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalSandboxServer, startLocalSandboxServer, toolTurnScript } from "../harness/local-sandbox-support.ts";

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  attributes?: Array<{ key: string; value: { stringValue?: string } }>;
}

/** An OTLP/HTTP JSON traces receiver: what a collector would get. */
async function startReceiver(): Promise<{ url: string; spans: OtlpSpan[]; close(): Promise<void> }> {
  const spans: OtlpSpan[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.url === "/v1/traces" && req.headers["content-type"]?.startsWith("application/json")) {
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as {
          resourceSpans: Array<{ scopeSpans: Array<{ spans: OtlpSpan[] }> }>;
        };
        for (const rs of body.resourceSpans) for (const ss of rs.scopeSpans) spans.push(...ss.spans);
        res.writeHead(200, { "content-type": "application/json" }).end("{}");
      } else res.writeHead(415).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, spans, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

const attr = (span: OtlpSpan, key: string) => span.attributes?.find((a) => a.key === key)?.value.stringValue;

describe("OpenTelemetry traces of a turn (bubblewrap, scripted model)", () => {
  let receiver: Awaited<ReturnType<typeof startReceiver>>;
  let s: LocalSandboxServer | null = null;
  beforeAll(async () => {
    receiver = await startReceiver();
    s = await startLocalSandboxServer("sqlite", "bubblewrap", toolTurnScript("echo traced", "notes"), {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    });
  });
  afterAll(async () => {
    await s?.close();
    await receiver?.close();
  });

  it("exports one connected trace: the turn, its model requests and its sandbox calls", async () => {
    const server = s as LocalSandboxServer;
    const sessionId = await server.createToolsetSession("traced");
    const events = await server.sendUntilIdle(sessionId, "use the sandbox");
    expect(events.filter((e) => e.type === "session.error")).toEqual([]);
    // Closing the server shuts the tracer provider down, which exports every ended span.
    await server.close();
    s = null;

    const turns = receiver.spans.filter((x) => x.name === "openma.turn" && attr(x, "openma.session_id") === sessionId);
    expect(turns).toHaveLength(1);
    const turn = turns[0] as OtlpSpan;
    expect(turn.parentSpanId ?? "").toBe("");
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
