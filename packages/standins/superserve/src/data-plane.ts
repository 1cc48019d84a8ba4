/**
 * The data plane, served over TLS as `https://<sandboxHost>` (the SDK sends
 * `X-Superserve-Sandbox-Id`) and `https://boxd-<id>.<sandboxHost>` (the
 * exec WebSocket, whose host names the sandbox):
 *
 * - `POST /exec` runs a command to its end: `{stdout, stderr, exit_code}`.
 * - `POST /exec/stream` is SSE: `data: {"stdout": ...}` / `{"stderr": ...}`
 *   events, then `{"finished": true, "exit_code": n}`.
 * - `GET|POST /files?path=` read and write whole files (parents made).
 * - `GET /exec/connect` upgrades to a WebSocket with the subprotocols
 *   `superserve.exec.v1` and `token.<access token>`: the first text frame
 *   is the start `{command, working_dir, env, timeout_s}`; binary frames
 *   carry a channel byte (0 stdin from the client, 1 stdout and 2 stderr
 *   from the server); text frames `{"type":"stdin_close"}` and
 *   `{"type":"signal","name":...}` come from the client, and
 *   `{"finished":true,"exit_code":n}` ends the command. A connection that
 *   drops before the end kills the command.
 *
 * REST requests carry the access token in `X-Access-Token`. A stale token
 * (one that a resume or activate replaced) is refused with 401, a paused
 * sandbox with 503: the SDK answers both by activating (which resumes) and
 * retrying once with the fresh token.
 */
import type { IncomingMessage } from "node:http";
import { posix } from "node:path";
import {
  type FaultQueue,
  type Hangs,
  noteAuth,
  type RecordedRequest,
  recorder,
  type StandInEnv,
  type UpgradeRoute,
} from "@openma/standin-kit";
import { Hono } from "hono";
import type { WebSocket } from "ws";
import { apiError, type Ctx, playFault } from "./errors.ts";
import { ExecStart, runCommand } from "./exec.ts";
import type { SandboxRecord, SandboxTable } from "./sandboxes.ts";

export const SANDBOX_ID_HEADER = "x-superserve-sandbox-id";
export const EXEC_SUBPROTOCOL = "superserve.exec.v1";
const TOKEN_PREFIX = "token.";
const CH_STDIN = 0;
const CH_STDOUT = 1;
const CH_STDERR = 2;
const MAX_FILE_BYTES = 256 * 1024 * 1024;

export interface DataPlaneContext {
  table: SandboxTable;
  faults: FaultQueue;
  hangs: Hangs;
  requests: RecordedRequest[];
  /** The data-plane host the SDK derives (`sandbox.superserve.ai` for a custom control plane). */
  sandboxHost: string;
}

/** The sandbox id a request addresses: its `boxd-<id>.` host, or the routing header on the shared host. */
export function addressedId(host: string | undefined, header: string | undefined, sandboxHost: string): string | null {
  const name = (host ?? "").replace(/:\d+$/, "").toLowerCase();
  if (name === sandboxHost) return header ?? null;
  const suffix = `.${sandboxHost}`;
  if (!name.startsWith("boxd-") || !name.endsWith(suffix)) return null;
  return name.slice("boxd-".length, -suffix.length) || null;
}

const sse = (value: unknown) => new TextEncoder().encode(`data: ${JSON.stringify(value)}\n\n`);

