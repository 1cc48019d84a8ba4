/**
 * Egress for a sandbox whose network namespace has only a loopback
 * interface: the one way out is an HTTP proxy (CONNECT tunnels and
 * absolute-form plain HTTP) with a host allowlist.
 *
 * The proxy runs in the host process, in the host's network namespace. Its
 * listening socket, however, lives in the sandbox's namespace (see
 * `listenInNetns` in @openma/egress). This is the static-allowlist proxy of
 * `network: {mode: "proxy"}`; the environment-driven gateway with credential
 * substitution is @openma/egress, composed as `credentialEgress`.
 */
import http from "node:http";
import type net from "node:net";
import { absoluteHttpUrl, HOP_BY_HOP, openTunnel, refuseSocket, sandboxProxyEnv } from "@openma/egress";

export interface EgressOptions {
  /**
   * Allowed destinations: `host`, `host:port`, `*.domain` or `*.domain:port`
   * (IPv6 literals in brackets). Without a port only 80 and 443 are allowed.
   * Names are matched as the client sends them, before DNS resolution.
   */
  allow: readonly string[];
  /** Port of the proxy inside the sandbox (default 3128). */
  port?: number;
  /** Called for every decision, e.g. for an audit log. Never receives request bodies or headers. */
  onDecision?: (decision: EgressDecision) => void;
}

export interface EgressDecision {
  method: string;
  host: string;
  port: number;
  allowed: boolean;
}

interface Rule {
  host: string;
  wildcard: boolean;
  port: number | null;
}

const DEFAULT_PORTS = [80, 443];
const MAX_RULES = 1000;

/** Parses allowlist entries; throws with the offending entry named. */
export function parseAllowlist(entries: readonly string[]): Rule[] {
  if (entries.length > MAX_RULES) throw new Error(`egress allow: at most ${MAX_RULES} entries`);
  return entries.map((entry) => {
    const match = /^(\*\.)?(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(?::(\d{1,5}))?$/.exec(entry.trim());
    const port = match?.[3] === undefined ? null : Number(match[3]);
    if (!match || (port !== null && (port < 1 || port > 65535))) throw new Error(`egress allow: invalid entry ${JSON.stringify(entry)}`);
    return { host: normalizeHost(match[2] as string), wildcard: match[1] !== undefined, port };
  });
}

function normalizeHost(host: string): string {
  return host
    .replace(/^\[|\]$/g, "")
    .replace(/\.$/, "")
    .toLowerCase();
}

export function isAllowed(rules: readonly Rule[], host: string, port: number): boolean {
  const name = normalizeHost(host);
  return rules.some((rule) => {
    const hostOk = rule.wildcard ? name.endsWith(`.${rule.host}`) : name === rule.host;
    const portOk = rule.port === null ? DEFAULT_PORTS.includes(port) : rule.port === port;
    return hostOk && portOk;
  });
}

/** `host:port` of a CONNECT request, IPv6 in brackets. */
function parseAuthority(authority: string): { host: string; port: number } | null {
  const match = /^(\[[0-9a-fA-F:.]+\]|[^:\s/]+):(\d{1,5})$/.exec(authority);
  if (!match) return null;
  const port = Number(match[2]);
  return port >= 1 && port <= 65535 ? { host: normalizeHost(match[1] as string), port } : null;
}

/** The proxy for one sandbox; sockets accepted in the sandbox's namespace are handed to `accept`. */
export class EgressProxy {
  readonly #rules: Rule[];
  readonly #server: http.Server;
  readonly #sockets = new Set<net.Socket>();
  readonly #onDecision: EgressOptions["onDecision"];

  constructor(options: EgressOptions) {
    this.#rules = parseAllowlist(options.allow);
    this.#onDecision = options.onDecision;
    this.#server = http.createServer({ requestTimeout: 30_000, headersTimeout: 30_000 });
    this.#server.on("connect", (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => this.#tunnel(req, socket, head));
    this.#server.on("request", (req, res) => this.#forward(req, res));
  }

  #decide(method: string, host: string, port: number): boolean {
    const allowed = isAllowed(this.#rules, host, port);
    this.#onDecision?.({ method, host, port, allowed });
    return allowed;
  }

  accept(socket: net.Socket): void {
    this.#track(socket);
    this.#server.emit("connection", socket);
  }

  #track(socket: net.Socket): void {
    this.#sockets.add(socket);
    socket.once("close", () => this.#sockets.delete(socket));
    socket.on("error", () => socket.destroy());
  }

  #tunnel(req: http.IncomingMessage, client: net.Socket, head: Buffer): void {
    const target = parseAuthority(req.url ?? "");
    if (!target) {
      refuseSocket(client, "400 Bad Request", "CONNECT needs host:port\n");
      return;
    }
    if (!this.#decide("CONNECT", target.host, target.port)) {
      refuseSocket(client, "403 Forbidden", `egress to ${target.host}:${target.port} is not allowed by the sandbox egress policy\n`);
      return;
    }
    // The static allowlist names its destinations, so the name is connected to as given.
    openTunnel(client, head, target, target.host, { track: (socket) => this.#track(socket) });
  }

  #forward(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = absoluteHttpUrl(req, res);
    if (url === null) return;
    const port = url.port === "" ? 80 : Number(url.port);
    const host = normalizeHost(url.hostname);
    if (!this.#decide(req.method ?? "GET", host, port)) {
      res.writeHead(403, { "content-type": "text/plain" }).end(`egress to ${host}:${port} is not allowed by the sandbox egress policy\n`);
      return;
    }
    const headers = { ...req.headers };
    for (const name of HOP_BY_HOP) delete headers[name];
    const upstream = http.request({ host, port, method: req.method, path: `${url.pathname}${url.search}`, headers }, (answer) => {
      const out = { ...answer.headers };
      for (const name of HOP_BY_HOP) delete out[name];
      res.writeHead(answer.statusCode ?? 502, out);
      answer.pipe(res);
    });
    upstream.setTimeout(30_000, () => upstream.destroy(new Error("upstream timeout")));
    upstream.on("error", (err) => {
      if (!res.headersSent) res.writeHead(502, { "content-type": "text/plain" }).end(`cannot reach ${host}:${port}: ${err.message}\n`);
      else res.destroy();
    });
    req.pipe(upstream);
  }

  close(): void {
    for (const socket of this.#sockets) socket.destroy();
    this.#sockets.clear();
    this.#server.close();
  }
}

/** Proxy environment for processes in an egress sandbox. */
export const proxyEnv = sandboxProxyEnv;
