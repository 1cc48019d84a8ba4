/**
 * The Vercel Sandbox stand-in: the REST API under `/api` as
 * `@vercel/sandbox` 3.5 speaks to it. Every request carries
 * `Authorization: Bearer <token>` and `?teamId=`; errors are the platform's
 * `{error: {code, message}}`. Sandboxes are persistent and named
 * (`POST /v3/sandboxes`, `GET|PATCH|DELETE /v2/sandboxes/{name}`, a
 * `?resume=true` get restores a stopped one), commands belong to a session
 * (`/v2/sandboxes/sessions/{id}/cmd...`): detached, or with `wait: true` an
 * NDJSON stream of the command, its log lines and the finished command;
 * logs are NDJSON `{stream, data}` lines; files go in as a gzipped tarball
 * (`fs/write`, extracted under `x-cwd`) and come out as octet-stream
 * (`fs/read`). A session that has stopped answers 410, which makes the SDK
 * resume the sandbox and retry. The SDK has no base-URL setting: its
 * per-call `fetch` option routes it here (`OPENMA_VERCEL_API_URL`).
 *
 * Simplifications, said plainly: commands run as the box's one user
 * whatever `sudo` says, sessions do not time out on their own, and network
 * policies, ports, drives and the interactive PTY are not served.
 */
import type { IncomingMessage } from "node:http";
import { posix } from "node:path";
import { gunzipSync } from "node:zlib";
import {
  type CloudStandIn,
  type Fault,
  FaultQueue,
  Hangs,
  LocalBoxes,
  mountAdmin,
  noteAuth,
  type RecordedRequest,
  recorder,
  type StandInEnv,
  type StandInOptions,
  serveStandIn,
  standInHandle,
} from "@openma/standin-kit";
import { type Context, Hono } from "hono";
import {
  type CommandRecord,
  commandJson,
  type LogLine,
  type SandboxRecord,
  SandboxTable,
  type SessionRecord,
  sandboxJson,
  sessionJson,
  snapshotJson,
} from "./sandboxes.ts";

export const DEFAULT_VERCEL_TOKEN = "vercel_standin_0123456789abcdef";
export const DEFAULT_VERCEL_TEAM = "team_standin";
export const DEFAULT_VERCEL_PROJECT = "prj_standin";
/** Sandbox names: letters, digits, dashes and underscores. */
const NAME = /^[a-zA-Z0-9][a-zA-Z0-9_-]{0,127}$/;
const MAX_TAGS = 5;
const MAX_FILE_BYTES = 256 * 1024 * 1024;
const DEFAULT_TIMEOUT_MS = 5 * 60_000;
const MAX_TIMEOUT_MS = 5 * 3_600_000;
const SIGNALS = new Set([1, 2, 3, 9, 15, 18, 19]);

export interface VercelStandInOptions extends StandInOptions {
  team?: string;
  project?: string;
}

export interface VercelStandIn extends CloudStandIn {
  readonly table: SandboxTable;
}

type Ctx = Context<StandInEnv>;

/** The platform's error body. */
function apiError(c: Ctx, status: number, code: string, message: string) {
  return c.json({ error: { code, message } }, status as 400);
}

const ndjson = (value: unknown) => new TextEncoder().encode(`${JSON.stringify(value)}\n`);
const NDJSON_HEADERS = { "Content-Type": "application/x-ndjson", "Cache-Control": "no-cache" };