export function dataPlaneApp(context: DataPlaneContext): Hono<StandInEnv> {
  const { table, faults, hangs } = context;
  const app = new Hono<StandInEnv>();
  app.use("*", recorder(context.requests));

  /** The addressed, live sandbox with a valid token, or the platform's refusal. */
  const sandbox = (c: Ctx): SandboxRecord | Response => {
    const id = addressedId(c.req.header("host"), c.req.header(SANDBOX_ID_HEADER), context.sandboxHost);
    const record = id === null ? undefined : table.get(id);
    const token = c.req.header("x-access-token");
    const ok = record !== undefined && table.accepts(record, token);
    noteAuth(c, token === undefined ? null : "x-access-token", ok);
    if (!record) return apiError(c, 404, "not_found", "Sandbox not found");
    if (!ok) return apiError(c, 401, "unauthorized", "Invalid or expired access token");
    if (record.status !== "active") return apiError(c, 503, "sandbox_not_active", `Sandbox is ${record.status}`);
    return record;
  };

  const startOf = async (c: Ctx) => ExecStart.safeParse(await c.req.json().catch(() => null));

  app.post("/exec", async (c) => {
    const record = sandbox(c);
    if (record instanceof Response) return record;
    const refused = await playFault(c, faults.take("exec"), { hangs, table, record });
    if (refused) return refused;
    const start = await startOf(c);
    if (!start.success) return apiError(c, 400, "invalid_request", start.error.issues[0]?.message ?? "invalid body");
    const out = { stdout: new TextDecoder(), stderr: new TextDecoder() };
    const text = { stdout: "", stderr: "" };
    const command = runCommand(record, start.data, (stream, chunk) => {
      text[stream] += out[stream].decode(chunk, { stream: true });
    });
    command.closeStdin();
    const end = await command.done;
    return c.json({ stdout: text.stdout + out.stdout.decode(), stderr: text.stderr + out.stderr.decode(), exit_code: end.exitCode });
  });

  app.post("/exec/stream", async (c) => {
    const record = sandbox(c);
    if (record instanceof Response) return record;
    const fault = faults.take("exec");
    const refused = await playFault(c, fault, { hangs, table, record });
    if (refused) return refused;
    const start = await startOf(c);
    if (!start.success) return apiError(c, 400, "invalid_request", start.error.issues[0]?.message ?? "invalid body");
    const cut = fault?.kind === "cut" ? (fault.afterBytes ?? 0) : null;
    const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
    let sent = 0;
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        const command = runCommand(record, start.data, (stream, chunk) => {
          if (sent < 0) return;
          if (cut !== null && sent + chunk.length > cut) {
            sent = -1;
            command.kill();
            controller.error(new Error("stream cut by an injected fault"));
            return;
          }
          sent += chunk.length;
          controller.enqueue(sse({ [stream]: decoders[stream].decode(chunk, { stream: true }) }));
        });
        command.closeStdin();
        c.req.raw.signal.addEventListener("abort", () => command.kill(), { once: true });
        void command.done.then((end) => {
          if (sent < 0) return;
          controller.enqueue(sse({ finished: true, exit_code: end.exitCode, ...(end.error ? { error: end.error } : {}) }));
          controller.close();
        });
      },
    });
    return c.body(body, 200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
  });

  const pathOf = (c: Ctx): string | null => {
    const path = c.req.query("path");
    if (!path?.startsWith("/") || path.split("/").includes("..")) return null;
    return posix.normalize(path);
  };

  /** The sandbox and path a `/files` request names, once its injected fault has played; or the response that ends it. */
  const filesTarget = async (c: Ctx) => {
    const record = sandbox(c);
    if (record instanceof Response) return record;
    const refused = await playFault(c, faults.take("files"), { hangs, table, record });
    if (refused) return refused;
    const path = pathOf(c);
    if (path === null) return apiError(c, 400, "invalid_path", "path must be absolute without '..' segments");
    return { record, path };
  };

  app.get("/files", async (c) => {
    const target = await filesTarget(c);
    if (target instanceof Response) return target;
    const { record, path } = target;
    const read = await record.box.tools.readFile({ path, maxBytes: MAX_FILE_BYTES, signal: c.req.raw.signal });
    if (read.type === "not_found") return apiError(c, 404, "not_found", `no such file: ${path}`);
    if (read.type === "not_a_file") return apiError(c, 400, "not_a_file", `${path} is not a file`);
    if (read.type !== "ok") return apiError(c, 500, "io_error", read.type === "too_large" ? "file too large" : read.message);
    return c.body(Buffer.from(read.content), 200, { "Content-Type": "application/octet-stream" });
  });

  app.post("/files", async (c) => {
    const target = await filesTarget(c);
    if (target instanceof Response) return target;
    const { record, path } = target;
    const content = new Uint8Array(await c.req.arrayBuffer());
    const made = await record.box.tools.exec({
      command: ["mkdir", "-p", "--", posix.dirname(path)],
      timeoutMs: 60_000,
      signal: c.req.raw.signal,
    });
    if (made.type !== "exited" || made.exitCode !== 0) return apiError(c, 500, "io_error", `could not create ${posix.dirname(path)}`);
    const wrote = await record.box.tools.writeFile({ path, content, mode: 0o644, signal: c.req.raw.signal });
    if (wrote.type !== "ok") return apiError(c, 500, "io_error", wrote.message);
    return c.body(null, 204);
  });

  return app;
}

/** The token a WebSocket upgrade offers in its subprotocols, and whether it speaks the exec protocol. */
function offered(request: IncomingMessage): { token: string | null; exec: boolean } {
  const protocols = (request.headers["sec-websocket-protocol"] ?? "").split(",").map((p) => p.trim());
  const token = protocols.find((p) => p.startsWith(TOKEN_PREFIX));
  return { token: token ? token.slice(TOKEN_PREFIX.length) : null, exec: protocols.includes(EXEC_SUBPROTOCOL) };
}

