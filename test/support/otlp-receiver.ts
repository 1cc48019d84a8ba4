/**
 * An in-process OTLP/HTTP JSON traces receiver: what a collector would get
 * from a server whose `OTEL_EXPORTER_OTLP_ENDPOINT` is its `url`.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  attributes?: Array<{ key: string; value: { stringValue?: string } }>;
}

export interface OtlpReceiver {
  url: string;
  /** Every span received so far. */
  spans: OtlpSpan[];
  close(): Promise<void>;
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
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

/** A span's string attribute. */
export const otlpAttr = (span: OtlpSpan, key: string) => span.attributes?.find((a) => a.key === key)?.value.stringValue;
