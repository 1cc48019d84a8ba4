/**
 * Egress for a sandbox whose network namespace has only a loopback
 * interface: the one way out is an HTTP proxy (CONNECT tunnels and
 * absolute-form plain HTTP) with a host allowlist.
 *
 * The proxy runs in the host process, in the host's network namespace. Its
 * listening socket, however, lives in the sandbox's namespace: a throwaway
 * `node` child entered into that namespace (`nsenter --net`) binds
 * 127.0.0.1:<port> there and hands the listening socket back over the IPC
 * channel, then exits. So the sandbox reaches `127.0.0.1:<port>` and nothing
 * else, no forwarder process stays behind, and no host port is opened.
 */
import { spawn } from "node:child_process";
import http from "node:http";
import net from "node:net";

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

const HOP_BY_HOP = [
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authorization",
  "proxy-authenticate",
  "te",
  "trailer",
  "upgrade",
];

function refuse(socket: net.Socket, status: string, text: string): void {
  socket.end(
    `HTTP/1.1 ${status}\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
  );
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
    this.#sockets.add(socket);
    socket.once("close", () => this.#sockets.delete(socket));
    socket.on("error", () => socket.destroy());
    this.#server.emit("connection", socket);
  }

  #tunnel(req: http.IncomingMessage, client: net.Socket, head: Buffer): void {
    const target = parseAuthority(req.url ?? "");
    if (!target) {
      refuse(client, "400 Bad Request", "CONNECT needs host:port\n");
      return;
    }
    if (!this.#decide("CONNECT", target.host, target.port)) {
      refuse(client, "403 Forbidden", `egress to ${target.host}:${target.port} is not allowed by the sandbox egress policy\n`);
      return;
    }
    const upstream = net.connect({ host: target.host, port: target.port });
    this.#sockets.add(upstream);
    upstream.once("close", () => this.#sockets.delete(upstream));
    upstream.setTimeout(30_000, () => upstream.destroy(new Error("connect timeout")));
    upstream.once("connect", () => {
      upstream.setTimeout(0);
      client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
      if (head.length > 0) upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    upstream.on("error", (err) => {
      if (!client.writableEnded && upstream.bytesRead === 0 && upstream.bytesWritten === 0) {
        refuse(client, "502 Bad Gateway", `cannot reach ${target.host}:${target.port}: ${err.message}\n`);
      } else client.destroy();
    });
    client.on("error", () => upstream.destroy());
    client.on("close", () => upstream.destroy());
  }

  #forward(req: http.IncomingMessage, res: http.ServerResponse): void {
    let url: URL;
    try {
      url = new URL(req.url ?? "");
    } catch {
      res.writeHead(400, { "content-type": "text/plain" }).end("the sandbox egress proxy only accepts absolute http:// URLs and CONNECT\n");
      return;
    }
    if (url.protocol !== "http:") {
      res.writeHead(400, { "content-type": "text/plain" }).end("use CONNECT for https\n");
      return;
    }
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

/** The throwaway child: binds in the namespace it was started in, sends the listening socket, exits. */
const LISTENER_SCRIPT = `
const net = require("node:net");
const port = Number(process.argv[1]);
const server = net.createServer();
server.once("error", (err) => { process.send({ error: err.message }, () => process.exit(1)); });
server.listen({ host: "127.0.0.1", port, exclusive: true }, () => {
  process.send({ listening: true }, server, () => { server.close(); process.disconnect(); });
});
`;

/**
 * A listening socket on 127.0.0.1:`port` inside the network namespace open
 * at `netnsFd` (a file descriptor of /proc/<pid>/ns/net), owned by this
 * process.
 */
export function listenInNetns(input: { nsenterPath: string; netnsFd: number; port: number; timeoutMs?: number }): Promise<net.Server> {
  const child = spawn(input.nsenterPath, ["--net=/proc/self/fd/3", "--", process.execPath, "-e", LISTENER_SCRIPT, String(input.port)], {
    stdio: ["ignore", "ignore", "pipe", input.netnsFd, "ipc"],
    env: {},
  });
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    if (stderr.length < 4096) stderr += chunk.toString("utf8");
  });
  return new Promise<net.Server>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error("egress listener: timed out"));
    }, input.timeoutMs ?? 10_000);
    child.on("message", (msg: { error?: string }, handle: unknown) => {
      clearTimeout(timer);
      if (handle instanceof net.Server) resolve(handle);
      else reject(new Error(`egress listener: ${msg?.error ?? "no socket received"}`));
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`egress listener exited (${code}): ${stderr.trim()}`));
    });
    child.once("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
  });
}

/** Proxy environment for processes in an egress sandbox (both spellings: tools disagree on case). */
export function proxyEnv(port: number): Record<string, string> {
  const url = `http://127.0.0.1:${port}`;
  return {
    HTTP_PROXY: url,
    HTTPS_PROXY: url,
    ALL_PROXY: url,
    http_proxy: url,
    https_proxy: url,
    all_proxy: url,
    NO_PROXY: "",
    no_proxy: "",
  };
}