export async function startVercelStandIn(options: VercelStandInOptions = {}): Promise<VercelStandIn> {
  const token = options.apiKey ?? DEFAULT_VERCEL_TOKEN;
  const team = options.team ?? DEFAULT_VERCEL_TEAM;
  const project = options.project ?? DEFAULT_VERCEL_PROJECT;
  const faults = new FaultQueue();
  const hangs = new Hangs();
  const requests: RecordedRequest[] = [];
  const boxes = new LocalBoxes({ vendor: "vercel", image: options.image, networkMode: options.networkMode });
  const table = new SandboxTable(boxes);

  const app = new Hono<StandInEnv>();
  app.use("*", recorder(requests));
  app.use("/api/*", async (c, next) => {
    const header = c.req.header("authorization");
    const ok = header === `Bearer ${token}` && c.req.query("teamId") === team;
    noteAuth(c, header === undefined ? null : "authorization", ok);
    if (header !== `Bearer ${token}`) return apiError(c, 401, "unauthorized", "The request is missing a valid token");
    if (!ok) return apiError(c, 403, "forbidden", "You don't have access to this team");
    await next();
  });

  /** Plays a queued fault: a response to send instead, or null to go on (a cut is the caller's). */
  const play = async (c: Ctx, f: Fault | undefined, sandbox?: SandboxRecord): Promise<Response | null> => {
    if (f === undefined || f.kind === "cut") return null;
    if (f.kind === "status") return apiError(c, f.status ?? 500, "internal_server_error", "An unexpected error occurred");
    if (f.kind === "rate_limited") {
      c.header("Retry-After", String(f.retryAfterSeconds ?? 1));
      return apiError(c, 429, "rate_limited", "Too many requests");
    }
    if (f.kind === "hang") {
      await hangs.hang();
      return apiError(c, 503, "unavailable", "stand-in closing");
    }
    if (sandbox) await table.destroy(sandbox);
    return apiError(c, 404, "not_found", "Sandbox not found");
  };
  const fault = (c: Ctx, op: Fault["op"], sandbox?: SandboxRecord) => play(c, faults.take(op), sandbox);
  const withSession = (record: SandboxRecord, extra: Record<string, unknown> = {}) => ({
    sandbox: sandboxJson(record),
    session: sessionJson(record.session, record),
    routes: [],
    ...extra,
  });

  // --- sandboxes ---------------------------------------------------------------------------------

  const create = async (c: Ctx) => {
    const body = (await c.req.json().catch(() => null)) as Record<string, unknown> | null;
    if (body === null || typeof body !== "object") return apiError(c, 400, "bad_request", "The body must be a JSON object");
    const name = body.name ?? `sbx-${Math.random().toString(36).slice(2, 12)}`;
    if (typeof name !== "string" || !NAME.test(name))
      return apiError(c, 400, "bad_request", "name must be letters, digits, dashes and underscores (at most 128)");
    if (body.projectId !== project) return apiError(c, 404, "not_found", "Project not found");
    const tags = body.tags ?? {};
    if (typeof tags !== "object" || tags === null || !Object.values(tags).every((v) => typeof v === "string"))
      return apiError(c, 400, "bad_request", "tags must map strings to strings");
    if (Object.keys(tags).length > MAX_TAGS) return apiError(c, 400, "bad_request", `a sandbox has at most ${MAX_TAGS} tags`);
    const timeout = body.timeout ?? DEFAULT_TIMEOUT_MS;
    if (typeof timeout !== "number" || !Number.isInteger(timeout) || timeout < 1_000 || timeout > MAX_TIMEOUT_MS)
      return apiError(c, 400, "bad_request", `timeout must be an integer number of milliseconds up to ${MAX_TIMEOUT_MS}`);
    const refused = await fault(c, "create");
    if (refused) return refused;
    if (table.get(name)) return apiError(c, 409, "sandbox_already_exists", `A sandbox named ${name} already exists`);
    let record: SandboxRecord;
    try {
      record = await table.create({
        name,
        projectId: project,
        tags: tags as Record<string, string>,
        timeout,
        ...(typeof body.image === "string" ? { image: body.image } : typeof body.runtime === "string" ? { image: body.runtime } : {}),
      });
    } catch (err) {
      return apiError(c, 500, "sandbox_failed", `could not start the sandbox: ${String(err)}`);
    }
    return c.json(withSession(record));
  };
  app.post("/api/v3/sandboxes", create);
  app.post("/api/v2/sandboxes", create);

  app.get("/api/v2/sandboxes", async (c) => {
    const refused = await fault(c, "list");
    if (refused) return refused;
    const limit = Math.min(100, Math.max(1, Number(c.req.query("limit") ?? 50) || 50));
    const prefix = c.req.query("namePrefix") ?? "";
    const filters = c.req.queries("tags") ?? [];
    const after = c.req.query("cursor") ?? "";
    const matching = table.all().filter((s) => {
      if (!s.name.startsWith(prefix) || s.name <= after) return false;
      return filters.every((f) => {
        const at = f.indexOf(":");
        return at > 0 && s.tags[f.slice(0, at)] === f.slice(at + 1);
      });
    });
    const page = matching.slice(0, limit);
    const more = matching.length > limit;
    return c.json({
      sandboxes: page.map(sandboxJson),
      pagination: { count: page.length, next: more ? (page.at(-1)?.name ?? null) : null },
    });
  });

  const named = (c: Ctx) => table.get(c.req.param("name") ?? "");

  app.get("/api/v2/sandboxes/:name", async (c) => {
    const record = named(c);
    const refused = await fault(c, "get", record);
    if (refused) return refused;
    if (!record) return apiError(c, 404, "not_found", "Sandbox not found");
    if (c.req.query("resume") !== "true") return c.json(withSession(record));
    let resumed: boolean;
    try {
      resumed = await table.resume(record);
    } catch (err) {
      return apiError(c, 500, "sandbox_failed", `could not restore the sandbox: ${String(err)}`);
    }
    return c.json(withSession(record, { resumed }));
  });

  app.patch("/api/v2/sandboxes/:name", async (c) => {
    const record = named(c);
    if (!record) return apiError(c, 404, "not_found", "Sandbox not found");
    const body = (await c.req.json().catch(() => null)) as { tags?: unknown; timeout?: unknown } | null;
    if (body === null) return apiError(c, 400, "bad_request", "The body must be a JSON object");
    if (body.tags !== undefined) {
      const tags = body.tags;
      if (typeof tags !== "object" || tags === null || !Object.values(tags).every((v) => typeof v === "string"))
        return apiError(c, 400, "bad_request", "tags must map strings to strings");
      if (Object.keys(tags).length > MAX_TAGS) return apiError(c, 400, "bad_request", `a sandbox has at most ${MAX_TAGS} tags`);
      record.tags = tags as Record<string, string>;
    }
    if (typeof body.timeout === "number") record.timeout = body.timeout;
    record.updatedAt = Date.now();
    return c.json({ sandbox: sandboxJson(record), routes: [] });
  });

  app.delete("/api/v2/sandboxes/:name", async (c) => {
    const record = named(c);
    const refused = await fault(c, "kill", record);
    if (refused) return refused;
    if (!record) return apiError(c, 404, "not_found", "Sandbox not found");
    await table.destroy(record);
    return c.json({ sandbox: sandboxJson(record) });
  });

  // --- sessions ----------------------------------------------------------------------------------

  const base = "/api/v2/sandboxes/sessions/:sid";
  /** The running session a request addresses, or the platform's answer: 404 when unknown, 410 once stopped. */
  const target = async (c: Ctx, op: Fault["op"] | Fault | null): Promise<{ record: SandboxRecord; session: SessionRecord } | Response> => {
    const found = table.session(c.req.param("sid") ?? "");
    if (op !== null) {
      const refused = await play(c, typeof op === "string" ? faults.take(op) : op, found?.sandbox);
      if (refused) return refused;
    }
    if (!found?.sandbox) return apiError(c, 404, "not_found", "Sandbox not found");
    if (found.session.status === "stopping") return apiError(c, 422, "sandbox_stopping", "The sandbox is stopping");
    if (found.session.status !== "running") return apiError(c, 410, "sandbox_stopped", "The sandbox session has stopped");
    return { record: found.sandbox, session: found.session };
  };

  app.get(base, async (c) => {
    const found = table.session(c.req.param("sid") ?? "");
    if (!found) return apiError(c, 404, "not_found", "Session not found");
    return c.json({ session: sessionJson(found.session, found.sandbox), routes: [] });
  });

  app.post(`${base}/stop`, async (c) => {
    const found = table.session(c.req.param("sid") ?? "");
    const refused = await fault(c, "lifecycle", found?.sandbox);
    if (refused) return refused;
    if (!found?.sandbox) return apiError(c, 404, "not_found", "Sandbox not found");
    const record = found.sandbox;
    if (record.session === found.session) await table.stop(record);
    return c.json({ session: sessionJson(found.session, record), sandbox: sandboxJson(record), snapshot: snapshotJson(record) });
  });

  app.post(`${base}/extend-timeout`, async (c) => {
    const body = (await c.req.json().catch(() => null)) as { duration?: unknown } | null;
    if (typeof body?.duration !== "number" || !Number.isInteger(body.duration) || body.duration < 1)
      return apiError(c, 400, "bad_request", "duration must be a positive integer number of milliseconds");
    const found = await target(c, "lifecycle");
    if (found instanceof Response) return found;
    if (found.session.timeout + body.duration > MAX_TIMEOUT_MS)
      return apiError(c, 400, "bad_request", `a session lasts at most ${MAX_TIMEOUT_MS} ms`);
    found.session.timeout += body.duration;
    return c.json({ session: sessionJson(found.session, found.record) });
  });

  // --- commands ----------------------------------------------------------------------------------

  app.post(`${base}/cmd`, async (c) => {
    const body = (await c.req.json().catch(() => null)) as Record<string, unknown> | null;
    if (body === null || typeof body.command !== "string" || body.command === "")
      return apiError(c, 400, "bad_request", "command is required");
    const args = body.args ?? [];
    if (!Array.isArray(args) || !args.every((a) => typeof a === "string")) return apiError(c, 400, "bad_request", "args must be strings");
    const env = body.env ?? {};
    if (typeof env !== "object" || env === null || !Object.values(env).every((v) => typeof v === "string"))
      return apiError(c, 400, "bad_request", "env must map strings to strings");
    if (body.cwd !== undefined && (typeof body.cwd !== "string" || !body.cwd.startsWith("/")))
      return apiError(c, 400, "bad_request", "cwd must be an absolute path");
    const injected = faults.take("exec");
    const found = await target(c, injected ?? null);
    if (found instanceof Response) return found;
    let command: CommandRecord;
    try {
      command = await table.run(found.record, {
        cmd: body.command,
        args: args as string[],
        cwd: typeof body.cwd === "string" ? body.cwd : "/",
        env: env as Record<string, string>,
      });
    } catch (err) {
      return apiError(c, 422, "command_failed", `could not start the command: ${String(err)}`);
    }
    if (injected?.kind === "cut") command.cutAfterBytes = injected.afterBytes ?? 0;
    if (body.wait !== true) return c.json({ command: commandJson(command) });
    return logStream(c, command, { head: { command: commandJson(command) }, tail: () => ({ command: commandJson(command) }) });
  });

  const commandOf = (c: Ctx, session: SessionRecord) => session.commands.get(c.req.param("cmd") ?? "");

  /** A command of any session of a sandbox the stand-in still holds (a stopped session's commands stay readable). */
  const anyCommand = (c: Ctx) => {
    const found = table.session(c.req.param("sid") ?? "");
    return found?.sandbox ? commandOf(c, found.session) : undefined;
  };

  app.get(`${base}/cmd/:cmd`, async (c) => {
    const command = anyCommand(c);
    if (!command) return apiError(c, 404, "not_found", "Command not found");
    if (c.req.query("wait") === "true") await command.ended;
    return c.json({ command: commandJson(command) });
  });

  app.get(`${base}/cmd/:cmd/logs`, async (c) => {
    const command = anyCommand(c);
    if (!command) return apiError(c, 404, "not_found", "Command not found");
    return logStream(c, command, {});
  });

  app.post(`${base}/cmd/:cmd/kill`, async (c) => {
    const body = (await c.req.json().catch(() => ({}))) as { signal?: unknown };
    if (body.signal !== undefined && !(typeof body.signal === "number" && SIGNALS.has(body.signal)))
      return apiError(c, 400, "bad_request", "signal must be a Linux signal number");
    const command = anyCommand(c);
    if (!command) return apiError(c, 404, "not_found", "Command not found");
    if (command.exitCode === null) await command.kill();
    return c.json({ command: commandJson(command) });
  });

  /**
   * NDJSON: `head`, every log line so far and then as they come, `tail()`
   * once the command has ended. A cut fault on the command drops the
   * connection mid-stream, as a lost network path would.
   */
  function logStream(c: Ctx, command: CommandRecord, frame: { head?: unknown; tail?: () => unknown }): Response {
    const socket = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming?.socket;
    // Every stream of the command is cut (the SDK retries a request that never got its headers).
    const cut = command.cutAfterBytes;
    let controller!: ReadableStreamDefaultController<Uint8Array>;
    let open = true;
    let sent = 0;
    const send = (value: unknown) => {
      if (!open) return;
      const bytes = ndjson(value);
      if (cut !== undefined && sent + bytes.length > cut) {
        open = false;
        socket?.destroy();
        return;
      }
      sent += bytes.length;
      controller.enqueue(bytes);
    };
    const listener = (line: LogLine | null) => {
      if (line) return send(line);
      command.listeners.delete(listener);
      if (frame.tail) send(frame.tail());
      if (open) controller.close();
      open = false;
    };
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        controller = c;
        if (frame.head) send(frame.head);
        for (const line of command.logs) send(line);
        if (command.exitCode !== null) listener(null);
        else command.listeners.add(listener);
      },
      cancel() {
        open = false;
        command.listeners.delete(listener);
      },
    });
    return new Response(stream, { headers: NDJSON_HEADERS });
  }

  // --- files -------------------------------------------------------------------------------------

  const resolvePath = (path: unknown, cwd: unknown): string | null => {
    if (typeof path !== "string" || path === "" || path.includes("\0")) return null;
    const dir = typeof cwd === "string" && cwd.startsWith("/") ? cwd : "/vercel/sandbox";
    return posix.resolve(dir, path);
  };

  app.post(`${base}/fs/write`, async (c) => {
    const found = await target(c, "files");
    if (found instanceof Response) return found;
    const dir = c.req.header("x-cwd") ?? "/";
    if (!dir.startsWith("/") || dir.includes("\0")) return apiError(c, 400, "bad_request", "x-cwd must be an absolute path");
    const body = Buffer.from(await c.req.arrayBuffer());
    if (body.length > MAX_FILE_BYTES) return apiError(c, 413, "payload_too_large", "the tarball is too large");
    try {
      gunzipSync(body);
    } catch {
      return apiError(c, 400, "bad_request", "the body must be a gzipped tarball");
    }
    // Extracted inside the sandbox itself: its paths can only reach the sandbox's own filesystem.
    const extracted = await found.record.box.tools.exec({
      command: ["tar", "-xzf", "-", "--no-same-owner", "-C", dir],
      stdin: body,
      timeoutMs: 120_000,
      signal: c.req.raw.signal,
    });
    if (extracted.type !== "exited" || extracted.exitCode !== 0) {
      const why = extracted.type === "exited" ? Buffer.from(extracted.stderr).toString("utf8").trim() : extracted.type;
      return apiError(c, 400, "write_failed", `could not extract the tarball: ${why}`);
    }
    return c.json({});
  });

  app.post(`${base}/fs/read`, async (c) => {
    const body = (await c.req.json().catch(() => null)) as { path?: unknown; cwd?: unknown } | null;
    const path = resolvePath(body?.path, body?.cwd);
    if (path === null) return apiError(c, 400, "bad_request", "path is required");
    const found = await target(c, "files");
    if (found instanceof Response) return found;
    const read = await found.record.box.tools.readFile({ path, maxBytes: MAX_FILE_BYTES, signal: c.req.raw.signal });
    if (read.type === "not_found") return apiError(c, 404, "file_not_found", `${path} does not exist`);
    if (read.type !== "ok") return apiError(c, 400, "read_failed", read.type === "error" ? read.message : read.type);
    return c.body(Buffer.from(read.content), 200, { "Content-Type": "application/octet-stream" });
  });

  app.post(`${base}/fs/mkdir`, async (c) => {
    const body = (await c.req.json().catch(() => null)) as { path?: unknown; cwd?: unknown } | null;
    const path = resolvePath(body?.path, body?.cwd);
    if (path === null) return apiError(c, 400, "bad_request", "path is required");
    const found = await target(c, "files");
    if (found instanceof Response) return found;
    const made = await found.record.box.tools.exec({ command: ["mkdir", "--", path], timeoutMs: 60_000, signal: c.req.raw.signal });
    if (made.type !== "exited" || made.exitCode !== 0) return apiError(c, 400, "mkdir_failed", `could not create ${path}`);
    return c.json({});
  });

  const server = await serveStandIn({ app, port: options.port, host: options.host });
  mountAdmin(app, {
    token,
    faults,
    state: async () => ({
      live: table.all().length,
      containers: await boxes.containers(),
      sandboxes: table.all().map((s) => ({ name: s.name, status: s.session.status })),
    }),
  });
  return standInHandle(
    {
      vendor: "vercel",
      url: server.url,
      env: {
        VERCEL_TOKEN: token,
        VERCEL_TEAM_ID: team,
        VERCEL_PROJECT_ID: project,
        OPENMA_VERCEL_API_URL: `${server.url}/api`,
      },
      faults,
      requests,
      boxes,
      live: () => table.all().length,
      find: (id) => table.get(id),
      running: (held) => held.session.status === "running",
      hangs,
      servers: [server],
    },
    { table },
  );
}
