/**
 * The only way out of an ama_worker sandbox: a unix socket, bound into the
 * sandbox, whose every connection is forwarded to the control plane's HTTP
 * listener. Sandboxes keep `network: none` (no interface but loopback), so
 * the official worker reaches exactly one service and nothing else on the
 * host or the internet. One bridge serves every sandbox of a runtime host.
 */
import { chmod, mkdir, rm } from "node:fs/promises";
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { dirname } from "node:path";

export interface ApiBridge {
  readonly socketPath: string;
  close(): Promise<void>;
}

export async function openApiBridge(options: { socketPath: string; apiUrl: string }): Promise<ApiBridge> {
  const target = new URL(options.apiUrl);
  if (target.protocol !== "http:")
    throw new Error(`the API bridge forwards plain HTTP only (got ${target.protocol}); point it at the local listener`);
  const port = Number(target.port || 80);
  const host = target.hostname.replace(/^\[|\]$/g, "");
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = createConnection({ host, port });
    sockets.add(client).add(upstream);
    const close = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on("error", close).on("close", close);
    upstream.on("error", close).on("close", close);
    client.pipe(upstream).pipe(client);
  });
  // Sandbox processes run as an unprivileged uid: they need search on the directory and write on the socket.
  await mkdir(dirname(options.socketPath), { recursive: true, mode: 0o755 });
  await chmod(dirname(options.socketPath), 0o755);
  await rm(options.socketPath, { force: true });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.socketPath, () => resolve());
  });
  await chmod(options.socketPath, 0o666);
  return {
    socketPath: options.socketPath,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await rm(options.socketPath, { force: true });
    },
  };
}
