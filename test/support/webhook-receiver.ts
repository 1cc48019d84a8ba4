/**
 * A local webhook receiver for tests: records what it accepts (`received`)
 * and every request it saw (`requests`, the ones it answered 500 too: a
 * receiver that processed a request and then failed to answer looks the same
 * to the sender), answers 500 to its first requests when asked.
 */
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export interface Received {
  body: string;
  headers: Record<string, string>;
}

/** A receiver answering 500 to its first `failFirst` requests (all of them when Infinity), then 204. */
export async function receiver(
  failFirst: number,
): Promise<{ url: string; received: Received[]; requests: Received[]; close(): Promise<void> }> {
  const received: Received[] = [];
  const requests: Received[] = [];
  let seen = 0;
  const server: Server = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (chunk: string) => {
      body += chunk;
    });
    req.on("end", () => {
      seen++;
      requests.push({ body, headers: flat(req.headers) });
      if (seen <= failFirst) {
        res.writeHead(500).end("not now");
        return;
      }
      received.push({ body, headers: flat(req.headers) });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hooks`,
    received,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

function flat(headers: IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) if (typeof v === "string") out[k] = v;
  return out;
}
