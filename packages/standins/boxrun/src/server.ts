/**
 * The BoxRun stand-in: BoxLite's REST API (`/v1/boxes...`) as the official
 * REST client in `@boxlite-ai/boxlite` 0.10 (`JsBoxlite.rest`) speaks to
 * it, behind `Authorization: Bearer <key>`, with the API's error envelope
 * (`{"error": {message, type, code}}`). A box is a real local container;
 * an execution starts at `POST /boxes/{id}/exec` and is followed over the
 * attach WebSocket (`/executions/{id}/attach`): binary frames client →
 * server are stdin, text frames are control (`stdin_eof`, `signal`);
 * server → client binary frames carry a channel byte (1 stdout, 2 stderr)
 * and a final text frame `{"type":"exit","exit_code":N}`. Output produced
 * before the client attaches is kept and replayed.
 */
import { randomBytes } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { posix } from "node:path";
import type { OutputStream } from "@openma/contract";
import {
  type Box,
  type CloudStandIn,
  type Fault,
  FaultQueue,
  Hangs,
  KeyedLocks,
  LocalBoxes,
  mountAdmin,
  noteAuth,
  type RecordedRequest,
  recorder,
  recordUpgrade,
  type StandInEnv,
  type StandInOptions,
  serveStandIn,
  standInHandle,
  type UpgradeRoute,
} from "@openma/standin-kit";
import { type Context, Hono } from "hono";
import type { WebSocket } from "ws";
import { readTar, type TarEntry, writeTar } from "./tar.ts";

export const DEFAULT_BOXRUN_API_KEY = "blk_standin_0123456789abcdef";
const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;
const MAX_FILE_BYTES = 256 * 1024 * 1024;

type Ctx = Context<StandInEnv>;

interface Execution {
  id: string;
  command: string;
  status: "running" | "completed" | "killed";
  exitCode: number | null;
  /** Output not yet delivered to an attached client. */
  backlog: Array<[OutputStream, Uint8Array]>;
  client: WebSocket | null;
  /** An injected cut: the attach socket drops once this many output bytes went out (the execution goes on). */
  cutAfter: number | null;
  write(chunk: Uint8Array): Promise<void>;
  closeStdin(): void;
  kill(): Promise<void>;
  ended: Promise<void>;
}

export interface BoxRecord {
  id: string;
  name: string | null;
  image: string;
  box: Box;
  createdAt: Date;
  updatedAt: Date;
  executions: Map<string, Execution>;
}

export interface BoxRunStandIn extends CloudStandIn {
  /** Boxes by id. */
  readonly held: Map<string, BoxRecord>;
}

function apiError(c: Ctx, status: number, code: string, message: string) {
  const type = `${code
    .split("_")
    .map((p) => p.charAt(0).toUpperCase() + p.slice(1))
    .join("")}Error`;
  return c.json({ error: { message, type, code } }, status as 400);
}

/**
 * One output frame to the attached client: a channel byte, then the bytes.
 * Under an injected cut the socket is dropped instead once the budget is
 * spent, as a lost network path would; the execution goes on.
 */
function send(execution: Execution, socket: WebSocket, stream: OutputStream, chunk: Uint8Array): void {
  if (execution.cutAfter !== null) {
    if (chunk.length > execution.cutAfter) {
      // Kept for a client that reattaches, as the API's execution outlives its attach.
      execution.cutAfter = null;
      execution.backlog.push([stream, chunk]);
      socket.terminate();
      return;
    }
    execution.cutAfter -= chunk.length;
  }
  socket.send(Buffer.concat([Buffer.from([stream === "stdout" ? 1 : 2]), chunk]));
}

function boxJson(record: BoxRecord): Record<string, unknown> {
  const status = record.box.state === "running" ? "running" : record.box.state === "paused" ? "paused" : "stopped";
  return {
    box_id: record.id,
    name: record.name,
    status,
    created_at: record.createdAt.toISOString(),
    updated_at: record.updatedAt.toISOString(),
    pid: null,
    image: record.image,
    cpus: 1,
    memory_mib: 512,
    labels: {},
  };
}

