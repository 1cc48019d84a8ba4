/**
 * The toolbox API of each Daytona sandbox, served under the proxy base the
 * REST API hands out (`toolboxProxyUrl`; the SDK appends `/{sandboxId}`),
 * behind the same bearer key:
 *
 *   POST   /process/session                                   create a session
 *   POST   /process/session/{sid}/exec                        run a command (`runAsync`: return its id at once)
 *   GET    /process/session/{sid}/command/{cid}               the command and, once it ended, its exit code
 *   GET    /process/session/{sid}/command/{cid}/logs          output so far; `?follow=true` as a WebSocket
 *   POST   /process/session/{sid}/command/{cid}/input         bytes to its stdin (there is no end of input)
 *   DELETE /process/session/{sid}                             kill the session's processes
 *   POST   /process/execute                                   one command, buffered
 *   POST   /files/bulk-upload                                 multipart `files[i].path` + `files[i].file`
 *   POST   /files/bulk-download                               multipart answer, a `file` or `error` part per path
 *
 * The log socket frames output with the daemon's 3-byte markers (0x01 x3
 * stdout, 0x02 x3 stderr) and closes when the command ends. Each command
 * runs on its own (`sh -c`): state a real session shell would carry from
 * one command to the next (cwd, exports) is not modelled.
 */
import { randomBytes, randomUUID } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { posix } from "node:path";
import type { StandInEnv, UpgradeRoute } from "@openma/standin-kit";
import type { Context, Hono } from "hono";
import type { WebSocket } from "ws";
import { apiError, bearerGuard, type DaytonaDeps, playFault } from "./control.ts";
import type { SandboxRecord, Session, SessionCommand } from "./sandboxes.ts";

type Ctx = Context<StandInEnv>;

const STDOUT_MARK = Buffer.from([1, 1, 1]);
const STDERR_MARK = Buffer.from([2, 2, 2]);
const MAX_FILE_BYTES = 256 * 1024 * 1024;
const HOME = "/home/daytona";

type Resolved = { sandbox: SandboxRecord } | { response: Response };

function resolve(c: Ctx, deps: DaytonaDeps): Resolved {
  const sandbox = deps.table.find(c.req.param("id") ?? "");
  if (!sandbox) return { response: apiError(c, 404, `Sandbox ${c.req.param("id")} not found`) };
  if (deps.table.state(sandbox) !== "started") return { response: apiError(c, 409, `Sandbox ${sandbox.id} is not started`) };
  deps.table.touch(sandbox);
  return { sandbox };
}

function sessionOf(c: Ctx, sandbox: SandboxRecord): Session | Response {
  const session = sandbox.sessions.get(c.req.param("sid") ?? "");
  return session ?? apiError(c, 404, `session ${c.req.param("sid")} not found`);
}

/** Starts `command` in the box; the record keeps its output for the log endpoints. */
async function runCommand(sandbox: SandboxRecord, session: Session, command: string, cut: number | null): Promise<SessionCommand> {
  const kill = new AbortController();
  const record: SessionCommand & { cut: number | null } = {
    id: randomUUID(),
    command,
    exitCode: undefined,
    output: [],
    listeners: new Set(),
    write: async () => {},
    kill: () => kill.abort(),
    cut,
  };
  const proc = await sandbox.box.tools.spawn({
    command: ["/bin/sh", "-c", command],
    cwd: HOME,
    env: sandbox.env,
    signal: kill.signal,
    onOutput: (stream, chunk) => {
      const event = { stream, chunk: Buffer.from(chunk) };
      record.output.push(event);
      for (const listener of record.listeners) listener(event);
    },
  });
  record.write = (chunk) => proc.write(chunk);
  session.commands.set(record.id, record);
  void proc.done.then((result) => {
    record.exitCode = result.type === "exited" ? result.exitCode : result.type === "error" ? 127 : 137;
    if (result.type === "error") {
      const event = { stream: "stderr" as const, chunk: Buffer.from(`${result.message}\n`) };
      record.output.push(event);
      for (const listener of record.listeners) listener(event);
    }
    for (const listener of record.listeners) listener("end");
    record.listeners.clear();
  });
  return record;
}