const refusal = (status: number, code: string, message: string) => ({ status, body: JSON.stringify({ error: { code, message } }) });

/** `GET /exec/connect`: the duplex exec WebSocket. */
export function execConnectRoute(context: DataPlaneContext): UpgradeRoute {
  const { table, faults, hangs } = context;
  const cuts = new WeakMap<IncomingMessage, number>();
  return {
    match: (path) => (path === "/exec/connect" ? {} : null),
    async accept(request) {
      const id = addressedId(request.headers.host, request.headers[SANDBOX_ID_HEADER] as string | undefined, context.sandboxHost);
      const record = id === null ? undefined : table.get(id);
      const { token, exec } = offered(request);
      if (!exec) return refusal(400, "invalid_request", `the ${EXEC_SUBPROTOCOL} subprotocol is required`);
      if (!record) return refusal(404, "not_found", "Sandbox not found");
      if (!table.accepts(record, token)) return refusal(401, "unauthorized", "Invalid or expired access token");
      if (record.status !== "active") return refusal(503, "sandbox_not_active", `Sandbox is ${record.status}`);
      const fault = faults.take("exec");
      if (fault?.kind === "cut") cuts.set(request, fault.afterBytes ?? 0);
      else if (fault?.kind === "status") return refusal(fault.status ?? 500, "internal_error", "An unexpected error occurred");
      else if (fault?.kind === "rate_limited") return refusal(429, "rate_limited", "Rate limit exceeded");
      else if (fault?.kind === "hang") {
        await hangs.hang();
        return refusal(503, "unavailable", "stand-in closing");
      } else if (fault?.kind === "vanish") {
        await table.destroy(record);
        return refusal(404, "not_found", "Sandbox not found");
      }
      return null;
    },
    open(socket, request) {
      const id = addressedId(request.headers.host, request.headers[SANDBOX_ID_HEADER] as string | undefined, context.sandboxHost);
      const record = id === null ? undefined : table.get(id);
      if (!record) {
        socket.close(1011, "sandbox not found");
        return;
      }
      serveExec(socket, record, cuts.get(request) ?? null);
    },
  };
}

/** One command over one exec socket; `cut` drops the connection once that many output bytes were sent. */
function serveExec(socket: WebSocket, record: SandboxRecord, cut: number | null): void {
  let command: ReturnType<typeof runCommand> | null = null;
  let sent = 0;
  let open = true;
  const send = (channel: number, chunk: Uint8Array) => {
    if (!open) return;
    if (cut !== null && sent + chunk.length > cut) {
      const room = Math.max(0, cut - sent);
      if (room > 0) socket.send(Buffer.concat([Buffer.from([channel]), Buffer.from(chunk.subarray(0, room))]));
      open = false;
      socket.terminate();
      command?.kill();
      return;
    }
    sent += chunk.length;
    socket.send(Buffer.concat([Buffer.from([channel]), Buffer.from(chunk)]));
  };
  socket.on("message", (data, isBinary) => {
    const bytes = Buffer.isBuffer(data) ? data : Buffer.from(data as ArrayBuffer);
    if (isBinary) {
      if (bytes[0] === CH_STDIN) command?.write(bytes.subarray(1));
      return;
    }
    const message = parse(bytes.toString("utf8"));
    if (message === null) return;
    if (command === null) {
      const start = ExecStart.safeParse(message);
      if (!start.success) {
        socket.send(JSON.stringify({ error: start.error.issues[0]?.message ?? "invalid start", finished: true, exit_code: 127 }));
        socket.close(1000);
        return;
      }
      command = runCommand(record, start.data, (stream, chunk) => send(stream === "stdout" ? CH_STDOUT : CH_STDERR, chunk));
      void command.done.then((end) => {
        if (!open) return;
        socket.send(JSON.stringify({ finished: true, exit_code: end.exitCode, ...(end.error ? { error: end.error } : {}) }));
        socket.close(1000);
      });
      return;
    }
    if (message.type === "stdin_close") command.closeStdin();
    else if (message.type === "signal") command.kill();
  });
  socket.on("close", () => {
    open = false;
    // The platform ends a command whose connection went away.
    command?.kill();
  });
}

function parse(text: string): Record<string, unknown> | null {
  try {
    const value = JSON.parse(text) as unknown;
    return typeof value === "object" && value !== null ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}
