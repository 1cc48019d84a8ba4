/**
 * The Fly Sprites stand-in: `api.sprites.dev` as `@fly/sprites` 0.1 speaks
 * to it. REST for the Sprite lifecycle (`/v1/sprites`), the filesystem API
 * (`/v1/sprites/{name}/fs/*`) and the exec WebSocket, all behind
 * `Authorization: Bearer <token>`, with the platform's error bodies
 * (`{"error": "..."}`, 429 with `Retry-After`). Point the SDK at it with
 * `new SpritesClient(token, {baseURL})`; OpenMA's driver reads the CLI's
 * `SPRITES_API_URL`.
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
  recordUpgrade,
  type StandInEnv,
  type StandInOptions,
  serveStandIn,
  standInHandle,
  type UpgradeRoute,
} from "@openma/standin-kit";
import { realScheduler, type Scheduler } from "@openma/time";
import { type Context, Hono } from "hono";
import { parseExecQuery, runExec } from "./exec.ts";
import { DEFAULT_SLEEP, type SleepPolicy, type SpriteRecord, SpriteTable, spriteJson } from "./sprites.ts";

export const DEFAULT_SPRITES_TOKEN = "standin-org/standin-token/0123456789abcdef";
const NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;
const MAX_FILE_BYTES = 256 * 1024 * 1024;

export interface SpritesStandInOptions extends StandInOptions {
  /** Automatic sleep (warm, then cold); default 30 s and 5 min idle. */
  sleep?: Partial<SleepPolicy>;
  scheduler?: Scheduler;
}

export interface SpritesStandIn extends CloudStandIn {
  readonly table: SpriteTable;
}

type Ctx = Context<StandInEnv>;

function apiError(c: Ctx, status: number, error: string, extra: Record<string, unknown> = {}) {
  return c.json({ error, message: error, ...extra }, status as 400);
}

export async function startSpritesStandIn(options: SpritesStandInOptions = {}): Promise<SpritesStandIn> {
  const token = options.apiKey ?? DEFAULT_SPRITES_TOKEN;
  const faults = new FaultQueue();
  const hangs = new Hangs();
  const requests: RecordedRequest[] = [];
  const boxes = new LocalBoxes({ vendor: "sprites", image: options.image, networkMode: options.networkMode });
  const scheduler = options.scheduler ?? realScheduler;
  const table = new SpriteTable(boxes, scheduler, { ...DEFAULT_SLEEP, ...options.sleep });
  let baseUrl = "";

  const app = new Hono<StandInEnv>();
  app.use("*", recorder(requests));
  app.use("/v1/*", async (c, next) => {
    const header = c.req.header("authorization");
    const ok = header === `Bearer ${token}`;
    noteAuth(c, header === undefined ? null : "authorization", ok);
    if (!ok) return apiError(c, 401, "unauthorized");
    await next();
  });

  /** Plays a queued fault of `op`: a response to send instead, or null to go on. `vanish` destroys `sprite`. */
  const fault = async (c: Ctx, op: Fault["op"], sprite?: SpriteRecord): Promise<Response | null> => {
    const f = faults.take(op);
    if (f === undefined || f.kind === "cut") return null;
    if (f.kind === "status") return apiError(c, f.status ?? 500, "internal server error");
    if (f.kind === "rate_limited") {
      c.header("Retry-After", String(f.retryAfterSeconds ?? 1));
      return apiError(c, 429, "sprite_creation_rate_limited", { retry_after_seconds: f.retryAfterSeconds ?? 1 });
    }
    if (f.kind === "hang") {
      await hangs.hang();
      return apiError(c, 503, "stand-in closing");
    }
    if (sprite) await table.destroy(sprite);
    return apiError(c, 404, "sprite not found");
  };

  app.post("/v1/sprites", async (c) => {
    const body = (await c.req.json().catch(() => null)) as { name?: unknown; labels?: unknown } | null;
    if (body === null || typeof body.name !== "string") return c.json({ errors: ["name is required"] }, 400);
    if (!NAME.test(body.name)) return c.json({ errors: ["name must be lower-case letters, digits and dashes (at most 63)"] }, 400);
    const labels = Array.isArray(body.labels) ? body.labels : [];
    if (!labels.every((l): l is string => typeof l === "string")) return c.json({ errors: ["labels must be strings"] }, 400);
    const refused = await fault(c, "create");
    if (refused) return refused;
    if (table.get(body.name)) return apiError(c, 409, "sprite name already exists");
    let sprite: SpriteRecord;
    try {
      sprite = await table.create(body.name, labels);
    } catch (err) {
      return apiError(c, 500, `could not start the sprite: ${String(err)}`);
    }
    return c.json(spriteJson(table, sprite, baseUrl), 201);
  });

  app.get("/v1/sprites", async (c) => {
    const refused = await fault(c, "list");
    if (refused) return refused;
    const prefix = c.req.query("prefix") ?? "";
    const max = Math.min(50, Math.max(1, Number(c.req.query("max_results") ?? 50) || 50));
    const after = c.req.query("continuation_token") ?? "";
    const matching = table.all().filter((s) => s.name.startsWith(prefix) && s.name > after);
    const page = matching.slice(0, max);
    const more = matching.length > max;
    return c.json({
      sprites: page.map((s) => spriteJson(table, s, baseUrl)),
      has_more: more,
      next_continuation_token: more ? page.at(-1)?.name : undefined,
    });
  });

  const named = (c: Ctx) => table.get(c.req.param("name") ?? "");

  app.get("/v1/sprites/:name", async (c) => {
    const sprite = named(c);
    const refused = await fault(c, "get", sprite);
    if (refused) return refused;
    if (!sprite) return apiError(c, 404, "sprite not found");
    return c.json(spriteJson(table, sprite, baseUrl));
  });

  app.put("/v1/sprites/:name", async (c) => {
    const sprite = named(c);
    if (!sprite) return apiError(c, 404, "sprite not found");
    const body = (await c.req.json().catch(() => null)) as { labels?: unknown } | null;
    if (body !== null && Array.isArray(body.labels)) {
      if (!body.labels.every((l): l is string => typeof l === "string")) return c.json({ errors: ["labels must be strings"] }, 400);
      sprite.labels = body.labels;
      sprite.updatedAt = new Date(scheduler.now());
    }
    return c.json(spriteJson(table, sprite, baseUrl));
  });

  app.delete("/v1/sprites/:name", async (c) => {
    const sprite = named(c);
    const refused = await fault(c, "kill", sprite);
    if (refused) return refused;
    if (!sprite) return apiError(c, 404, "sprite not found");
    await table.destroy(sprite);
    return c.body(null, 204);
  });

  mountFilesystem(app, { table, fault, named });

  const server = await serveStandIn({
    app,
    port: options.port,
    host: options.host,
    upgrades: [execRoute({ table, faults, token, requests })],
  });
  baseUrl = server.url;
  mountAdmin(app, {
    token,
    faults,
    state: async () => ({
      live: table.all().length,
      containers: await boxes.containers(),
      sprites: table.all().map((s) => ({ name: s.name, status: table.status(s) })),
    }),
  });
  return standInHandle(
    {
      vendor: "sprites",
      url: server.url,
      env: { SPRITES_API_URL: server.url, SPRITES_TOKEN: token },
      faults,
      requests,
      boxes,
      live: () => table.all().length,
      find: (id) => table.get(id),
      running: (held) => held.box.state === "running",
      hangs,
      servers: [server],
      stop() {
        table.close();
      },
    },
    { table },
  );
}