function joined(command: SessionCommand, stream?: "stdout" | "stderr"): string {
  return Buffer.concat(command.output.filter((o) => stream === undefined || o.stream === stream).map((o) => o.chunk)).toString("utf8");
}

export function mountToolbox(app: Hono<StandInEnv>, deps: DaytonaDeps): void {
  app.use("/toolbox/*", bearerGuard(deps));
  const base = "/toolbox/:id";

  app.post(`${base}/process/session`, async (c) => {
    const found = resolve(c, deps);
    if ("response" in found) return found.response;
    const body = (await c.req.json().catch(() => null)) as { sessionId?: unknown } | null;
    if (typeof body?.sessionId !== "string" || body.sessionId === "") return apiError(c, 400, "sessionId is required");
    if (found.sandbox.sessions.has(body.sessionId)) return apiError(c, 409, `session ${body.sessionId} already exists`);
    found.sandbox.sessions.set(body.sessionId, { id: body.sessionId, commands: new Map() });
    return c.body(null, 201);
  });

  app.get(`${base}/process/session`, (c) => {
    const found = resolve(c, deps);
    if ("response" in found) return found.response;
    return c.json(
      [...found.sandbox.sessions.values()].map((s) => ({
        sessionId: s.id,
        commands: [...s.commands.values()].map((cmd) => ({ id: cmd.id, command: cmd.command, exitCode: cmd.exitCode })),
      })),
    );
  });

  app.post(`${base}/process/session/:sid/exec`, async (c) => {
    const found = resolve(c, deps);
    if ("response" in found) return found.response;
    const session = sessionOf(c, found.sandbox);
    if (session instanceof Response) return session;
    const body = (await c.req.json().catch(() => null)) as { command?: unknown; runAsync?: unknown; async?: unknown } | null;
    if (typeof body?.command !== "string" || body.command === "") return apiError(c, 400, "command is required");
    const fault = await playFault(c, deps, "exec", found.sandbox);
    if (fault instanceof Response) return fault;
    const cut = fault !== null && fault.kind === "cut" ? (fault.afterBytes ?? 0) : null;
    const command = await runCommand(found.sandbox, session, body.command, cut);
    if (body.runAsync === true || body.async === true) return c.json({ cmdId: command.id });
    await new Promise<void>((done) => {
      if (command.exitCode !== undefined) return done();
      command.listeners.add((event) => event === "end" && done());
    });
    return c.json({
      cmdId: command.id,
      exitCode: command.exitCode,
      output: joined(command),
      stdout: joined(command, "stdout"),
      stderr: joined(command, "stderr"),
    });
  });

  app.get(`${base}/process/session/:sid/command/:cid`, (c) => {
    const found = resolve(c, deps);
    if ("response" in found) return found.response;
    const session = sessionOf(c, found.sandbox);
    if (session instanceof Response) return session;
    const command = session.commands.get(c.req.param("cid") ?? "");
    if (!command) return apiError(c, 404, `command ${c.req.param("cid")} not found`);
    return c.json({ id: command.id, command: command.command, exitCode: command.exitCode });
  });

  app.get(`${base}/process/session/:sid/command/:cid/logs`, (c) => {
    const found = resolve(c, deps);
    if ("response" in found) return found.response;
    const session = sessionOf(c, found.sandbox);
    if (session instanceof Response) return session;
    const command = session.commands.get(c.req.param("cid") ?? "");
    if (!command) return apiError(c, 404, `command ${c.req.param("cid")} not found`);
    return c.json({ output: joined(command), stdout: joined(command, "stdout"), stderr: joined(command, "stderr") });
  });

  app.post(`${base}/process/session/:sid/command/:cid/input`, async (c) => {
    const found = resolve(c, deps);
    if ("response" in found) return found.response;
    const session = sessionOf(c, found.sandbox);
    if (session instanceof Response) return session;
    const command = session.commands.get(c.req.param("cid") ?? "");
    if (!command) return apiError(c, 404, `command ${c.req.param("cid")} not found`);
    if (command.exitCode !== undefined) return apiError(c, 410, `command ${command.id} has already completed`);
    const body = (await c.req.json().catch(() => null)) as { data?: unknown } | null;
    if (typeof body?.data !== "string") return apiError(c, 400, "data is required");
    await command.write(Buffer.from(body.data, "utf8"));
    return c.body(null, 200);
  });

  app.delete(`${base}/process/session/:sid`, (c) => {
    const found = resolve(c, deps);
    if ("response" in found) return found.response;
    const session = sessionOf(c, found.sandbox);
    if (session instanceof Response) return session;
    for (const command of session.commands.values()) command.kill();
    found.sandbox.sessions.delete(session.id);
    return c.body(null, 200);
  });

  app.post(`${base}/process/execute`, async (c) => {
    const found = resolve(c, deps);
    if ("response" in found) return found.response;
    const body = (await c.req.json().catch(() => null)) as { command?: unknown; cwd?: unknown; timeout?: unknown } | null;
    if (typeof body?.command !== "string") return apiError(c, 400, "command is required");
    const fault = await playFault(c, deps, "exec", found.sandbox);
    if (fault instanceof Response) return fault;
    const timeout = typeof body.timeout === "number" && body.timeout > 0 ? body.timeout * 1000 : 10 * 60_000;
    const result = await found.sandbox.box.tools.exec({
      command: ["/bin/sh", "-c", body.command],
      cwd: typeof body.cwd === "string" ? posix.resolve(HOME, body.cwd) : HOME,
      env: found.sandbox.env,
      timeoutMs: timeout,
      signal: c.req.raw.signal,
    });
    if (result.type === "error") return c.json({ exitCode: 127, result: result.message });
    const text = Buffer.concat([result.stdout, result.stderr]).toString("utf8");
    return c.json({ exitCode: result.type === "exited" ? result.exitCode : -1, result: text });
  });

  mountFiles(app, deps, base);
}

