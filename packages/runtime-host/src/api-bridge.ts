/**
 * The only way out of an ama_worker sandbox: a unix socket, bound into the
 * sandbox, whose every connection is forwarded to the control plane's HTTP
 * listener. Sandboxes keep `network: none` (no interface but loopback), so
 * the official worker reaches exactly one service and nothing else on the
 * host or the internet. One bridge serves every sandbox of a runtime host.
 */
import { createConnection, createServer, type Server, type Socket } from "node:net";
import { listenOnSandboxSocket } from "@openma/driver-kit";

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
  const listening = await listenOnSandboxSocket(server, options.socketPath);
  return {
    socketPath: options.socketPath,
    async close() {
      for (const socket of sockets) socket.destroy();
      await listening.close();
    },
  };
}
