/**
 * The HTTP side shared by the cloud stand-ins: a Hono app served on a local
 * port, WebSocket upgrades handed to the vendor's handler (`ws`), a record
 * of what each request looked like on the wire (method, path, which
 * credential header it carried and whether the stand-in accepted it), and
 * an admin surface (`/_standin/*`) so a stand-in started on its own can be
 * asked how many sandboxes it holds and told to misbehave.
 */
import type { IncomingMessage } from "node:http";
import { createServer as createHttpsServer, type ServerOptions as HttpsServerOptions } from "node:https";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import { serve } from "@hono/node-server";
import type { Context, Hono, MiddlewareHandler } from "hono";
import { type WebSocket, WebSocketServer } from "ws";
import { type FaultQueue, isFault } from "./faults.ts";

export interface RecordedRequest {
  method: string;
  path: string;
  query: string;
  /** The credential header the request carried (lower case), or null. */
  authHeader: string | null;
  /** Whether the stand-in accepted the credential. */
  authorized: boolean;
  /** Header names the request carried (lower case), values left out. */
  headerNames: string[];
  userAgent: string | null;
}

export interface RequestLog {
  readonly requests: RecordedRequest[];
  clear(): void;
}

export type StandInEnv = { Variables: { auth: { header: string | null; ok: boolean } } };

/** Records every request after the vendor's handler ran (so the auth verdict is known). */
export function recorder(log: RecordedRequest[], limit = 5000): MiddlewareHandler<StandInEnv> {
  return async (c, next) => {
    c.set("auth", { header: null, ok: false });
    await next();
    const url = new URL(c.req.url);
    const auth = c.get("auth");
    log.push({
      method: c.req.method,
      path: url.pathname,
      query: url.search,
      authHeader: auth.header,
      authorized: auth.ok,
      headerNames: [...c.req.raw.headers.keys()],
      userAgent: c.req.header("user-agent") ?? null,
    });
    if (log.length > limit) log.splice(0, log.length - limit);
  };
}

/** Records a WebSocket upgrade request (it never reaches the Hono app) with its credential verdict. */
export function recordUpgrade(log: RecordedRequest[], request: IncomingMessage, header: string, authorized: boolean): void {
  const url = new URL(request.url ?? "/", "http://standin");
  log.push({
    method: "GET",
    path: url.pathname,
    query: url.search,
    authHeader: request.headers[header] === undefined ? null : header,
    authorized,
    headerNames: Object.keys(request.headers),
    userAgent: request.headers["user-agent"] ?? null,
  });
}

/** Marks the request's credential verdict for the record. */
export function noteAuth(c: Context<StandInEnv>, header: string | null, ok: boolean): void {
  c.set("auth", { header, ok });
}

export type UpgradeHandler = (socket: WebSocket, request: IncomingMessage) => void;

export interface UpgradeRoute {
  /** Matches the request path; returns route parameters, or null. */
  match(path: string): Record<string, string> | null;
  /** Checks the upgrade request (credentials, target); a string refuses it with that HTTP status text. */
  accept(request: IncomingMessage, params: Record<string, string>): Promise<{ status: number; body: string } | null>;
  open(socket: WebSocket, request: IncomingMessage, params: Record<string, string>): void;
}

export interface StartedServer {
  url: string;
  port: number;
  close(): Promise<void>;
}

/** Serves `app` on a local port, dispatching WebSocket upgrades to `upgrades`. */
export async function serveStandIn(options: {
  app: Hono<StandInEnv>;
  upgrades?: readonly UpgradeRoute[];
  port?: number;
  host?: string;
  /** Records upgrade requests too (they never reach the Hono app). */
  onUpgradeRecord?: (request: IncomingMessage, verdict: { accepted: boolean }) => void;
  /** Serves HTTPS with these options (certificates) instead of plain HTTP: a vendor data plane the SDK only reaches over TLS. */
  tls?: HttpsServerOptions;
}): Promise<StartedServer> {
  const host = options.host ?? "127.0.0.1";
  const server = serve({
    fetch: options.app.fetch,
    port: options.port ?? 0,
    hostname: host,
    ...(options.tls ? { createServer: createHttpsServer, serverOptions: options.tls } : {}),
  });
  const wss = new WebSocketServer({ noServer: true });
  const sockets = new Set<Duplex>();
  server.on("connection", (socket: Duplex) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  server.on("upgrade", (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    const path = new URL(request.url ?? "/", "http://standin").pathname;
    const route = (options.upgrades ?? []).map((r) => ({ r, params: r.match(path) })).find((x) => x.params !== null);
    const refuse = (status: number, body: string) => {
      socket.end(
        `HTTP/1.1 ${status} Refused\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
      );
    };
    if (!route?.params) {
      options.onUpgradeRecord?.(request, { accepted: false });
      refuse(404, JSON.stringify({ message: "not found" }));
      return;
    }
    const params = route.params;
    route.r
      .accept(request, params)
      .then((refusal) => {
        options.onUpgradeRecord?.(request, { accepted: refusal === null });
        if (refusal !== null) return refuse(refusal.status, refusal.body);
        wss.handleUpgrade(request, socket, head, (ws) => route.r.open(ws, request, params));
      })
      .catch((err: unknown) => refuse(500, JSON.stringify({ message: String(err) })));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("listening", resolve);
    server.once("error", reject);
  });
  const { port } = server.address() as AddressInfo;
  let closing: Promise<void> | null = null;
  return {
    url: `${options.tls ? "https" : "http"}://${host}:${port}`,
    port,
    close() {
      closing ??= new Promise<void>((resolve) => {
        for (const client of wss.clients) client.terminate();
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      });
      return closing;
    },
  };
}

/**
 * The admin surface: `GET /_standin/state` (live sandboxes, containers on
 * the engine, pending faults) and `POST /_standin/faults` (`{fault, times}`),
 * both behind `Authorization: Bearer <token>`.
 */
export function mountAdmin(
  app: Hono<StandInEnv>,
  options: { token: string; faults: FaultQueue; state: () => Promise<Record<string, unknown>> },
): void {
  const guard: MiddlewareHandler<StandInEnv> = async (c, next) => {
    if (c.req.header("authorization") !== `Bearer ${options.token}`) return c.json({ message: "unauthorized" }, 401);
    await next();
  };
  app.get("/_standin/state", guard, async (c) => c.json({ ...(await options.state()), pendingFaults: options.faults.pending }));
  app.post("/_standin/faults", guard, async (c) => {
    const body = (await c.req.json().catch(() => null)) as { fault?: unknown; times?: unknown } | null;
    if (!body || !isFault(body.fault)) return c.json({ message: "body must be {fault: {op, kind, ...}, times?}" }, 400);
    const times = typeof body.times === "number" ? body.times : 1;
    void options.faults.add(body.fault, times);
    return c.json({ queued: times });
  });
}

/** A promise that never settles unless `release` is called (a hung request), tracked so `close` can let go. */
export class Hangs {
  readonly #waiting = new Set<() => void>();

  hang(): Promise<void> {
    return new Promise((resolve) => this.#waiting.add(resolve));
  }

  releaseAll(): void {
    for (const release of this.#waiting) release();
    this.#waiting.clear();
  }
}
