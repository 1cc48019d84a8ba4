/**
 * The stand-in's network for a container: what Cloudflare's runtime does
 * for a container whose Durable Object turned the internet off and
 * registered outbound interception. Every HTTP request the container sends
 * and every HTTPS connection (terminated here with a certificate from a CA
 * the container trusts, as the platform does under `interceptHttps`) is
 * handed, as a plain request with its original `https://` URL, to the
 * Worker, which routes it to the fetcher the Durable Object registered
 * (the SDK's ContainerProxy, then our `outbound` handler). Nothing here
 * decides or substitutes anything; nothing else leaves.
 *
 * It is a `CredentialEgressPort` so the node-docker driver makes it the
 * box's only way out with its own mechanism (ADR 0015: `NetworkMode: none`,
 * a listener bound inside the box's network namespace, the CA mounted and
 * trusted through the usual variables).
 */
import http from "node:http";
import type net from "node:net";
import { Duplex, PassThrough } from "node:stream";
import tls from "node:tls";
import type { CredentialEgressPort, RuntimeResourceScope, SandboxEgress } from "@openma/contract";
import { SandboxCa } from "@openma/egress/ca";
import { absoluteHttpUrl, HOP_BY_HOP, parseAuthority, refuseSocket } from "@openma/egress/gateway";
import { GATEWAY_EGRESS_CAPABILITIES } from "@openma/egress/port";
import { STANDIN_CONTAINER_HEADER, STANDIN_OUTBOUND_PATH, STANDIN_URL_HEADER } from "./wire.ts";

export interface PlatformInterceptOptions {
  /** The Durable Object id whose container this box is (by the box's session id), or null. */
  containerFor(scope: RuntimeResourceScope): string | null;
  /** Sends one request into the Worker (the test's workerd). */
  dispatch(request: Request): Promise<Response>;
}

export class PlatformInterceptPort implements CredentialEgressPort {
  readonly capabilities = GATEWAY_EGRESS_CAPABILITIES;
  readonly #options: PlatformInterceptOptions;

  constructor(options: PlatformInterceptOptions) {
    this.#options = options;
  }

  async open(input: { scope: RuntimeResourceScope; runtimeId: string }): Promise<SandboxEgress> {
    const containerId = this.#options.containerFor(input.scope);
    if (containerId === null) throw new Error(`no Durable Object owns box ${input.scope.sessionId}`);
    const ca = new SandboxCa(`cloudflare-standin-${input.runtimeId}`);
    const sockets = new Set<net.Socket>();
    const track = (socket: net.Socket) => {
      sockets.add(socket);
      socket.once("close", () => sockets.delete(socket));
      socket.on("error", () => socket.destroy());
    };
    const targets = new WeakMap<net.Socket, string>();
    const forward = (req: http.IncomingMessage, res: http.ServerResponse, url: string) => {
      this.#forward(containerId, req, res, url).catch((err: unknown) => {
        if (!res.headersSent) res.writeHead(502, { "content-type": "text/plain" }).end(`stand-in platform: ${String(err)}\n`);
        else res.destroy();
      });
    };
    const outer = http.createServer((req, res) => {
      const url = absoluteHttpUrl(req, res);
      if (url !== null) forward(req, res, url.href);
    });
    // Requests that arrived inside a CONNECT tunnel: `https://` when TLS was terminated here, else plain HTTP in the tunnel.
    const tunnelled = http.createServer((req, res) => {
      const origin = targets.get(req.socket as net.Socket);
      if (origin === undefined) return void res.destroy();
      forward(req, res, new URL(req.url ?? "/", origin).href);
    });
    outer.on("connect", (req: http.IncomingMessage, client: net.Socket, head: Buffer) => {
      const target = parseAuthority(req.url ?? "");
      if (!target) return refuseSocket(client, "400 Bad Request", "CONNECT needs host:port\n");
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      const authority = `${target.host}:${target.port}`;
      // Clients tunnel plain HTTP through CONNECT too (undici does): only a TLS ClientHello (0x16) is terminated. The first
      // bytes were read to tell, so the servers get a stream that replays them (a socket's handle would skip them).
      client.once("data", (first: Buffer) => {
        client.pause();
        const incoming = new PassThrough();
        incoming.write(first);
        client.pipe(incoming);
        const stream = Duplex.from({ readable: incoming, writable: client });
        stream.on("error", () => client.destroy());
        if (first[0] !== 0x16) {
          targets.set(stream as never, `http://${authority}`);
          return void tunnelled.emit("connection", stream);
        }
        const issued = ca.issue(target.host);
        const secure = new tls.TLSSocket(stream, {
          isServer: true,
          secureContext: tls.createSecureContext({ key: issued.keyPem, cert: issued.certPem }),
          ALPNProtocols: ["http/1.1"],
        });
        track(secure);
        targets.set(secure, `https://${authority}`);
        tunnelled.emit("connection", secure);
      });
      if (head.length > 0) client.unshift(head);
    });
    return {
      caCertPem: ca.certPem,
      env: {},
      accept: (socket) => {
        track(socket as net.Socket);
        outer.emit("connection", socket);
      },
      close: () => {
        for (const socket of sockets) socket.destroy();
        outer.close();
        tunnelled.close();
      },
    };
  }

  async #forward(containerId: string, req: http.IncomingMessage, res: http.ServerResponse, url: string): Promise<void> {
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
      if (value === undefined || HOP_BY_HOP.includes(name) || name === "host") continue;
      for (const v of Array.isArray(value) ? value : [value]) headers.append(name, v);
    }
    headers.set(STANDIN_CONTAINER_HEADER, containerId);
    headers.set(STANDIN_URL_HEADER, url);
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const method = req.method ?? "GET";
    const body = method === "GET" || method === "HEAD" ? undefined : Buffer.concat(chunks);
    const answer = await this.#options.dispatch(new Request(`http://standin${STANDIN_OUTBOUND_PATH}`, { method, headers, body }));
    const out: Record<string, string> = {};
    // fetch already decoded the body: its length and encoding headers no longer describe it.
    for (const [name, value] of answer.headers)
      if (!HOP_BY_HOP.includes(name) && name !== "content-length" && name !== "content-encoding") out[name] = value;
    const data = Buffer.from(await answer.arrayBuffer());
    res.writeHead(answer.status, { ...out, "content-length": String(data.length) }).end(data);
  }
}
