/**
 * The only way an in-sandbox agent reaches its model: a unix socket bound
 * into the sandbox (sandboxes keep no network), forwarding HTTP to the model
 * upstream with the real key injected here, on the host.
 *
 * The agent is configured with a placeholder key. Whatever credential it
 * presents (x-api-key, Authorization, x-goog-api-key, `?key=`) is dropped
 * and replaced, so a prompt-injected agent that dumps its environment or
 * config finds nothing worth stealing. Only the upstream's own origin is
 * reachable: the request path is kept, the host is not the agent's choice.
 */

import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from "node:http";
import { request as httpsRequest } from "node:https";
import { listenOnSandboxSocket } from "@openma/driver-kit";

/** How the upstream API wants its key. */
export type ModelKeyStyle = "x-api-key" | "bearer" | "x-goog-api-key";

export interface ModelGatewayOptions {
  socketPath: string;
  /** The model API origin (and optional base path), e.g. `https://api.example.com`. */
  upstream: string;
  /** Read on every request, so a rotated key applies at once; never logged. */
  apiKey: () => string;
  keyStyle: ModelKeyStyle;
}

export interface ModelGateway {
  readonly socketPath: string;
  close(): Promise<void>;
}

const CREDENTIAL_HEADERS = ["x-api-key", "authorization", "x-goog-api-key", "api-key", "proxy-authorization"];
const HOP_BY_HOP = ["connection", "keep-alive", "transfer-encoding", "upgrade", "host", "te", "trailer"];

export async function openModelGateway(options: ModelGatewayOptions): Promise<ModelGateway> {
  const upstream = new URL(options.upstream);
  if (upstream.protocol !== "http:" && upstream.protocol !== "https:") throw new Error("the model upstream must be http(s)");
  const basePath = upstream.pathname.replace(/\/+$/, "");

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const incoming = new URL(req.url ?? "/", "http://gateway");
    incoming.searchParams.delete("key");
    const headers: Record<string, string | string[]> = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (value === undefined || CREDENTIAL_HEADERS.includes(name) || HOP_BY_HOP.includes(name)) continue;
      headers[name] = value;
    }
    const key = options.apiKey();
    if (options.keyStyle === "bearer") headers.authorization = `Bearer ${key}`;
    else headers[options.keyStyle] = key;
    const send = upstream.protocol === "https:" ? httpsRequest : httpRequest;
    const out = send(
      {
        protocol: upstream.protocol,
        hostname: upstream.hostname,
        port: upstream.port || undefined,
        method: req.method,
        path: `${basePath}${incoming.pathname}${incoming.search}`,
        headers,
      },
      (up) => {
        const back: Record<string, string | string[]> = {};
        for (const [name, value] of Object.entries(up.headers)) if (value !== undefined && !HOP_BY_HOP.includes(name)) back[name] = value;
        res.writeHead(up.statusCode ?? 502, back);
        up.pipe(res);
      },
    );
    out.on("error", () => {
      if (!res.headersSent) res.writeHead(502, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { type: "api_error", message: "the model gateway could not reach the model API" } }));
    });
    req.pipe(out);
    res.on("close", () => out.destroy());
  };

  const listening = await listenOnSandboxSocket(createServer(handle), options.socketPath);
  return { socketPath: options.socketPath, close: () => listening.close() };
}
