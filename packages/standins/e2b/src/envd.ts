/**
 * envd, the daemon inside every E2B sandbox, as the SDK reaches it through
 * `E2B_SANDBOX_URL` (one URL for every sandbox: the `E2b-Sandbox-Id` header
 * routes, `X-Access-Token` authenticates):
 *
 *   GET  /health                          204 while the sandbox runs, 502 (the proxy) when it is gone or paused
 *   GET  /files?path=                     download (404 / 400 with `{"code","message"}`)
 *   POST /files?path=                     upload, octet-stream or multipart
 *   POST /process.Process/Start           server stream: start {pid}, data {stdout|stderr}, end {exitCode}
 *   POST /process.Process/SendInput       unary, stdin bytes
 *   POST /process.Process/CloseStdin      unary
 *   POST /process.Process/SendSignal      unary, SIGNAL_SIGKILL / SIGNAL_SIGTERM
 *   POST /process.Process/List            unary
 *
 * Commands run as the box's root (envd's users are not modelled) and keep
 * running when their stream disconnects, as on envd; a signal kills the
 * whole process tree.
 */
import { posix } from "node:path";
import { type Fault, noteAuth, type StandInEnv } from "@openma/standin-kit";
import type { Context, Hono } from "hono";
import { ConnectError, endStream, envelope, readEnvelope, unaryError } from "./connect.ts";
import type { ControlDeps } from "./control.ts";
import type { EnvdProcess, SandboxRecord } from "./sandboxes.ts";

type Ctx = Context<StandInEnv>;

const MAX_FILE_BYTES = 256 * 1024 * 1024;
const HOME = "/home/user";

/** The proxy's answer for a sandbox that is not running (the SDK maps 502 to "sandbox timed out"). */
function proxyError(c: Ctx, id: string, message: string): Response {
  return c.json({ sandboxId: id, message, code: 502 }, 502);
}

function envdError(c: Ctx, status: number, message: string): Response {
  return c.json({ code: status, message }, status as 400);
}

type Routed = { sandbox: SandboxRecord } | { response: Response };

/** The sandbox a request is for: routed by header, authenticated by its envd token. */
function route(c: Ctx, deps: ControlDeps): Routed {
  const id = c.req.header("e2b-sandbox-id") ?? "";
  const token = c.req.header("x-access-token");
  const sandbox = deps.table.get(id);
  if (!sandbox) {
    noteAuth(c, token === undefined ? null : "x-access-token", false);
    return { response: proxyError(c, id, `The sandbox ${id} was not found`) };
  }
  const ok = token === sandbox.envdAccessToken;
  noteAuth(c, token === undefined ? null : "x-access-token", ok);
  if (!ok) return { response: envdError(c, 401, "invalid access token") };
  if (deps.table.state(sandbox) === "paused") return { response: proxyError(c, id, `The sandbox ${id} is paused`) };
  return { sandbox };
}

/** A queued fault for an envd call, rendered as the edge proxy or envd would. */
async function envdFault(c: Ctx, deps: ControlDeps, op: Fault["op"], sandbox: SandboxRecord): Promise<Response | Fault | null> {
  const fault = deps.faults.take(op);
  if (fault === undefined) return null;
  if (fault.kind === "cut") return fault;
  if (fault.kind === "status") return envdError(c, fault.status ?? 500, "internal error");
  if (fault.kind === "rate_limited") {
    c.header("Retry-After", String(fault.retryAfterSeconds ?? 1));
    return envdError(c, 429, "too many requests");
  }
  if (fault.kind === "hang") {
    await deps.hangs.hang();
    return envdError(c, 503, "the stand-in is closing");
  }
  await deps.table.kill(sandbox);
  return proxyError(c, sandbox.sandboxID, `The sandbox ${sandbox.sandboxID} was not found`);
}

const resolvePath = (path: string | undefined) => posix.resolve(HOME, path ?? "");