function mountFiles(app: Hono<StandInEnv>, deps: DaytonaDeps, base: string): void {
  const filesFault = async (c: Ctx, sandbox: SandboxRecord) => {
    const fault = await playFault(c, deps, "files", sandbox);
    return fault instanceof Response ? fault : null;
  };

  app.post(`${base}/files/bulk-upload`, async (c) => {
    const found = resolve(c, deps);
    if ("response" in found) return found.response;
    const refused = await filesFault(c, found.sandbox);
    if (refused) return refused;
    const form = await c.req.formData().catch(() => null);
    if (form === null) return apiError(c, 400, "expected multipart/form-data");
    for (let i = 0; form.has(`files[${i}].path`); i++) {
      const path = form.get(`files[${i}].path`);
      const file = form.get(`files[${i}].file`);
      if (typeof path !== "string" || file === null || typeof file === "string") return apiError(c, 400, `files[${i}] is incomplete`);
      const target = posix.resolve(HOME, path);
      const wrote = await found.sandbox.box.tools.writeFile({
        path: target,
        content: new Uint8Array(await file.arrayBuffer()),
        mode: 0o644,
        signal: c.req.raw.signal,
      });
      if (wrote.type !== "ok") return apiError(c, 500, `writing ${target} failed: ${wrote.message}`);
    }
    return c.body(null, 200);
  });

  app.post(`${base}/files/bulk-download`, async (c) => {
    const found = resolve(c, deps);
    if ("response" in found) return found.response;
    const refused = await filesFault(c, found.sandbox);
    if (refused) return refused;
    const body = (await c.req.json().catch(() => null)) as { paths?: unknown } | null;
    if (!Array.isArray(body?.paths) || !body.paths.every((p): p is string => typeof p === "string"))
      return apiError(c, 400, "paths is required");
    const boundary = `standin${randomBytes(12).toString("hex")}`;
    const parts: Buffer[] = [];
    for (const path of body.paths) {
      const read = await found.sandbox.box.tools.readFile({
        path: posix.resolve(HOME, path),
        maxBytes: MAX_FILE_BYTES,
        signal: c.req.raw.signal,
      });
      const filename = path.replaceAll('"', "%22");
      if (read.type === "ok") {
        parts.push(
          partHeader(boundary, "file", filename, "application/octet-stream", read.content.length),
          Buffer.from(read.content),
          Buffer.from("\r\n"),
        );
      } else {
        const status = read.type === "not_found" ? 404 : read.type === "not_a_file" ? 400 : 500;
        const error = Buffer.from(
          JSON.stringify({
            message: read.type === "not_found" ? `file not found: ${path}` : `cannot read ${path}: ${read.type}`,
            statusCode: status,
            code: read.type === "not_found" ? "FILE_NOT_FOUND" : "FILE_READ_FAILED",
          }),
        );
        parts.push(partHeader(boundary, "error", filename, "application/json", error.length), error, Buffer.from("\r\n"));
      }
    }
    parts.push(Buffer.from(`--${boundary}--\r\n`));
    return c.body(Buffer.concat(parts), 200, { "Content-Type": `multipart/form-data; boundary=${boundary}` });
  });

  app.get(`${base}/files/download`, async (c) => {
    const found = resolve(c, deps);
    if ("response" in found) return found.response;
    const refused = await filesFault(c, found.sandbox);
    if (refused) return refused;
    const path = posix.resolve(HOME, c.req.query("path") ?? "");
    const read = await found.sandbox.box.tools.readFile({ path, maxBytes: MAX_FILE_BYTES, signal: c.req.raw.signal });
    if (read.type === "not_found") return apiError(c, 404, `file not found: ${path}`);
    if (read.type !== "ok") return apiError(c, 400, `cannot read ${path}`);
    return c.body(Buffer.from(read.content), 200, { "Content-Type": "application/octet-stream" });
  });
}

