#!/usr/bin/env node
/**
 * Runs inside a sandbox: listens on 127.0.0.1:PORT (the sandbox's own
 * loopback) and forwards each connection to a unix socket bound in from the
 * host (the model gateway). Agents that only speak TCP base URLs reach their
 * model through it; nothing else leaves the sandbox.
 *
 *   node tcp-to-unix.mjs PORT SOCKET_PATH
 *
 * Prints "listening" on stdout once ready. Dependency-free on purpose: it
 * runs on whatever node the sandbox image has.
 */
import { createConnection, createServer } from "node:net";

const [port, socketPath] = process.argv.slice(2);
if (!port || !socketPath || !/^[0-9]{1,5}$/.test(port)) {
  process.stderr.write("usage: tcp-to-unix.mjs PORT SOCKET_PATH\n");
  process.exit(2);
}
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
server.listen(Number(port), "127.0.0.1", () => process.stdout.write("listening\n"));
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
