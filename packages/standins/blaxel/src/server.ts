/**
 * The Blaxel stand-in: the control plane (`api.blaxel.ai/v0`) and each
 * sandbox's sandbox-api (`run.blaxel.ai/{workspace}/sandboxes/{name}`) as
 * `@blaxel/core` 0.3 speaks to them. Both planes check the SDK's
 * `X-Blaxel-Authorization: Bearer <key>` and `X-Blaxel-Workspace`, and
 * answer errors in the platform's bodies (`{error, code}` on the control
 * plane, a `SandboxError` on create, `{error}` from sandbox-api). Point the
 * SDK at it with `BL_API_URL` and `BL_RUN_URL` (the create response's
 * `metadata.url` names each sandbox's sandbox-api here too).
 */
import type { IncomingMessage } from "node:http";
import { posix } from "node:path";
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
import { mountMultipart } from "./multipart.ts";
import { type OutputListener, processJson, type SandboxProcessRecord } from "./processes.ts";
import { type SandboxRecord, SandboxTable, sandboxJson } from "./sandboxes.ts";

export const DEFAULT_BLAXEL_API_KEY = "bl_standin_0123456789abcdef";
export const DEFAULT_BLAXEL_WORKSPACE = "standin";
/** Blaxel's sandbox names: lower-case letters, digits and dashes. */
const NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;
const MAX_FILE_BYTES = 256 * 1024 * 1024;

export interface BlaxelStandInOptions extends StandInOptions {
  /** The workspace the key belongs to (default `standin`). */
  workspace?: string;
}

export interface BlaxelStandIn extends CloudStandIn {
  readonly table: SandboxTable;
  readonly workspace: string;
}

type Ctx = Context<StandInEnv>;
type Render = (c: Ctx, status: number, error: string) => Response;

/** The control plane's error body (`_Error`). */
function controlError(c: Ctx, status: number, error: string) {
  return c.json({ error, code: status, message: error }, status as 400);
}

/** sandbox-api's error body (`ErrorResponse`). */
function apiError(c: Ctx, status: number, error: string) {
  return c.json({ error }, status as 400);
}

