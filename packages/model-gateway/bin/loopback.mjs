/**
 * A loopback TCP port forwarding every connection to a unix socket: how a
 * program inside a sandbox (no network) reaches a host socket bound in
 * (the model gateway, the API bridge) when its HTTP client only speaks TCP.
 * Dependency-free on purpose: `tcp-to-unix.mjs` runs it as a plain file on
 * whatever node the sandbox image has, and the ACP harness bundle builds it in.
 */
import { createConnection, createServer } from "node:net";

/**
 * Listens on 127.0.0.1:`port` (0: any free port) and resolves with the server
 * and the port it got.
 *
 * @param {string} socketPath
 * @param {number} [port]
 * @returns {Promise<{ server: import("node:net").Server; port: number }>}
 */
export function forwardLoopbackTo(socketPath, port = 0) {
  return new Promise((resolve, reject) => {
    const server = createServer((client) => {
      const upstream = createConnection(socketPath);
      const close = () => {
        client.destroy();
        upstream.destroy();
      };
      client.on("error", close).on("close", close);
      upstream.on("error", close).on("close", close);
      client.pipe(upstream).pipe(client);
    });
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => {
      const address = server.address();
      resolve({ server, port: typeof address === "object" && address ? address.port : port });
    });
  });
}
