/**
 * A listening socket inside another network namespace, owned by this
 * process: a throwaway `node` child entered into the namespace (`nsenter
 * --net`) binds 127.0.0.1:<port> there, hands the listening socket back over
 * the IPC channel and exits. The sandbox reaches `127.0.0.1:<port>` and
 * nothing else; no forwarder stays behind and no host port is opened. Works
 * for any namespace this process can open: a bubblewrap sandbox's or a
 * Docker container's (`/proc/<State.Pid>/ns/net`).
 */
import { spawn } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import net from "node:net";

const LISTENER_SCRIPT = `
const net = require("node:net");
const port = Number(process.argv[1]);
const server = net.createServer();
server.once("error", (err) => { process.send({ error: err.message }, () => process.exit(1)); });
server.listen({ host: "127.0.0.1", port, exclusive: true }, () => {
  process.send({ listening: true }, server, () => { server.close(); process.disconnect(); });
});
`;

/** A listening socket on 127.0.0.1:`port` inside the namespace open at `netnsFd` (a descriptor of /proc/<pid>/ns/net). */
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

/** `listenInNetns` for the namespace of process `pid` (opened and closed here). */
export async function listenInNetnsOf(input: { nsenterPath: string; pid: number; port: number; timeoutMs?: number }): Promise<net.Server> {
  const fd = openSync(`/proc/${input.pid}/ns/net`, "r");
  try {
    return await listenInNetns({ nsenterPath: input.nsenterPath, netnsFd: fd, port: input.port, timeoutMs: input.timeoutMs });
  } finally {
    closeSync(fd);
  }
}