/** `/v1/sprites/{name}/fs/{read,write,list,delete}`: paths resolve against `workingDir`; a sleeping Sprite wakes. */
function mountFilesystem(
  app: Hono<StandInEnv>,
  deps: {
    table: SpriteTable;
    fault: (c: Ctx, op: Fault["op"], sprite?: SpriteRecord) => Promise<Response | null>;
    named: (c: Ctx) => SpriteRecord | undefined;
  },
): void {
  const { table, fault, named } = deps;
  const target = (c: Ctx) => posix.resolve(c.req.query("workingDir") ?? "/", c.req.query("path") ?? "");
  const fsError = (c: Ctx, status: number, code: string, path: string, error: string) => c.json({ error, code, path }, status as 400);
  const awake = async (c: Ctx): Promise<SpriteRecord | Response> => {
    const sprite = named(c);
    const refused = await fault(c, "files", sprite);
    if (refused) return refused;
    if (!sprite) return c.json({ error: "sprite not found" }, 404);
    await table.wake(sprite);
    return sprite;
  };

  app.get("/v1/sprites/:name/fs/read", async (c) => {
    const sprite = await awake(c);
    if (sprite instanceof Response) return sprite;
    const path = target(c);
    const read = await sprite.box.tools.readFile({ path, maxBytes: MAX_FILE_BYTES, signal: c.req.raw.signal });
    if (read.type === "not_found") return fsError(c, 404, "ENOENT", path, "no such file or directory");
    if (read.type === "not_a_file") return fsError(c, 400, "EISDIR", path, "is a directory");
    if (read.type !== "ok") return fsError(c, 500, "EIO", path, read.type === "too_large" ? "file too large" : read.message);
    return c.body(Buffer.from(read.content), 200, { "Content-Type": "application/octet-stream" });
  });

  app.put("/v1/sprites/:name/fs/write", async (c) => {
    const sprite = await awake(c);
    if (sprite instanceof Response) return sprite;
    const path = target(c);
    const content = new Uint8Array(await c.req.arrayBuffer());
    if (c.req.query("mkdirParents") !== "true") {
      const parent = await sprite.box.tools.stat({ path: posix.dirname(path), signal: c.req.raw.signal });
      if (parent.type !== "found") return fsError(c, 404, "ENOENT", path, "parent directory does not exist");
    }
    const modeText = c.req.query("mode");
    const mode = modeText === undefined ? 0o644 : Number.parseInt(modeText, 8);
    const wrote = await sprite.box.tools.writeFile({ path, content, mode, signal: c.req.raw.signal });
    if (wrote.type !== "ok") return fsError(c, 500, "EIO", path, wrote.message);
    return c.json({ path, size: content.length });
  });

  app.get("/v1/sprites/:name/fs/list", async (c) => {
    const sprite = await awake(c);
    if (sprite instanceof Response) return sprite;
    const path = target(c);
    const seen = await sprite.box.tools.stat({ path, signal: c.req.raw.signal });
    if (seen.type === "not_found") return fsError(c, 404, "ENOENT", path, "no such file or directory");
    if (seen.type !== "found") return fsError(c, 500, "EIO", path, seen.message);
    const entry = (p: string, kind: string, size: number, mtimeMs: number) => ({
      name: posix.basename(p),
      path: p,
      size,
      mode: kind === "directory" ? "0755" : "0644",
      modTime: new Date(mtimeMs).toISOString(),
      isDir: kind === "directory",
      type: kind === "symlink" ? "symlink" : kind === "directory" ? "directory" : "file",
    });
    if (seen.kind !== "directory") return c.json({ path, entries: [entry(path, seen.kind, seen.size, seen.mtimeMs)] });
    const listed = await sprite.box.tools.list({
      path,
      recursive: c.req.query("recursive") === "true",
      maxEntries: 10_000,
      signal: c.req.raw.signal,
    });
    if (listed.type !== "ok") return fsError(c, 500, "EIO", path, listed.type === "not_found" ? "not found" : listed.message);
    return c.json({ path, entries: listed.entries.map((e) => entry(e.path, e.kind, e.size, e.mtimeMs)) });
  });

  app.delete("/v1/sprites/:name/fs/delete", async (c) => {
    const sprite = await awake(c);
    if (sprite instanceof Response) return sprite;
    const path = target(c);
    const flag = c.req.query("recursive") === "true" ? "-rf" : "-f";
    const removed = await sprite.box.tools.exec({ command: ["rm", flag, "--", path], timeoutMs: 60_000, signal: c.req.raw.signal });
    if (removed.type !== "exited" || removed.exitCode !== 0) return fsError(c, 500, "EIO", path, "could not delete");
    return c.json({ path });
  });
}

