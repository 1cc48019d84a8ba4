/**
 * `WSS /v1/sprites/{name}/exec`: the non-TTY binary protocol. Every frame
 * starts with a stream id: client → server 0 stdin and 4 end of stdin;
 * server → client 1 stdout, 2 stderr and 3 exit (one byte, the exit code).
 * JSON text frames from the client carry control messages
 * (`{"type":"signal","signal":"SIGKILL"}`, resize). A command outlives its
 * connection for `max_run_after_disconnect` (non-TTY default 10 s) and is
 * then killed, as on the platform.
 */
import type { IncomingMessage } from "node:http";
import type { Fault } from "@openma/standin-kit";
import type { WebSocket } from "ws";
import type { SpriteRecord, SpriteTable } from "./sprites.ts";

const STDOUT = 1;
const STDERR = 2;
const EXIT = 3;
const STDIN = 0;
const STDIN_EOF = 4;
const DEFAULT_RUN_AFTER_DISCONNECT_MS = 10_000;

export interface ExecRequest {
  argv: string[];
  cwd: string | undefined;
  env: Record<string, string>;
  runAfterDisconnectMs: number;
}

/** Go-style duration (`10s`, `1m30s`, `500ms`) to milliseconds; null when malformed. */
export function parseDuration(text: string): number | null {
  const units: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
  let total = 0;
  let rest = text.trim();
  if (rest === "0") return 0;
  while (rest.length > 0) {
    const match = /^(\d+(?:\.\d+)?)(ms|s|m|h)/.exec(rest);
    if (!match) return null;
    total += Number(match[1]) * (units[match[2] as string] as number);
    rest = rest.slice(match[0].length);
  }
  return total;
}

/** The query of an exec upgrade, or why it is refused. */
export function parseExecQuery(url: URL): ExecRequest | { error: string } {
  const cmd = url.searchParams.getAll("cmd");
  const path = url.searchParams.get("path");
  if (cmd.length === 0 && path === null) return { error: "cmd is required" };
  const argv = cmd.length > 0 ? [...cmd] : [path as string];
  const env: Record<string, string> = {};
  for (const pair of url.searchParams.getAll("env")) {
    const eq = pair.indexOf("=");
    if (eq <= 0) return { error: `env must be KEY=VALUE, got ${JSON.stringify(pair)}` };
    env[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  const after = url.searchParams.get("max_run_after_disconnect");
  const runAfterDisconnectMs = after === null ? DEFAULT_RUN_AFTER_DISCONNECT_MS : parseDuration(after);
  if (runAfterDisconnectMs === null) return { error: "max_run_after_disconnect must be a duration" };
  return { argv, cwd: url.searchParams.get("dir") ?? undefined, env, runAfterDisconnectMs };
}

const frame = (id: number, payload: Uint8Array) => Buffer.concat([Buffer.from([id]), Buffer.from(payload)]);

/** Runs one command for one connection; `fault` is a `cut` to play (drop the connection after some output). */
export function runExec(options: {
  socket: WebSocket;
  request: IncomingMessage;
  table: SpriteTable;
  sprite: SpriteRecord;
  exec: ExecRequest;
  cut: Extract<Fault, { kind: "cut" }> | null;
}): void {
  const { socket, table, sprite, exec, cut } = options;
  let sent = 0;
  let connected = true;
  const stop = new AbortController();
  table.begin(sprite);
  const send = (id: number, payload: Uint8Array) => {
    if (!connected) return;
    if (cut !== null && sent + payload.length > (cut.afterBytes ?? 0)) {
      // Cut the stream mid-exec: what fits is delivered, then the TCP connection just drops.
      const room = Math.max(0, (cut.afterBytes ?? 0) - sent);
      if (room > 0) socket.send(frame(id, payload.subarray(0, room)));
      connected = false;
      socket.terminate();
      return;
    }
    sent += payload.length;
    socket.send(frame(id, payload));
  };
  const started = sprite.box.tools.spawn({
    command: exec.argv,
    cwd: exec.cwd ?? "/",
    env: exec.env,
    signal: stop.signal,
    onOutput: (stream, chunk) => send(stream === "stdout" ? STDOUT : STDERR, chunk),
  });
  let killTimer: NodeJS.Timeout | null = null;
  socket.on("message", (data, isBinary) => {
    const bytes = Buffer.isBuffer(data) ? data : Buffer.from(data as ArrayBuffer);
    if (!isBinary) {
      const message = safeJson(bytes.toString("utf8"));
      if (message?.type === "signal") stop.abort();
      return;
    }
    if (bytes.length === 0) return;
    void started.then((proc) => {
      if (bytes[0] === STDIN) void proc.write(bytes.subarray(1)).catch(() => {});
      else if (bytes[0] === STDIN_EOF) proc.closeStdin();
    });
  });
  socket.on("close", () => {
    if (!connected) return;
    connected = false;
    killTimer = setTimeout(() => stop.abort(), exec.runAfterDisconnectMs);
    killTimer.unref();
  });
  void started
    .then((proc) => proc.done)
    .then((result) => {
      if (killTimer) clearTimeout(killTimer);
      let code: number;
      if (result.type === "exited") code = result.exitCode;
      else if (result.type === "error") {
        send(STDERR, Buffer.from(`${result.message}\n`));
        code = 127;
      } else code = 137; // killed by SIGKILL
      send(EXIT, Buffer.from([code & 0xff]));
      table.end(sprite);
      // The platform holds the socket open a while after the exit frame; the SDK closes first.
      const linger = setTimeout(() => socket.close(1000), 5_000);
      linger.unref();
      socket.once("close", () => clearTimeout(linger));
    });
}

function safeJson(text: string): { type?: string } | null {
  try {
    return JSON.parse(text) as { type?: string };
  } catch {
    return null;
  }
}