export async function startBoxRunStandIn(options: StandInOptions = {}): Promise<BoxRunStandIn> {
  const apiKey = options.apiKey ?? DEFAULT_BOXRUN_API_KEY;
  const faults = new FaultQueue();
  const hangs = new Hangs();
  const requests: RecordedRequest[] = [];
  const boxes = new LocalBoxes({ vendor: "boxrun", image: options.image, networkMode: options.networkMode });
  const held = new Map<string, BoxRecord>();
  const locks = new KeyedLocks();

  const app = new Hono<StandInEnv>();
  app.use("*", recorder(requests));
  app.use("/v1/*", async (c, next) => {
    const header = c.req.header("authorization");
    const ok = header === `Bearer ${apiKey}`;
    noteAuth(c, header === undefined ? null : "authorization", ok);
    if (!ok) return apiError(c, 401, "unauthorized", "invalid or missing API key");
    await next();
  });

  const find = (idOrName: string) => held.get(idOrName) ?? [...held.values()].find((b) => b.name === idOrName);
  const destroy = async (record: BoxRecord) => {
    held.delete(record.id);
    await Promise.all([...record.executions.values()].map((e) => (e.status === "running" ? e.kill().catch(() => {}) : undefined)));
    await boxes.destroy(record.box);
  };

  /** `onCut` receives a cut fault; a route without a stream ignores it. */
  const fault = async (c: Ctx, op: Fault["op"], record?: BoxRecord, onCut?: (afterBytes: number) => void): Promise<Response | null> => {
    const f = faults.take(op);
    if (f?.kind === "cut") onCut?.(f.afterBytes ?? 0);
    if (f === undefined || f.kind === "cut") return null;
    if (f.kind === "status") return apiError(c, f.status ?? 500, "internal", "internal server error");
    if (f.kind === "rate_limited") {
      c.header("Retry-After", String(f.retryAfterSeconds ?? 1));
      return apiError(c, 429, "rate_limited", "too many requests");
    }
    if (f.kind === "hang") {
      await hangs.hang();
      return apiError(c, 503, "unavailable", "stand-in closing");
    }
    if (record) await destroy(record);
    return apiError(c, 404, "not_found", "box not found");
  };

  app.get("/v1/config", (c) =>
    c.json({ capabilities: { snapshots_enabled: false, clone_enabled: false, export_enabled: false, import_enabled: false } }),
  );

  app.post("/v1/boxes", async (c) => {
    const body = (await c.req.json().catch(() => null)) as { name?: unknown; image?: unknown } | null;
    if (body === null) return apiError(c, 400, "invalid_argument", "the body must be a CreateBoxRequest");
    const name = body.name ?? null;
    if (name !== null && (typeof name !== "string" || !NAME.test(name))) return apiError(c, 400, "invalid_argument", "invalid box name");
    const refused = await fault(c, "create");
    if (refused) return refused;
    if (name !== null && find(name)) return apiError(c, 409, "already_exists", `box ${name} already exists`);
    let box: Box;
    try {
      box = await boxes.create("box-");
    } catch (err) {
      return apiError(c, 500, "internal", `could not start the box: ${String(err)}`);
    }
    const now = new Date();
    const record: BoxRecord = {
      id: randomBytes(6).toString("hex"),
      name,
      image: typeof body.image === "string" ? body.image : "standin",
      box,
      createdAt: now,
      updatedAt: now,
      executions: new Map(),
    };
    held.set(record.id, record);
    return c.json(boxJson(record), 201);
  });

  app.get("/v1/boxes", async (c) => {
    const refused = await fault(c, "list");
    if (refused) return refused;
    return c.json({ boxes: [...held.values()].map(boxJson), next_page_token: null });
  });

  app.get("/v1/boxes/:id", async (c) => {
    const record = find(c.req.param("id"));
    const refused = await fault(c, "get", record);
    if (refused) return refused;
    if (!record) return apiError(c, 404, "not_found", "box not found");
    return c.json(boxJson(record));
  });

  app.delete("/v1/boxes/:id", async (c) => {
    const record = find(c.req.param("id"));
    const refused = await fault(c, "kill", record);
    if (refused) return refused;
    if (!record) return apiError(c, 404, "not_found", "box not found");
    await destroy(record);
    return c.body(null, 204);
  });

  for (const verb of ["start", "stop"] as const) {
    app.post(`/v1/boxes/:id/${verb}`, async (c) => {
      const record = find(c.req.param("id"));
      const refused = await fault(c, "lifecycle", record);
      if (refused) return refused;
      if (!record) return apiError(c, 404, "not_found", "box not found");
      await locks.run(record.id, async () => {
        if (verb === "stop") {
          for (const e of record.executions.values()) if (e.status === "running") await e.kill().catch(() => {});
          await boxes.stop(record.box);
        } else await boxes.start(record.box);
        record.updatedAt = new Date();
      });
      return c.json(boxJson(record));
    });
  }

  app.post("/v1/boxes/:id/exec", async (c) => {
    const record = find(c.req.param("id"));
    let cutAfter: number | null = null;
    const refused = await fault(c, "exec", record, (afterBytes) => {
      cutAfter = afterBytes;
    });
    if (refused) return refused;
    if (!record) return apiError(c, 404, "not_found", "box not found");
    if (record.box.state !== "running") return apiError(c, 409, "invalid_state", "box is not running");
    const body = (await c.req.json().catch(() => null)) as {
      command?: unknown;
      args?: unknown;
      env?: unknown;
      working_dir?: unknown;
    } | null;
    if (body === null || typeof body.command !== "string" || body.command === "")
      return apiError(c, 400, "invalid_argument", "command is required");
    const args = body.args ?? [];
    if (!Array.isArray(args) || !args.every((a) => typeof a === "string"))
      return apiError(c, 400, "invalid_argument", "args must be strings");
    const env = body.env ?? {};
    if (typeof env !== "object" || env === null || !Object.values(env).every((v) => typeof v === "string"))
      return apiError(c, 400, "invalid_argument", "env must map strings to strings");
    const id = `exec-${randomBytes(8).toString("hex")}`;
    const backlog: Array<[OutputStream, Uint8Array]> = [];
    let execution: Execution | null = null;
    const deliver = (stream: OutputStream, chunk: Uint8Array) => {
      const client = execution?.client;
      if (client && client.readyState === client.OPEN) send(execution as Execution, client, stream, chunk);
      else backlog.push([stream, chunk]);
    };
    const stop = new AbortController();
    const proc = await record.box.tools.spawn({
      command: [body.command, ...args],
      cwd: typeof body.working_dir === "string" && body.working_dir.startsWith("/") ? body.working_dir : "/",
      env: env as Record<string, string>,
      signal: stop.signal,
      onOutput: deliver,
    });
    let killed = false;
    const ended = proc.done.then((result) => {
      const e = execution as Execution;
      e.status = killed ? "killed" : "completed";
      e.exitCode = killed ? 137 : result.type === "exited" ? result.exitCode : result.type === "error" ? 127 : 137;
      if (e.client && e.client.readyState === e.client.OPEN) e.client.send(JSON.stringify({ type: "exit", exit_code: e.exitCode }));
    });
    execution = {
      id,
      command: body.command,
      status: "running",
      exitCode: null,
      backlog,
      client: null,
      cutAfter,
      write: (chunk) => proc.write(chunk),
      closeStdin: () => proc.closeStdin(),
      kill: async () => {
        killed = true;
        await proc.kill();
      },
      ended,
    };
    record.executions.set(id, execution);
    return c.json({ execution_id: id }, 201);
  });

  const executionOf = (c: Ctx) => {
    const record = find(c.req.param("id") ?? "");
    return { record, execution: record?.executions.get(c.req.param("eid") ?? "") };
  };

  app.get("/v1/boxes/:id/executions/:eid", (c) => {
    const { execution } = executionOf(c);
    if (!execution) return apiError(c, 404, "not_found", "execution not found");
    return c.json({
      execution_id: execution.id,
      command: execution.command,
      status: execution.status,
      attached: execution.client !== null,
      exit_code: execution.exitCode,
      error_message: null,
    });
  });

  // The client's kill: SIGKILL to the execution (and, through the node-docker exec, its whole tree).
  app.delete("/v1/boxes/:id/executions/:eid", async (c) => {
    const { execution } = executionOf(c);
    if (!execution) return apiError(c, 404, "not_found", "execution not found");
    if (execution.status === "running") await execution.kill();
    return c.body(null, 204);
  });

  app.post("/v1/boxes/:id/executions/:eid/signal", async (c) => {
    const { execution } = executionOf(c);
    if (!execution) return apiError(c, 404, "not_found", "execution not found");
    if (execution.status === "running") await execution.kill();
    return c.body(null, 204);
  });

  /** `PUT /boxes/{id}/files?path=`: a tar extracted at `path` (one file: written as `path` unless it names a directory). */
  app.put("/v1/boxes/:id/files", async (c) => {
    const record = find(c.req.param("id"));
    const refused = await fault(c, "files", record);
    if (refused) return refused;
    if (!record) return apiError(c, 404, "not_found", "box not found");
    const dest = c.req.query("path");
    if (!dest?.startsWith("/")) return apiError(c, 400, "invalid_argument", "path must be absolute");
    const signal = c.req.raw.signal;
    let entries: TarEntry[];
    try {
      entries = await readTar(new Uint8Array(await c.req.arrayBuffer()));
    } catch (err) {
      return apiError(c, 400, "invalid_argument", `not a tar archive: ${String(err)}`);
    }
    const files = entries.filter((e) => e.type === "file");
    const seen = await record.box.tools.stat({ path: dest, signal });
    const intoDir = dest.endsWith("/") || (seen.type === "found" && seen.kind === "directory");
    for (const entry of entries) {
      const relative = posix.normalize(entry.name).replace(/^(\.\/)+/, "");
      if (relative.startsWith("..") || posix.isAbsolute(relative)) return apiError(c, 400, "invalid_argument", "entry escapes the target");
      const target = !intoDir && files.length === 1 && entries.length === 1 ? dest : posix.join(dest, relative);
      if (entry.type === "directory") {
        await record.box.tools.exec({ command: ["mkdir", "-p", "--", target], timeoutMs: 60_000, signal });
        continue;
      }
      const wrote = await record.box.tools.writeFile({ path: target, content: entry.content, mode: entry.mode, signal });
      if (wrote.type !== "ok") return apiError(c, 500, "internal", wrote.message);
    }
    return c.body(null, 204);
  });

  /** `GET /boxes/{id}/files?path=`: a tar holding the file (or the directory's tree) under its base name. */
  app.get("/v1/boxes/:id/files", async (c) => {
    const record = find(c.req.param("id"));
    const refused = await fault(c, "files", record);
    if (refused) return refused;
    if (!record) return apiError(c, 404, "not_found", "box not found");
    const src = c.req.query("path");
    if (!src?.startsWith("/")) return apiError(c, 400, "invalid_argument", "path must be absolute");
    const signal = c.req.raw.signal;
    const seen = await record.box.tools.stat({ path: src, signal });
    if (seen.type === "not_found") return apiError(c, 404, "not_found", `${src}: no such file or directory`);
    if (seen.type !== "found") return apiError(c, 500, "internal", seen.message);
    const base = posix.basename(src) || "root";
    const entries: TarEntry[] = [];
    const addFile = async (path: string, name: string) => {
      const read = await record.box.tools.readFile({ path, maxBytes: MAX_FILE_BYTES, signal });
      if (read.type === "ok") entries.push({ name, type: "file", content: read.content, mode: 0o644 });
    };
    if (seen.kind === "directory") {
      entries.push({ name: base, type: "directory", content: new Uint8Array(), mode: 0o755 });
      const listed = await record.box.tools.list({ path: src, recursive: true, maxEntries: 100_000, signal });
      if (listed.type !== "ok") return apiError(c, 500, "internal", "could not list the directory");
      for (const e of listed.entries) {
        const name = posix.join(base, posix.relative(src, e.path));
        if (e.kind === "directory") entries.push({ name, type: "directory", content: new Uint8Array(), mode: 0o755 });
        else if (e.kind === "file") await addFile(e.path, name);
      }
    } else await addFile(src, base);
    return c.body(Buffer.from(await writeTar(entries)), 200, { "Content-Type": "application/x-tar" });
  });

  const attach: UpgradeRoute = {
    match(path) {
      const m = /^\/v1\/boxes\/([^/]+)\/executions\/([^/]+)\/attach$/.exec(path);
      return m ? { id: decodeURIComponent(m[1] as string), eid: decodeURIComponent(m[2] as string) } : null;
    },
    async accept(request: IncomingMessage, params) {
      const ok = request.headers.authorization === `Bearer ${apiKey}`;
      recordUpgrade(requests, request, "authorization", ok);
      const body = (code: string, message: string) => JSON.stringify({ error: { message, type: "Error", code } });
      if (!ok) return { status: 401, body: body("unauthorized", "invalid or missing API key") };
      const execution = find(params.id as string)?.executions.get(params.eid as string);
      if (!execution) return { status: 404, body: body("not_found", "execution not found") };
      if (execution.client !== null) return { status: 409, body: body("already_exists", "another client is attached") };
      return null;
    },
    open(socket, _request, params) {
      const execution = find(params.id as string)?.executions.get(params.eid as string);
      if (!execution) return socket.close(1011);
      execution.client = socket;
      // A first frame at once: the client gives up on an attach that stays silent.
      socket.ping();
      for (const [stream, chunk] of execution.backlog.splice(0)) send(execution, socket, stream, chunk);
      if (execution.status !== "running" && socket.readyState === socket.OPEN)
        socket.send(JSON.stringify({ type: "exit", exit_code: execution.exitCode }));
      socket.on("message", (data, isBinary) => {
        const bytes = Buffer.isBuffer(data) ? data : Buffer.from(data as ArrayBuffer);
        if (isBinary) {
          void execution.write(bytes).catch(() => {});
          return;
        }
        const message = (() => {
          try {
            return JSON.parse(bytes.toString("utf8")) as { type?: string };
          } catch {
            return null;
          }
        })();
        if (message?.type === "stdin_eof") execution.closeStdin();
        else if (message?.type === "signal") void execution.kill();
      });
      socket.on("close", () => {
        if (execution.client === socket) execution.client = null;
      });
    },
  };

  const server = await serveStandIn({ app, port: options.port, host: options.host, upgrades: [attach] });
  mountAdmin(app, {
    token: apiKey,
    faults,
    state: async () => ({ live: held.size, containers: await boxes.containers() }),
  });
  app.all("*", (c) => apiError(c, 404, "not_found", `no route ${c.req.method} ${new URL(c.req.url).pathname}`));
  return standInHandle(
    {
      vendor: "boxrun",
      url: server.url,
      env: { BOXLITE_REST_URL: server.url, BOXLITE_API_KEY: apiKey },
      faults,
      requests,
      boxes,
      live: () => held.size,
      find,
      running: (record) => record.box.state === "running",
      hangs,
      servers: [server],
    },
    { held },
  );
}