export async function startBlaxelStandIn(options: BlaxelStandInOptions = {}): Promise<BlaxelStandIn> {
  const apiKey = options.apiKey ?? DEFAULT_BLAXEL_API_KEY;
  const workspace = options.workspace ?? DEFAULT_BLAXEL_WORKSPACE;
  const faults = new FaultQueue();
  const hangs = new Hangs();
  const requests: RecordedRequest[] = [];
  const boxes = new LocalBoxes({ vendor: "blaxel", image: options.image, networkMode: options.networkMode });
  const table = new SandboxTable(boxes);
  let runUrl = "";

  const app = new Hono<StandInEnv>();
  app.use("*", recorder(requests));
  const auth = async (c: Ctx, next: () => Promise<void>) => {
    const header = c.req.header("x-blaxel-authorization");
    const ok = header === `Bearer ${apiKey}` && c.req.header("x-blaxel-workspace") === workspace;
    noteAuth(c, header === undefined ? null : "x-blaxel-authorization", ok);
    if (!ok) return controlError(c, 401, "Unauthorized");
    await next();
  };
  app.use("/v0/*", auth);
  app.use("/run/*", auth);

  /** Plays a queued fault of `op` in `render`'s error body: a response to send instead, or null to go on. */
  const fault = (c: Ctx, op: Fault["op"], render: Render, sandbox?: SandboxRecord): Promise<Response | null> =>
    play(c, faults.take(op), render, sandbox);
  const play = async (c: Ctx, f: Fault | undefined, render: Render, sandbox?: SandboxRecord): Promise<Response | null> => {
    if (f === undefined || f.kind === "cut") return null;
    if (f.kind === "status") return render(c, f.status ?? 500, "Internal Server Error");
    if (f.kind === "rate_limited") {
      c.header("Retry-After", String(f.retryAfterSeconds ?? 1));
      return render(c, 429, "Too Many Requests");
    }
    if (f.kind === "hang") {
      await hangs.hang();
      return render(c, 503, "stand-in closing");
    }
    if (sandbox) await table.destroy(sandbox);
    return render(c, 404, `Sandbox not found`);
  };
  const json = () => ({ runUrl, workspace });

  // --- control plane ---------------------------------------------------------------------------

  app.post("/v0/sandboxes", async (c) => {
    const body = (await c.req.json().catch(() => null)) as {
      metadata?: { name?: unknown; labels?: unknown };
      spec?: unknown;
    } | null;
    const sandboxError = (status: number, code: string, message: string) =>
      c.json({ code, message, status_code: status, timestamp: new Date().toISOString() }, status as 400);
    if (body === null || typeof body !== "object") return sandboxError(400, "INVALID_REQUEST", "the body must be a Sandbox");
    const name = body.metadata?.name ?? `sandbox-${Math.random().toString(36).slice(2, 10)}`;
    if (typeof name !== "string" || !NAME.test(name))
      return sandboxError(400, "INVALID_NAME", "metadata.name must be lower-case letters, digits and dashes (at most 63)");
    const labels = body.metadata?.labels ?? {};
    if (typeof labels !== "object" || labels === null || !Object.values(labels).every((v) => typeof v === "string"))
      return sandboxError(400, "INVALID_LABELS", "metadata.labels must map strings to strings");
    const refused = await fault(c, "create", controlError);
    if (refused) return refused;
    const existing = table.get(name);
    if (existing) {
      if (c.req.query("createIfNotExist") === "true") return c.json(sandboxJson(existing, json()));
      return sandboxError(409, "SANDBOX_ALREADY_EXISTS", `sandbox ${name} already exists`);
    }
    let record: SandboxRecord;
    try {
      record = await table.create(name, labels as Record<string, string>, (body.spec ?? {}) as Record<string, unknown>);
    } catch (err) {
      return sandboxError(500, "DEPLOYMENT_FAILED", `could not start the sandbox: ${String(err)}`);
    }
    return c.json(sandboxJson(record, json()));
  });

  app.get("/v0/sandboxes", async (c) => {
    const refused = await fault(c, "list", controlError);
    if (refused) return refused;
    const limit = Math.min(100, Math.max(1, Number(c.req.query("limit") ?? 50) || 50));
    const after = c.req.query("cursor") ?? "";
    const matching = table.all().filter((s) => s.name > after);
    const page = matching.slice(0, limit);
    const more = matching.length > limit;
    return c.json({
      data: page.map((s) => sandboxJson(s, json())),
      meta: { hasMore: more, nextCursor: more ? page.at(-1)?.name : undefined, total: matching.length },
    });
  });

  const named = (c: Ctx) => table.get(c.req.param("name") ?? "");

  app.get("/v0/sandboxes/:name", async (c) => {
    const record = named(c);
    const refused = await fault(c, "get", controlError, record);
    if (refused) return refused;
    if (!record) return controlError(c, 404, "Sandbox not found");
    return c.json(sandboxJson(record, json()));
  });

  app.put("/v0/sandboxes/:name", async (c) => {
    const record = named(c);
    if (!record) return controlError(c, 404, "Sandbox not found");
    const body = (await c.req.json().catch(() => null)) as { metadata?: { labels?: unknown } } | null;
    const labels = body?.metadata?.labels;
    if (labels !== undefined) {
      if (typeof labels !== "object" || labels === null || !Object.values(labels).every((v) => typeof v === "string"))
        return controlError(c, 400, "metadata.labels must map strings to strings");
      record.labels = labels as Record<string, string>;
      record.updatedAt = new Date();
    }
    return c.json(sandboxJson(record, json()));
  });

  app.delete("/v0/sandboxes/:name", async (c) => {
    const record = named(c);
    const refused = await fault(c, "kill", controlError, record);
    if (refused) return refused;
    if (!record) return controlError(c, 404, "Sandbox not found");
    await table.destroy(record);
    return c.json({ ...sandboxJson(record, json()), status: "TERMINATED" });
  });

  // Archive and unarchive finish before they answer, so the SDK's wait sees the final status at once.
  for (const verb of ["archive", "unarchive"] as const) {
    app.post(`/v0/sandboxes/:name/${verb}`, async (c) => {
      const record = named(c);
      const refused = await fault(c, "lifecycle", controlError, record);
      if (refused) return refused;
      if (!record) return controlError(c, 404, "Sandbox not found");
      try {
        await (verb === "archive" ? table.archive(record) : table.unarchive(record));
      } catch (err) {
        return controlError(c, 500, `could not ${verb} the sandbox: ${String(err)}`);
      }
      return c.json(sandboxJson(record, json()));
    });
  }

  // --- sandbox-api (one per sandbox, behind the run gateway) -----------------------------------------

  const base = "/run/:workspace/sandboxes/:name";
  /** The sandbox a data-plane request addresses, or the gateway's answer when it cannot be reached. */
  const target = async (c: Ctx, op: Fault["op"] | Fault | null): Promise<SandboxRecord | Response> => {
    const record = c.req.param("workspace") === workspace ? named(c) : undefined;
    if (op !== null) {
      const refused = await play(c, typeof op === "string" ? faults.take(op) : op, apiError, record);
      if (refused) return refused;
    }
    if (!record) return apiError(c, 404, "sandbox not found");
    if (record.status !== "DEPLOYED") return apiError(c, 409, `sandbox is ${record.status}`);
    return record;
  };
  const processOf = (c: Ctx, record: SandboxRecord) => record.processes.find(c.req.param("id") ?? "");

  app.post(`${base}/process`, async (c) => {
    const body = (await c.req.json().catch(() => null)) as {
      command?: unknown;
      name?: unknown;
      workingDir?: unknown;
      env?: unknown;
      waitForCompletion?: unknown;
      stdin?: unknown;
    } | null;
    if (body === null || typeof body.command !== "string" || body.command === "") return apiError(c, 400, "command is required");
    if (body.name !== undefined && typeof body.name !== "string") return apiError(c, 400, "name must be a string");
    if (body.workingDir !== undefined && (typeof body.workingDir !== "string" || !body.workingDir.startsWith("/")))
      return apiError(c, 400, "workingDir must be an absolute path");
    const env = body.env ?? {};
    if (typeof env !== "object" || env === null || !Object.values(env).every((v) => typeof v === "string"))
      return apiError(c, 400, "env must map strings to strings");
    const injected = faults.take("exec");
    const record = await target(c, injected ?? null);
    if (record instanceof Response) return record;
    const name = typeof body.name === "string" ? body.name : undefined;
    if (name && record.processes.find(name)?.status === "running")
      return apiError(c, 400, `process with name '${name}' already exists and is running`);
    const input = {
      command: body.command,
      name,
      workingDir: typeof body.workingDir === "string" ? body.workingDir : undefined,
      env: env as Record<string, string>,
      stdin: body.stdin === true,
    };
    if ((c.req.header("accept") ?? "").includes("text/event-stream")) {
      // A cut drops the TCP connection itself, as a lost network path would.
      const socket = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming?.socket;
      const cut = injected?.kind === "cut" ? { afterBytes: injected.afterBytes ?? 0, drop: () => socket?.destroy() } : null;
      return execStream(record, input, cut);
    }
    let proc: SandboxProcessRecord;
    try {
      proc = await record.processes.start(record.box, input);
    } catch (err) {
      return apiError(c, 422, String(err));
    }
    if (body.waitForCompletion === true) await proc.ended;
    return c.json(processJson(proc));
  });

  app.get(`${base}/process`, async (c) => {
    const record = await target(c, null);
    if (record instanceof Response) return record;
    return c.json(record.processes.all().map(processJson));
  });

  app.get(`${base}/process/:id`, async (c) => {
    const record = await target(c, null);
    if (record instanceof Response) return record;
    const proc = processOf(c, record);
    if (!proc) return apiError(c, 404, "process not found");
    return c.json(processJson(proc));
  });

  app.get(`${base}/process/:id/logs`, async (c) => {
    const record = await target(c, null);
    if (record instanceof Response) return record;
    const proc = processOf(c, record);
    if (!proc) return apiError(c, 404, "process not found");
    return c.json({ stdout: proc.stdout, stderr: proc.stderr, logs: proc.logs });
  });

  // One `stdout:`/`stderr:`-prefixed write per output chunk, as the daemon's plain log writer sends them.
  app.get(`${base}/process/:id/logs/stream`, async (c) => {
    const record = await target(c, null);
    if (record instanceof Response) return record;
    const proc = processOf(c, record);
    if (!proc) return apiError(c, 404, "process not found");
    const encoder = new TextEncoder();
    let listener: OutputListener | null = null;
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        if (proc.stdout) controller.enqueue(encoder.encode(`stdout:${proc.stdout}`));
        if (proc.stderr) controller.enqueue(encoder.encode(`stderr:${proc.stderr}`));
        const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
        listener = (s, chunk) => controller.enqueue(encoder.encode(`${s}:${decoders[s].decode(chunk, { stream: true })}`));
        proc.listeners.add(listener);
        void proc.ended.then(() => {
          if (listener) proc.listeners.delete(listener);
          controller.close();
        });
      },
      cancel() {
        if (listener) proc.listeners.delete(listener);
      },
    });
    return new Response(stream, { headers: { "Content-Type": "text/plain; charset=utf-8", "Cache-Control": "no-cache" } });
  });

  for (const [suffix, as] of [
    ["", "stopped"],
    ["/kill", "killed"],
  ] as const) {
    app.delete(`${base}/process/:id${suffix}`, async (c) => {
      const record = await target(c, null);
      if (record instanceof Response) return record;
      const proc = processOf(c, record);
      if (!proc) return apiError(c, 404, "process not found");
      if (proc.status === "running") await proc.kill(as);
      return c.json({ message: as === "killed" ? "Process killed successfully" : "Process stopped successfully" });
    });
  }

  app.post(`${base}/process/:id/stdin`, async (c) => {
    const record = await target(c, null);
    if (record instanceof Response) return record;
    const proc = processOf(c, record);
    if (!proc) return apiError(c, 404, "process not found");
    if (!proc.stdin) return apiError(c, 400, "process was not started with stdin enabled");
    if (proc.status !== "running") return apiError(c, 409, "process is not running");
    const bytes = new Uint8Array(await c.req.arrayBuffer());
    try {
      await proc.write(bytes);
    } catch (err) {
      return apiError(c, 409, `stdin is closed: ${String(err)}`);
    }
    return c.json({ message: "stdin written" });
  });

  app.delete(`${base}/process/:id/stdin`, async (c) => {
    const record = await target(c, null);
    if (record instanceof Response) return record;
    const proc = processOf(c, record);
    if (!proc) return apiError(c, 404, "process not found");
    proc.closeStdin();
    return c.json({ message: "stdin closed" });
  });

  /** Streaming exec: NDJSON `{type, data}` events (stdout, stderr, then result), as the daemon answers `Accept: text/event-stream`. */
  function execStream(
    record: SandboxRecord,
    input: Parameters<SandboxRecord["processes"]["start"]>[1],
    cut: { afterBytes: number; drop: () => void } | null,
  ) {
    const encoder = new TextEncoder();
    const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
    let controller!: ReadableStreamDefaultController<Uint8Array>;
    let open = true;
    let sent = 0;
    let sentOutput = false;
    const emit = (type: string, data: string) => {
      if (!open) return;
      const bytes = encoder.encode(`${JSON.stringify({ type, data })}\n`);
      if (cut !== null && sent + bytes.length > cut.afterBytes) {
        // The stream is cut mid-exec: the connection drops, the process goes on.
        open = false;
        cut.drop();
        return;
      }
      sent += bytes.length;
      controller.enqueue(bytes);
    };
    const listener: OutputListener = (stream, chunk) => {
      const text = decoders[stream].decode(chunk, { stream: true });
      if (text === "") return;
      sentOutput = true;
      emit(stream, text);
    };
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        controller = c;
      },
      cancel() {
        open = false;
      },
    });
    void (async () => {
      let proc: SandboxProcessRecord;
      try {
        proc = await record.processes.start(record.box, { ...input, listener });
      } catch (err) {
        emit("error", String(err));
        if (open) controller.close();
        return;
      }
      await proc.ended;
      proc.listeners.delete(listener);
      if (!sentOutput) {
        // Nothing streamed (a very fast command): the daemon sends the output again, line by line.
        for (const line of proc.stdout.split("\n")) if (line) emit("stdout", line);
        for (const line of proc.stderr.split("\n")) if (line) emit("stderr", line);
      }
      emit("result", JSON.stringify(processJson(proc)));
      if (open) controller.close();
    })();
    return new Response(stream, {
      headers: { "Content-Type": "application/x-ndjson", "Cache-Control": "no-cache", "X-Accel-Buffering": "no" },
    });
  }

  // --- filesystem ----------------------------------------------------------------------------------

  /** The absolute path after `marker` (the SDK may or may not encode its slashes). */
  const pathAfter = (c: Ctx, marker: string): string | null => {
    const url = new URL(c.req.url);
    const at = url.pathname.indexOf(marker);
    if (at < 0) return null;
    let raw: string;
    try {
      raw = decodeURIComponent(url.pathname.slice(at + marker.length));
    } catch {
      return null;
    }
    if (raw.includes("\0")) return null;
    return posix.resolve("/", raw);
  };
  const fsPath = (c: Ctx) => pathAfter(c, "/filesystem/");
  mountMultipart(app, { base, target: (c) => target(c, "files"), pathAfter, apiError });

  app.get(`${base}/filesystem/*`, async (c) => {
    const record = await target(c, "files");
    if (record instanceof Response) return record;
    const path = fsPath(c);
    if (path === null) return apiError(c, 400, "invalid path");
    const signal = c.req.raw.signal;
    const seen = await record.box.tools.stat({ path, signal });
    if (seen.type === "not_found") return apiError(c, 404, `stat ${path}: no such file or directory`);
    if (seen.type !== "found") return apiError(c, 500, seen.message);
    if (seen.kind === "directory") {
      const listed = await record.box.tools.list({ path, recursive: false, maxEntries: 10_000, signal });
      if (listed.type !== "ok") return apiError(c, 500, listed.type === "not_found" ? "not found" : listed.message);
      return c.json({
        path,
        name: posix.basename(path),
        files: listed.entries
          .filter((e) => e.kind !== "directory")
          .map((e) => ({ path: e.path, name: posix.basename(e.path), size: e.size, lastModified: new Date(e.mtimeMs).toISOString() })),
        subdirectories: listed.entries.filter((e) => e.kind === "directory").map((e) => ({ path: e.path, name: posix.basename(e.path) })),
      });
    }
    const read = await record.box.tools.readFile({ path, maxBytes: MAX_FILE_BYTES, signal });
    if (read.type === "not_found") return apiError(c, 404, `open ${path}: no such file or directory`);
    if (read.type !== "ok") return apiError(c, 500, read.type === "error" ? read.message : read.type);
    const accept = c.req.header("accept") ?? "";
    const download =
      accept.includes("application/octet-stream") || (accept !== "" && !accept.includes("application/json") && !accept.includes("*/*"));
    if (download) return c.body(Buffer.from(read.content), 200, { "Content-Type": "application/octet-stream" });
    return c.json({
      path,
      name: posix.basename(path),
      size: read.size,
      content: Buffer.from(read.content).toString("utf8"),
      lastModified: new Date(seen.mtimeMs).toISOString(),
    });
  });

  app.put(`${base}/filesystem/*`, async (c) => {
    const record = await target(c, "files");
    if (record instanceof Response) return record;
    const path = fsPath(c);
    if (path === null) return apiError(c, 400, "invalid path");
    const signal = c.req.raw.signal;
    let content: Uint8Array;
    let mode = 0o644;
    const permissions = (text: unknown) => (typeof text === "string" && /^[0-7]{3,4}$/.test(text) ? Number.parseInt(text, 8) : null);
    if ((c.req.header("content-type") ?? "").startsWith("multipart/form-data")) {
      const form = await c.req.formData().catch(() => null);
      const file = form?.get("file");
      if (!form || !(file instanceof Blob)) return apiError(c, 400, "multipart body needs a file field");
      content = new Uint8Array(await file.arrayBuffer());
      mode = permissions(form.get("permissions")) ?? mode;
    } else {
      const body = (await c.req.json().catch(() => null)) as { content?: unknown; isDirectory?: unknown; permissions?: unknown } | null;
      if (body === null) return apiError(c, 400, "the body must be JSON or multipart");
      if (body.isDirectory === true) {
        const made = await record.box.tools.exec({ command: ["mkdir", "-p", "--", path], timeoutMs: 60_000, signal });
        if (made.type !== "exited" || made.exitCode !== 0) return apiError(c, 422, "error creating directory");
        return c.json({ message: "Directory created successfully", path });
      }
      if (typeof body.content !== "string") return apiError(c, 400, "content must be a string");
      content = Buffer.from(body.content);
      mode = permissions(body.permissions) ?? mode;
    }
    const wrote = await record.box.tools.writeFile({ path, content, mode, signal });
    if (wrote.type !== "ok") return apiError(c, 422, `error writing file: ${wrote.message}`);
    return c.json({ message: "File created/updated successfully", path });
  });

  app.delete(`${base}/filesystem/*`, async (c) => {
    const record = await target(c, "files");
    if (record instanceof Response) return record;
    const path = fsPath(c);
    if (path === null) return apiError(c, 400, "invalid path");
    const flag = c.req.query("recursive") === "true" ? "-rf" : "-f";
    const removed = await record.box.tools.exec({ command: ["rm", flag, "--", path], timeoutMs: 60_000, signal: c.req.raw.signal });
    if (removed.type !== "exited" || removed.exitCode !== 0) return apiError(c, 422, `could not delete ${path}`);
    return c.json({ message: "File deleted successfully", path });
  });

  const server = await serveStandIn({ app, port: options.port, host: options.host });
  runUrl = `${server.url}/run`;
  mountAdmin(app, {
    token: apiKey,
    faults,
    state: async () => ({
      live: table.all().length,
      containers: await boxes.containers(),
      sandboxes: table.all().map((s) => ({ name: s.name, status: s.status })),
    }),
  });
  return standInHandle(
    {
      vendor: "blaxel",
      url: server.url,
      env: {
        BL_API_URL: `${server.url}/v0`,
        BL_RUN_URL: runUrl,
        BL_WORKSPACE: workspace,
        BL_API_KEY: apiKey,
        BL_REGION: "standin-1",
        // The edge's HTTP/2 pool is for the platform's own hosts; the stand-in speaks HTTP/1.1.
        BL_DISABLE_H2: "true",
      },
      faults,
      requests,
      boxes,
      live: () => table.all().length,
      find: (id) => table.get(id),
      running: (held) => held.status === "DEPLOYED",
      hangs,
      servers: [server],
    },
    { table, workspace },
  );
}
