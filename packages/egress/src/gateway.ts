/**
 * The egress gateway of one sandbox: a forward proxy (absolute-form HTTP
 * and CONNECT) that is the sandbox's only way out. It
 * - resolves every name itself and applies the environment's policy to the
 *   name and to each resolved address (see policy.ts), then connects to the
 *   address it checked;
 * - answers a refusal with HTTP 403 and a reason, and reports every decision
 *   as a structured audit event (names and numbers only, never a header,
 *   body or secret);
 * - substitutes credential placeholders with the real secrets on requests to
 *   each credential's allowed hosts, in headers and/or body as the
 *   credential's `injection_location` says. HTTPS to such a host is
 *   terminated here with a certificate from the sandbox's own CA and sent on
 *   over a fresh TLS connection that verifies the real server; HTTPS to any
 *   other host is tunnelled untouched.
 *
 * Connections are handed in with `accept` (they were accepted on a socket
 * inside the sandbox's network namespace); the gateway opens no port.
 */
import { lookup as dnsLookup } from "node:dns/promises";
import http from "node:http";
import https from "node:https";
import net from "node:net";
import tls from "node:tls";
import type { SandboxCa } from "./ca.ts";
import { addressRefusal, type EgressPolicy, hostMatchesAny, normalizeHost } from "./policy.ts";

export interface EgressCredential {
  /** The variable name the sandbox sees the placeholder under. */
  secretName: string;
  /** The value the sandbox sees instead of the secret. */
  placeholder: string;
  secret: string;
  /** Hosts the secret may be sent to (host patterns); null: any host the environment allows. */
  hosts: readonly string[] | null;
  header: boolean;
  body: boolean;
}

export interface EgressAuditEvent {
  type: "egress.allowed" | "egress.denied";
  sandbox: string;
  method: string;
  host: string;
  port: number;
  /** The address connected to (allowed) or refused. */
  address?: string;
  reason?: string;
  /** HTTPS terminated at the gateway (credential substitution). */
  intercepted?: boolean;
  /** Names of the credentials substituted into this request. */
  credentials?: string[];
}

export type Lookup = (host: string) => Promise<string[]>;

export interface EgressGatewayOptions {
  /** Identifies the sandbox in audit events. */
  sandbox: string;
  policy: EgressPolicy;
  credentials?: readonly EgressCredential[];
  /** Needed when a credential exists: intercepted HTTPS is served with its certificates. */
  ca?: SandboxCa;
  /** Certificates trusted for upstream TLS besides the system's (e.g. a private registry's CA). */
  upstreamCa?: readonly string[];
  lookup?: Lookup;
  onAudit?: (event: EgressAuditEvent) => void;
  /** Largest request body buffered for substitution (default 8 MiB); a larger one is refused with 413. */
  maxBodyBytes?: number;
  timeoutMs?: number;
}

/** Connection-level headers a proxy never forwards. */
export const HOP_BY_HOP = [
  "connection",
  "keep-alive",
  "proxy-connection",
  "proxy-authorization",
  "proxy-authenticate",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
];

const defaultLookup: Lookup = async (host) => (await dnsLookup(host, { all: true, verbatim: true })).map((a) => a.address);

/** `host:port` of a CONNECT request, IPv6 in brackets. */
export function parseAuthority(authority: string): { host: string; port: number } | null {
  const match = /^(\[[0-9a-fA-F:.]+\]|[^:\s/[\]]+):(\d{1,5})$/.exec(authority);
  if (!match) return null;
  const port = Number(match[2]);
  return port >= 1 && port <= 65535 ? { host: normalizeHost(match[1] as string), port } : null;
}