/** The exec WebSocket: credentials and faults are checked on the upgrade request, as the platform does. */
function execRoute(deps: { table: SpriteTable; faults: FaultQueue; token: string; requests: RecordedRequest[] }): UpgradeRoute {
  const { table, faults, token, requests } = deps;
  const cuts = new WeakMap<IncomingMessage, Extract<Fault, { kind: "cut" }>>();
  return {
    match(path) {
      const m = /^\/v1\/sprites\/([^/]+)\/exec$/.exec(path);
      return m ? { name: decodeURIComponent(m[1] as string) } : null;
    },
    async accept(request, params) {
      const url = new URL(request.url ?? "/", "http://standin");
      const ok = request.headers.authorization === `Bearer ${token}`;
      recordUpgrade(requests, request, "authorization", ok);
      if (!ok) return { status: 401, body: JSON.stringify({ error: "unauthorized" }) };
      const sprite = table.get(params.name as string);
      const f = faults.take("exec");
      if (f?.kind === "status") return { status: f.status ?? 500, body: JSON.stringify({ error: "internal server error" }) };
      if (f?.kind === "rate_limited")
        return { status: 429, body: JSON.stringify({ error: "rate limited", retry_after_seconds: f.retryAfterSeconds ?? 1 }) };
      if (f?.kind === "hang") return new Promise(() => {});
      if (f?.kind === "vanish" && sprite) await table.destroy(sprite);
      if (f?.kind === "cut") cuts.set(request, f);
      if (!table.get(params.name as string)) return { status: 404, body: JSON.stringify({ error: "sprite not found" }) };
      const exec = parseExecQuery(url);
      if ("error" in exec) return { status: 400, body: JSON.stringify({ error: exec.error }) };
      // Woken before the upgrade completes, so no stdin frame arrives before the command is there to read it.
      await table.wake(table.get(params.name as string) as SpriteRecord);
      return null;
    },
    open(socket, request, params) {
      const sprite = table.get(params.name as string);
      const exec = parseExecQuery(new URL(request.url ?? "/", "http://standin"));
      if (!sprite || "error" in exec) return socket.close(1011);
      runExec({ socket, request, table, sprite, exec, cut: cuts.get(request) ?? null });
    },
  };
}
