import { chmod, mkdir, rm } from "node:fs/promises";
import type { Server, Socket } from "node:net";
import { dirname } from "node:path";

/**
 * Listens on a unix socket that will be bound into sandboxes (their one way
 * out: the API bridge, the model gateway). Sandbox processes run as an
 * unprivileged host uid, so the directory gets search and the socket write
 * permission for everyone. `close` also ends open connections.
 */
export async function listenOnSandboxSocket(server: Server, socketPath: string): Promise<{ close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await mkdir(dirname(socketPath), { recursive: true, mode: 0o755 });
  await chmod(dirname(socketPath), 0o755);
  await rm(socketPath, { force: true });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(socketPath, () => resolve());
  });
  await chmod(socketPath, 0o666);
  return {
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await rm(socketPath, { force: true });
    },
  };
}