/** Replaces every occurrence of each placeholder in `data`; returns the names used. */
export function substituteBuffer(data: Buffer, credentials: readonly EgressCredential[]): { data: Buffer; used: string[] } {
  let out = data;
  const used: string[] = [];
  for (const credential of credentials) {
    const needle = Buffer.from(credential.placeholder, "utf8");
    if (needle.length === 0 || out.indexOf(needle) < 0) continue;
    const secret = Buffer.from(credential.secret, "utf8");
    const parts: Buffer[] = [];
    let from = 0;
    for (let at = out.indexOf(needle); at >= 0; at = out.indexOf(needle, from)) {
      parts.push(out.subarray(from, at), secret);
      from = at + needle.length;
    }
    parts.push(out.subarray(from));
    out = Buffer.concat(parts);
    used.push(credential.secretName);
  }
  return { data: out, used };
}

function substituteText(text: string, credentials: readonly EgressCredential[], used: Set<string>): string {
  let out = text;
  for (const c of credentials) {
    if (c.placeholder.length > 0 && out.includes(c.placeholder)) {
      out = out.split(c.placeholder).join(c.secret);
      used.add(c.secretName);
    }
  }
  return out;
}

export function refuseSocket(socket: net.Socket, status: string, text: string): void {
  socket.end(
    `HTTP/1.1 ${status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(text)}\r\nConnection: close\r\n\r\n${text}`,
  );
}

interface Target {
  host: string;
  port: number;
  address: string;
}

type Admission = { ok: true; address: string } | { ok: false; reason: string };

export class EgressGateway {
  readonly #options: EgressGatewayOptions;
  readonly #lookup: Lookup;
  readonly #outer: http.Server;
  /** Serves requests decrypted from intercepted CONNECT tunnels. */
  readonly #inner: http.Server;
  readonly #targets = new WeakMap<net.Socket, Target>();
  readonly #sockets = new Set<net.Socket>();
  readonly #upstreamCa: string[] | undefined;
  #closed = false;

