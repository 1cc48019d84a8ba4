/**
 * The sandbox's only way out: a unix socket forwarded to a real HTTP
 * listener (node:http on loopback). Checks the bytes both ways, the
 * permissions an unprivileged sandbox uid needs, and that close() leaves
 * neither the socket file nor open connections behind.
 */
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, mkdir, mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { createServer, request, type Server } from "node:http";
import { type AddressInfo, createConnection, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type ApiBridge, openApiBridge } from "./api-bridge.ts";

/** A loopback HTTP server that echoes each request body and names the method and path it saw in `x-seen`. */
async function startUpstream(): Promise<{ server: Server; url: string; sockets: Set<Socket> }> {
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      res.setHeader("x-seen", `${req.method} ${req.url}`);
      res.end(Buffer.concat(chunks));
    });
  });
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, sockets };
}

/** One HTTP exchange over the unix socket. */
function viaSocket(socketPath: string, path: string, body: Buffer): Promise<{ status: number; seen: string; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path, method: "POST", headers: { "content-length": body.length } }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, seen: String(res.headers["x-seen"]), body: Buffer.concat(chunks) }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

const closed = (socket: Socket) => new Promise<void>((resolve) => (socket.destroyed ? resolve() : socket.once("close", () => resolve())));

describe("openApiBridge", () => {
  let dir: string;
  let upstream: Awaited<ReturnType<typeof startUpstream>>;
  let bridge: ApiBridge | undefined;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "openma-bridge-"));
    upstream = await startUpstream();
  });
  afterEach(async () => {
    await bridge?.close();
    bridge = undefined;
    upstream.server.closeAllConnections();
    await new Promise<void>((resolve) => upstream.server.close(() => resolve()));
    await rm(dir, { recursive: true, force: true });
  });

  it("forwards request and response bytes between the socket and the HTTP listener", async () => {
    bridge = await openApiBridge({ socketPath: join(dir, "run", "api.sock"), apiUrl: upstream.url });
    const small = await viaSocket(bridge.socketPath, "/v1/sessions/sesn_1/events?beta=true", Buffer.from("hello"));
    expect(small).toMatchObject({ status: 200, seen: "POST /v1/sessions/sesn_1/events?beta=true" });
    expect(small.body.toString()).toBe("hello");
    // Large enough to span many socket writes in both directions.
    const payload = randomBytes(4 * 1024 * 1024);
    const large = await viaSocket(bridge.socketPath, "/upload", payload);
    expect(large.body.equals(payload)).toBe(true);
  });

  it("serves several connections at once", async () => {
    bridge = await openApiBridge({ socketPath: join(dir, "api.sock"), apiUrl: upstream.url });
    const socketPath = bridge.socketPath;
    const answers = await Promise.all([1, 2, 3, 4].map((n) => viaSocket(socketPath, `/n/${n}`, Buffer.from(`body ${n}`))));
    expect(answers.map((a) => `${a.seen} -> ${a.body}`)).toEqual([1, 2, 3, 4].map((n) => `POST /n/${n} -> body ${n}`));
  });

  it("makes the socket writable (0666) in a searchable (0755) directory, even one that existed with 0700", async () => {
    const runDir = join(dir, "run");
    await mkdir(runDir, { mode: 0o700 });
    await chmod(runDir, 0o700);
    bridge = await openApiBridge({ socketPath: join(runDir, "api.sock"), apiUrl: upstream.url });
    const socket = await stat(bridge.socketPath);
    expect(socket.isSocket()).toBe(true);
    expect(socket.mode & 0o777).toBe(0o666);
    expect((await stat(runDir)).mode & 0o777).toBe(0o755);
  });

  it("replaces a stale file at the socket path", async () => {
    const socketPath = join(dir, "api.sock");
    await writeFile(socketPath, "left by a crashed host");
    bridge = await openApiBridge({ socketPath, apiUrl: upstream.url });
    expect((await stat(socketPath)).isSocket()).toBe(true);
    expect((await viaSocket(socketPath, "/", Buffer.from("ok"))).body.toString()).toBe("ok");
  });

  it("close() ends open connections on both sides and removes the socket", async () => {
    const opened = await openApiBridge({ socketPath: join(dir, "api.sock"), apiUrl: upstream.url });
    const client = createConnection(opened.socketPath);
    await new Promise<void>((resolve, reject) => client.once("connect", resolve).once("error", reject));
    client.on("error", () => {});
    // A request without its end keeps the connection open upstream.
    client.write("POST /slow HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nabc");
    const upstreamSide = await new Promise<Socket>((resolve) => {
      const [first] = upstream.sockets;
      if (first) resolve(first);
      else upstream.server.once("connection", resolve);
    });
    await opened.close();
    await Promise.all([closed(client), closed(upstreamSide)]);
    expect(existsSync(opened.socketPath)).toBe(false);
  });

  it("closes the client's connection when the listener is unreachable", async () => {
    const gone = await startUpstream();
    await new Promise<void>((resolve) => gone.server.close(() => resolve()));
    bridge = await openApiBridge({ socketPath: join(dir, "api.sock"), apiUrl: gone.url });
    const client = createConnection(bridge.socketPath);
    client.on("error", () => {});
    await closed(client);
  });

  it("refuses a URL that is not plain http, before creating anything", async () => {
    const socketPath = join(dir, "run", "api.sock");
    await expect(openApiBridge({ socketPath, apiUrl: "https://127.0.0.1:8787" })).rejects.toThrow(/plain HTTP only \(got https:\)/);
    await expect(openApiBridge({ socketPath, apiUrl: "unix:///tmp/x.sock" })).rejects.toThrow(/plain HTTP only/);
    expect(existsSync(join(dir, "run"))).toBe(false);
  });
});