function partHeader(boundary: string, name: string, filename: string, type: string, length: number): Buffer {
  return Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="${name}"; filename="${filename}"\r\nContent-Type: ${type}\r\nContent-Length: ${length}\r\n\r\n`,
  );
}

/** `GET .../logs?follow=true` upgraded to a WebSocket: what was written so far, then live output, closed at the end. */
export function logsRoute(deps: DaytonaDeps, record: (request: IncomingMessage, authorized: boolean) => void): UpgradeRoute {
  const found = (params: Record<string, string>) => {
    const sandbox = deps.table.find(params.id ?? "");
    const command = sandbox?.sessions.get(params.sid ?? "")?.commands.get(params.cid ?? "");
    return sandbox && command ? { sandbox, command: command as SessionCommand & { cut?: number | null } } : null;
  };
  return {
    match(path) {
      const m = /^\/toolbox\/([^/]+)\/process\/session\/([^/]+)\/command\/([^/]+)\/logs$/.exec(path);
      return m
        ? { id: decodeURIComponent(m[1] as string), sid: decodeURIComponent(m[2] as string), cid: decodeURIComponent(m[3] as string) }
        : null;
    },
    async accept(request, params) {
      const ok = request.headers.authorization === `Bearer ${deps.apiKey}`;
      record(request, ok);
      if (!ok) return { status: 401, body: JSON.stringify({ statusCode: 401, message: "Invalid credentials" }) };
      if (!found(params)) return { status: 404, body: JSON.stringify({ statusCode: 404, message: "command not found" }) };
      return null;
    },
    open(socket: WebSocket, _request, params) {
      const target = found(params);
      if (!target) return socket.close(1011);
      const { command } = target;
      let sent = 0;
      let open = true;
      const send = (event: { stream: "stdout" | "stderr"; chunk: Uint8Array } | "end") => {
        if (!open) return;
        if (event === "end") {
          open = false;
          socket.close(1000);
          return;
        }
        let chunk = Buffer.from(event.chunk);
        if (command.cut !== undefined && command.cut !== null && sent + chunk.length > command.cut) {
          // The log stream is cut mid-exec: what fits goes out, then the connection just drops.
          chunk = chunk.subarray(0, Math.max(0, command.cut - sent));
          if (chunk.length > 0) socket.send(Buffer.concat([event.stream === "stdout" ? STDOUT_MARK : STDERR_MARK, chunk]));
          open = false;
          socket.terminate();
          return;
        }
        sent += chunk.length;
        socket.send(Buffer.concat([event.stream === "stdout" ? STDOUT_MARK : STDERR_MARK, chunk]));
      };
      for (const event of command.output) send(event);
      if (command.exitCode !== undefined) return send("end");
      command.listeners.add(send);
      socket.once("close", () => {
        open = false;
        command.listeners.delete(send);
      });
    },
  };
}