  constructor(options: EgressGatewayOptions) {
    if ((options.credentials?.length ?? 0) > 0 && !options.ca) throw new Error("egress gateway: credentials need a sandbox CA");
    this.#options = options;
    this.#lookup = options.lookup ?? defaultLookup;
    this.#upstreamCa = options.upstreamCa?.length ? [...tls.rootCertificates, ...options.upstreamCa] : undefined;
    const timeout = options.timeoutMs ?? 30_000;
    this.#outer = http.createServer({ requestTimeout: timeout, headersTimeout: timeout });
    this.#outer.on("connect", (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
      // A failure here must cost the one connection, never the host process.
      this.#connect(req, socket, head).catch(() => socket.destroy());
    });
    this.#outer.on("request", (req, res) => {
      this.#plain(req, res).catch(() => res.destroy());
    });
    this.#inner = http.createServer({ requestTimeout: timeout, headersTimeout: timeout });
    this.#inner.on("request", (req, res) => {
      this.#intercepted(req, res).catch(() => res.destroy());
    });
  }

  /** A connection accepted inside the sandbox. */
  accept(socket: net.Socket): void {
    if (this.#closed) {
      socket.destroy();
      return;
    }
    this.#track(socket);
    this.#outer.emit("connection", socket);
  }

  close(): void {
    this.#closed = true;
    for (const socket of this.#sockets) socket.destroy();
    this.#sockets.clear();
    this.#outer.close();
    this.#inner.close();
  }

  #track(socket: net.Socket): void {
    this.#sockets.add(socket);
    socket.once("close", () => this.#sockets.delete(socket));
    socket.on("error", () => socket.destroy());
  }

  #audit(event: Omit<EgressAuditEvent, "sandbox">): void {
    this.#options.onAudit?.({ sandbox: this.#options.sandbox, ...event });
  }

  /** Name policy, then resolution, then every resolved address; audited when refused. */
  async #admit(method: string, host: string, port: number): Promise<Admission> {
    const byName = this.#options.policy.hostRefusal(host);
    if (byName) return this.#deny(method, host, port, byName);
    let addresses: string[];
    try {
      addresses = net.isIP(host) ? [host] : await this.#lookup(host);
    } catch (err) {
      return this.#deny(method, host, port, `cannot resolve ${host}: ${(err as NodeJS.ErrnoException).code ?? "error"}`);
    }
    if (addresses.length === 0) return this.#deny(method, host, port, `cannot resolve ${host}`);
    for (const address of addresses) {
      const refusal = addressRefusal(address);
      if (refusal) return this.#deny(method, host, port, refusal, address);
    }
    return { ok: true, address: addresses[0] as string };
  }

  #deny(method: string, host: string, port: number, reason: string, address?: string): Admission {
    this.#audit({ type: "egress.denied", method, host, port, reason, ...(address ? { address } : {}) });
    return { ok: false, reason };
  }

  #credentialsFor(host: string): EgressCredential[] {
    return (this.#options.credentials ?? []).filter((c) => c.hosts === null || hostMatchesAny(host, c.hosts));
  }

  async #connect(req: http.IncomingMessage, client: net.Socket, head: Buffer): Promise<void> {
    const target = parseAuthority(req.url ?? "");
    if (!target) {
      refuseSocket(client, "400 Bad Request", "CONNECT needs host:port\n");
      return;
    }
    const admission = await this.#admit("CONNECT", target.host, target.port);
    if (!admission.ok) {
      refuseSocket(client, "403 Forbidden", `egress refused: ${admission.reason}\n`);
      return;
    }
    const credentials = this.#credentialsFor(target.host);
    if (credentials.length > 0 && this.#options.ca) {
      this.#intercept(client, head, { ...target, address: admission.address });
      return;
    }
    this.#audit({ type: "egress.allowed", method: "CONNECT", host: target.host, port: target.port, address: admission.address });
    openTunnel(client, head, target, admission.address, { track: (socket) => this.#track(socket), timeoutMs: this.#options.timeoutMs });
  }

  /** TLS with the sandbox CA's certificate for the target; the decrypted requests go to the inner server. */
  #intercept(client: net.Socket, head: Buffer, target: Target): void {
    const issued = (this.#options.ca as SandboxCa).issue(target.host);
    client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
    if (head.length > 0) client.unshift(head);
    const secure = new tls.TLSSocket(client, {
      isServer: true,
      secureContext: tls.createSecureContext({ key: issued.keyPem, cert: issued.certPem }),
      ALPNProtocols: ["http/1.1"],
    });
    this.#track(secure);
    this.#targets.set(secure, target);
    this.#inner.emit("connection", secure);
  }

  async #intercepted(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const target = this.#targets.get(req.socket as net.Socket);
    if (!target) {
      res.destroy();
      return;
    }
    await this.#send(req, res, target, req.url ?? "/", true);
  }

  async #plain(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = absoluteHttpUrl(req, res);
    if (url === null) return;
    const host = normalizeHost(url.hostname);
    const port = url.port === "" ? 80 : Number(url.port);
    const admission = await this.#admit(req.method ?? "GET", host, port);
    if (!admission.ok) {
      req.resume();
      res.writeHead(403, { "content-type": "text/plain; charset=utf-8" }).end(`egress refused: ${admission.reason}\n`);
      return;
    }
    await this.#send(req, res, { host, port, address: admission.address }, `${url.pathname}${url.search}`, false);
  }

  /** Forwards one request, substituting the credentials that cover the target host. */
  async #send(req: http.IncomingMessage, res: http.ServerResponse, target: Target, path: string, secure: boolean): Promise<void> {
    const credentials = this.#credentialsFor(target.host);
    const used = new Set<string>();
    const headers: http.OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (value === undefined || HOP_BY_HOP.includes(name)) continue;
      const inHeader = credentials.filter((c) => c.header);
      headers[name] = Array.isArray(value) ? value.map((v) => substituteText(v, inHeader, used)) : substituteText(value, inHeader, used);
    }
    let body: Buffer | null = null;
    const inBody = credentials.filter((c) => c.body);
    if (inBody.length > 0) {
      const read = await readBody(req, this.#options.maxBodyBytes ?? 8 * 1024 * 1024);
      if (read === null) {
        res.writeHead(413, { "content-type": "text/plain" }).end("egress refused: request body too large for credential substitution\n");
        return;
      }
      const result = substituteBuffer(read, inBody);
      body = result.data;
      for (const name of result.used) used.add(name);
      delete headers["content-length"];
      headers["content-length"] = String(body.length);
    } else if (req.headers["transfer-encoding"] !== undefined) delete headers["content-length"];
    this.#audit({
      type: "egress.allowed",
      method: req.method ?? "GET",
      host: target.host,
      port: target.port,
      address: target.address,
      ...(secure ? { intercepted: true } : {}),
      ...(used.size > 0 ? { credentials: [...used].sort() } : {}),
    });
    const options: https.RequestOptions = {
      host: target.address,
      port: target.port,
      method: req.method,
      path,
      headers,
      agent: false,
    };
    if (secure) {
      if (!net.isIP(target.host)) options.servername = target.host;
      else options.checkServerIdentity = (_name, cert) => tls.checkServerIdentity(target.host, cert);
      if (this.#upstreamCa) options.ca = this.#upstreamCa;
    }
    const upstream = (secure ? https : http).request(options, (answer) => {
      const out: http.OutgoingHttpHeaders = {};
      for (const [name, value] of Object.entries(answer.headers)) if (!HOP_BY_HOP.includes(name) && value !== undefined) out[name] = value;
      if (answer.headers["transfer-encoding"] !== undefined) delete out["content-length"];
      res.writeHead(answer.statusCode ?? 502, out);
      answer.pipe(res);
    });
    upstream.setTimeout(this.#options.timeoutMs ?? 30_000, () => upstream.destroy(new Error("upstream timeout")));
    upstream.on("error", (err) => {
      const code = (err as NodeJS.ErrnoException).code ?? err.message;
      if (!res.headersSent)
        res.writeHead(502, { "content-type": "text/plain" }).end(`egress gateway: cannot reach ${target.host}:${target.port}: ${code}\n`);
      else res.destroy();
    });
    if (body !== null) upstream.end(body);
    else req.pipe(upstream);
  }
}