export function mountEnvd(app: Hono<StandInEnv>, deps: ControlDeps): void {
  app.get("/health", (c) => {
    const routed = route(c, deps);
    return "response" in routed ? routed.response : c.body(null, 204);
  });

  app.get("/files", async (c) => {
    const routed = route(c, deps);
    if ("response" in routed) return routed.response;
    const faulted = await envdFault(c, deps, "files", routed.sandbox);
    if (faulted instanceof Response) return faulted;
    const path = resolvePath(c.req.query("path"));
    const read = await routed.sandbox.box.tools.readFile({ path, maxBytes: MAX_FILE_BYTES, signal: c.req.raw.signal });
    if (read.type === "not_found") return envdError(c, 404, `path '${path}' does not exist`);
    if (read.type === "not_a_file") return envdError(c, 400, `path '${path}' is a ${read.kind}`);
    if (read.type !== "ok") return envdError(c, 500, read.type === "too_large" ? "file too large" : read.message);
    return c.body(Buffer.from(read.content), 200, { "Content-Type": "application/octet-stream" });
  });

  app.post("/files", async (c) => {
    const routed = route(c, deps);
    if ("response" in routed) return routed.response;
    const faulted = await envdFault(c, deps, "files", routed.sandbox);
    if (faulted instanceof Response) return faulted;
    const uploads: { path: string; content: Uint8Array }[] = [];
    const type = c.req.header("content-type") ?? "";
    if (type.startsWith("multipart/form-data")) {
      const form = await c.req.formData();
      for (const part of form.getAll("file")) {
        if (typeof part === "string") continue;
        uploads.push({ path: resolvePath(c.req.query("path") ?? part.name), content: new Uint8Array(await part.arrayBuffer()) });
      }
    } else {
      uploads.push({ path: resolvePath(c.req.query("path")), content: new Uint8Array(await c.req.arrayBuffer()) });
    }
    if (uploads.length === 0) return envdError(c, 400, "no file in the request");
    const written = [];
    for (const upload of uploads) {
      const wrote = await routed.sandbox.box.tools.writeFile({
        path: upload.path,
        content: upload.content,
        mode: 0o644,
        signal: c.req.raw.signal,
      });
      if (wrote.type !== "ok") return envdError(c, 500, `error writing file '${upload.path}': ${wrote.message}`);
      written.push({ name: posix.basename(upload.path), path: upload.path, type: "file" });
    }
    return c.json(written);
  });

  app.post("/process.Process/Start", (c) => startProcess(c, deps));

  const unary = (name: string, handle: (sandbox: SandboxRecord, message: Record<string, unknown>) => Promise<unknown>) =>
    app.post(`/process.Process/${name}`, async (c) => {
      const routed = route(c, deps);
      if ("response" in routed) return routed.response;
      try {
        const message = (await c.req.json().catch(() => {
          throw new ConnectError("invalid_argument", "the message is not valid JSON");
        })) as Record<string, unknown>;
        return c.json((await handle(routed.sandbox, message)) ?? {});
      } catch (err) {
        return unaryError(err instanceof ConnectError ? err : new ConnectError("internal", String(err)));
      }
    });

  unary("SendInput", async (sandbox, message) => {
    const input = (message.input ?? {}) as { stdin?: unknown };
    if (typeof input.stdin !== "string") throw new ConnectError("invalid_argument", "input.stdin is required");
    await selected(sandbox, message.process).write(Buffer.from(input.stdin, "base64"));
  });
  unary("CloseStdin", async (sandbox, message) => {
    selected(sandbox, message.process).closeStdin();
  });
  unary("SendSignal", async (sandbox, message) => {
    const signal = message.signal;
    if (!["SIGNAL_SIGKILL", "SIGNAL_SIGTERM", 9, 15].includes(signal as string))
      throw new ConnectError("invalid_argument", "unsupported signal");
    selected(sandbox, message.process).kill();
  });
  unary("List", async (sandbox) => ({
    processes: [...sandbox.processes.values()].map((p) => ({
      pid: p.pid,
      tag: p.tag,
      config: { cmd: p.cmd, args: p.args, envs: {}, cwd: p.cwd },
    })),
  }));
  for (const name of ["Connect", "Update", "StreamInput"]) {
    app.post(`/process.Process/${name}`, () =>
      unaryError(new ConnectError("unimplemented", `process.Process/${name} is not implemented by the stand-in`)),
    );
  }
}

function selected(sandbox: SandboxRecord, selector: unknown): EnvdProcess {
  const { pid, tag } = (selector ?? {}) as { pid?: unknown; tag?: unknown };
  const found =
    typeof pid === "number" ? sandbox.processes.get(pid) : [...sandbox.processes.values()].find((p) => tag !== undefined && p.tag === tag);
  if (!found)
    throw new ConnectError("not_found", `process with ${typeof pid === "number" ? `pid ${pid}` : `tag ${String(tag)}`} not found`);
  return found;
}

