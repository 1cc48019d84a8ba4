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
 * runs on whatever node the sandbox image has (with its sibling loopback.mjs).
 */
import { forwardLoopbackTo } from "./loopback.mjs";

const [port, socketPath] = process.argv.slice(2);
if (!port || !socketPath || !/^[0-9]{1,5}$/.test(port)) {
  process.stderr.write("usage: tcp-to-unix.mjs PORT SOCKET_PATH\n");
  process.exit(2);
}
await forwardLoopbackTo(socketPath, Number(port));
process.stdout.write("listening\n");
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