/** Pipes a CONNECT tunnel to `address`; 502 to the client when the upstream cannot be reached. */
export function openTunnel(
  client: net.Socket,
  head: Buffer,
  target: { host: string; port: number },
  address: string,
  options: { track(socket: net.Socket): void; timeoutMs?: number },
): void {
  const upstream = net.connect({ host: address, port: target.port });
  options.track(upstream);
  upstream.setTimeout(options.timeoutMs ?? 30_000, () => upstream.destroy(new Error("connect timeout")));
  upstream.once("connect", () => {
    upstream.setTimeout(0);
    client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
    if (head.length > 0) upstream.write(head);
    upstream.pipe(client);
    client.pipe(upstream);
  });
  upstream.on("error", (err) => {
    if (!client.writableEnded && upstream.bytesRead === 0 && upstream.bytesWritten === 0) {
      const why = (err as NodeJS.ErrnoException).code ?? err.message;
      refuseSocket(client, "502 Bad Gateway", `cannot reach ${target.host}:${target.port}: ${why}\n`);
    } else client.destroy();
  });
  client.on("error", () => upstream.destroy());
  client.on("close", () => upstream.destroy());
}

/** The absolute http:// URL of a proxied request, or null after answering 400. */
export function absoluteHttpUrl(req: http.IncomingMessage, res: http.ServerResponse): URL | null {
  let url: URL;
  try {
    url = new URL(req.url ?? "");
  } catch {
    res.writeHead(400, { "content-type": "text/plain" }).end("the sandbox egress proxy accepts absolute http:// URLs and CONNECT\n");
    return null;
  }
  if (url.protocol !== "http:") {
    res.writeHead(400, { "content-type": "text/plain" }).end("use CONNECT for https\n");
    return null;
  }
  return url;
}

function readBody(req: http.IncomingMessage, max: number): Promise<Buffer | null> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > max) {
        req.removeAllListeners("data");
        req.resume();
        resolve(null);
        return;
      }
      chunks.push(chunk);
    });
    req.once("end", () => resolve(Buffer.concat(chunks)));
    req.once("error", reject);
  });
}