/** `process.Process/Start`: the stream stays open until the process ends (keepalive events meanwhile). */
async function startProcess(c: Ctx, deps: ControlDeps): Promise<Response> {
  const routed = route(c, deps);
  if ("response" in routed) return routed.response;
  const { sandbox } = routed;
  let request: { process?: { cmd?: unknown; args?: unknown; envs?: unknown; cwd?: unknown }; tag?: unknown; stdin?: unknown };
  try {
    request = readEnvelope(new Uint8Array(await c.req.arrayBuffer())) as typeof request;
  } catch (err) {
    return unaryError(err as ConnectError);
  }
  const config = request.process ?? {};
  if (typeof config.cmd !== "string" || config.cmd === "")
    return unaryError(new ConnectError("invalid_argument", "process.cmd is required"));
  const args = Array.isArray(config.args) ? config.args.map(String) : [];
  const envs = (typeof config.envs === "object" && config.envs !== null ? config.envs : {}) as Record<string, string>;
  const faulted = await envdFault(c, deps, "exec", sandbox);
  if (faulted instanceof Response) return faulted;
  const cut = faulted !== null && faulted.kind === "cut" ? (faulted.afterBytes ?? 0) : null;
  const pid = sandbox.nextPid++;
  const kill = new AbortController();
  const keepaliveSeconds = Number(c.req.header("keepalive-ping-interval") ?? 0);
  let sent = 0;
  // False once the client went away (or the stream was cut): envd keeps the process, the events go nowhere.
  let open = true;
  const stream = new ReadableStream<Uint8Array>({
    cancel() {
      open = false;
    },
    start(controller) {
      const emit = (message: unknown) => {
        if (open) controller.enqueue(envelope(0, message));
      };
      const output = (stream: "stdout" | "stderr", chunk: Uint8Array) => {
        if (!open) return;
        if (cut !== null && sent + chunk.length > cut) {
          // The stream is cut mid-exec: the connection drops, the process keeps running (as on envd).
          const room = Math.max(0, cut - sent);
          if (room > 0) emit({ event: { data: { [stream]: Buffer.from(chunk.subarray(0, room)).toString("base64") } } });
          open = false;
          controller.error(new Error("stream cut by fault injection"));
          return;
        }
        sent += chunk.length;
        emit({ event: { data: { [stream]: Buffer.from(chunk).toString("base64") } } });
      };
      const timer = keepaliveSeconds > 0 ? setInterval(() => emit({ event: { keepalive: {} } }), keepaliveSeconds * 1000) : null;
      timer?.unref();
      void sandbox.box.tools
        .spawn({
          command: [config.cmd as string, ...args],
          cwd: typeof config.cwd === "string" && config.cwd !== "" ? config.cwd : HOME,
          env: { ...sandbox.envVars, ...envs },
          signal: kill.signal,
          onOutput: output,
        })
        .then(async (proc) => {
          const entry: EnvdProcess = {
            pid,
            tag: typeof request.tag === "string" ? request.tag : undefined,
            cmd: config.cmd as string,
            args,
            cwd: typeof config.cwd === "string" ? config.cwd : undefined,
            write: (chunk) => proc.write(chunk),
            closeStdin: () => proc.closeStdin(),
            kill: () => kill.abort(),
          };
          sandbox.processes.set(pid, entry);
          emit({ event: { start: { pid } } });
          const result = await proc.done;
          sandbox.processes.delete(pid);
          if (timer) clearInterval(timer);
          if (result.type === "exited") {
            emit({ event: { end: { exitCode: result.exitCode, exited: true, status: `exit status ${result.exitCode}` } } });
          } else if (result.type === "error") {
            emit({ event: { end: { exitCode: -1, exited: false, status: "error", error: result.message } } });
          } else {
            emit({ event: { end: { exitCode: -1, exited: false, status: "signal: killed" } } });
          }
          if (open) {
            open = false;
            controller.enqueue(endStream(null));
            controller.close();
          }
        });
    },
  });
  return new Response(stream, { status: 200, headers: { "Content-Type": "application/connect+json" } });
}
