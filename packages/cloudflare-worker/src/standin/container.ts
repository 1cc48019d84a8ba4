/**
 * A stand-in for the container half of Cloudflare Containers, used only
 * because the real one cannot run offline (ADR 0019 lists what was tried):
 *
 * - the platform side: `POST /containers/:id/start` and
 *   `DELETE /containers/:id`, called by the stand-in `ctx.container` in
 *   workerd (worker/standin.ts), start and destroy a real local box (Docker,
 *   through the stand-in kit) whose only way out is the Worker
 *   (`PlatformInterceptPort`);
 * - the container's own HTTP API on port 3000, the routes the Sandbox SDK's
 *   HTTP transport calls (`/api/session/create`, `/api/execute`,
 *   `/api/execute/stream`, ...), under `/containers/:id/port/3000/`.
 *
 * Commands run through bash in the box with the session's environment, as
 * Cloudflare's control server runs them; output is sent when the command
 * ends (not live), which is all the SDK's parser needs.
 */
import type { RuntimeResourceScope } from "@openma/contract";
import {
  type Box,
  LocalBoxes,
  type RecordedRequest,
  recorder,
  type StandInEnv,
  type StartedServer,
  serveStandIn,
} from "@openma/standin-kit";
import { Hono } from "hono";
import { streamSSE } from "hono/streaming";
import { z } from "zod";
import { PlatformInterceptPort } from "./intercept.ts";

const StartBody = z.object({ env: z.record(z.string(), z.string()).default({}), enableInternet: z.boolean().default(false) });
const SessionBody = z.object({ id: z.string().min(1), env: z.record(z.string(), z.string()).optional(), cwd: z.string().optional() });
const WriteBody = z.object({ path: z.string(), content: z.string(), encoding: z.string().optional() });
const ExecBody = z.object({
  command: z.string(),
  sessionId: z.string().optional(),
  env: z.record(z.string(), z.string()).optional(),
  cwd: z.string().optional(),
  timeoutMs: z.number().int().positive().optional(),
});

interface Running {
  box: Box;
  env: Record<string, string>;
  sessions: Map<string, { env: Record<string, string>; cwd: string | undefined }>;
}

export interface CloudflareContainerStandInOptions {
  /** Sends one request into the Worker (the container's outbound traffic goes there). */
  dispatch(request: Request): Promise<Response>;
  image?: string;
}

export class CloudflareContainerStandIn {
  readonly requests: RecordedRequest[] = [];
  readonly boxes: LocalBoxes;
  readonly #running = new Map<string, Running>();
  /** Box id prefix → Durable Object id, so the intercept port knows whose box it is wiring. */
  readonly #owners = new Map<string, string>();
  #server: StartedServer | null = null;
  #serial = 0;

  constructor(options: CloudflareContainerStandInOptions) {
    const intercept = new PlatformInterceptPort({
      containerFor: (scope: RuntimeResourceScope) => {
        for (const [prefix, owner] of this.#owners) if (scope.sessionId.startsWith(prefix)) return owner;
        return null;
      },
      dispatch: options.dispatch,
    });
    this.boxes = new LocalBoxes({ vendor: "cloudflare", image: options.image, networkMode: "none", credentialEgress: intercept });
  }

  /** Every variable the Durable Object gave a container (start env, session env), for leak checks. */
  environments(): Record<string, string>[] {
    return [...this.#running.values()].flatMap((r) => [r.env, ...[...r.sessions.values()].map((s) => s.env)]);
  }

  get url(): string {
    if (!this.#server) throw new Error("stand-in not started");
    return this.#server.url;
  }

  async start(): Promise<void> {
    this.#server = await serveStandIn({ app: this.#app() });
  }

  async close(): Promise<void> {
    await this.#server?.close();
    await this.boxes.close();
  }

  #app(): Hono<StandInEnv> {
    const app = new Hono<StandInEnv>();
    app.use("*", recorder(this.requests));
    app.post("/containers/:id/start", async (c) => {
      const id = c.req.param("id");
      if (this.#running.has(id)) return c.json({ error: "already running" }, 409);
      const body = StartBody.parse(await c.req.json());
      const prefix = `cf${++this.#serial}-`;
      this.#owners.set(prefix, id);
      const box = await this.boxes.create(prefix);
      this.#running.set(id, { box, env: body.env, sessions: new Map() });
      return c.json({ ok: true });
    });
    app.delete("/containers/:id", async (c) => {
      const running = this.#running.get(c.req.param("id"));
      this.#running.delete(c.req.param("id"));
      if (running) await this.boxes.destroy(running.box);
      return c.body(null, 204);
    });
    const api = new Hono<StandInEnv>();
    api.get("/", (c) => c.text("ok")); // the Container class's start health check
    api.get("/api/ping", (c) => c.json({ success: true, message: "pong", timestamp: new Date().toISOString() }));
    api.get("/api/version", (c) => c.json({ success: true, version: "openma-standin" }));
    api.post("/api/session/create", async (c) => {
      const running = this.#get(c.req.param("id"));
      const body = SessionBody.parse(await c.req.json());
      running.sessions.set(body.id, { env: body.env ?? {}, cwd: body.cwd });
      return c.json({ success: true, id: body.id, message: "session created", timestamp: new Date().toISOString() });
    });
    api.post("/api/session/delete", async (c) => {
      const body = z.object({ sessionId: z.string() }).parse(await c.req.json());
      this.#get(c.req.param("id")).sessions.delete(body.sessionId);
      return c.json({ success: true, sessionId: body.sessionId, timestamp: new Date().toISOString() });
    });
    api.post("/api/execute", async (c) => {
      const body = ExecBody.parse(await c.req.json());
      const r = await this.#exec(c.req.param("id"), body);
      return c.json({ success: r.exitCode === 0, ...r, command: body.command, timestamp: new Date().toISOString() });
    });
    api.post("/api/execute/stream", async (c) => {
      const body = ExecBody.parse(await c.req.json());
      const id = c.req.param("id");
      return streamSSE(c, async (stream) => {
        const send = (event: Record<string, unknown>) => stream.writeSSE({ data: JSON.stringify(event) });
        await send({ type: "start", command: body.command, timestamp: new Date().toISOString() });
        const r = await this.#exec(id, body);
        if (r.stdout) await send({ type: "stdout", data: r.stdout });
        if (r.stderr) await send({ type: "stderr", data: r.stderr });
        await send({ type: "complete", exitCode: r.exitCode, timestamp: new Date().toISOString() });
      });
    });
    api.post("/api/write", async (c) => {
      const body = WriteBody.parse(await c.req.json());
      const content = Buffer.from(body.content, body.encoding === "base64" ? "base64" : "utf8");
      const written = await this.#get(c.req.param("id")).box.tools.writeFile({
        path: body.path,
        content,
        signal: AbortSignal.timeout(60_000),
      });
      if (written.type === "error") return c.json({ success: false, error: written.message, code: "FILESYSTEM_ERROR" }, 500);
      return c.json({ success: true, path: body.path, exitCode: 0, timestamp: new Date().toISOString() });
    });
    api.post("/api/read/stream", async (c) => {
      const body = z.object({ path: z.string() }).parse(await c.req.json());
      const read = await this.#get(c.req.param("id")).box.tools.readFile({
        path: body.path,
        maxBytes: 32 * 1024 * 1024,
        signal: AbortSignal.timeout(60_000),
      });
      if (read.type === "not_found") return c.json({ success: false, error: `File not found: ${body.path}`, code: "FILE_NOT_FOUND" }, 404);
      if (read.type !== "ok")
        return c.json({ success: false, error: `cannot read ${body.path}: ${read.type}`, code: "FILESYSTEM_ERROR" }, 500);
      return streamSSE(c, async (stream) => {
        const send = (event: Record<string, unknown>) => stream.writeSSE({ data: JSON.stringify(event) });
        await send({ type: "metadata", mimeType: "application/octet-stream", size: read.size, isBinary: true, encoding: "base64" });
        await send({ type: "chunk", data: Buffer.from(read.content).toString("base64") });
        await send({ type: "complete", bytesRead: read.size });
      });
    });
    api.all("*", (c) => c.json({ success: false, error: `the stand-in does not serve ${c.req.method} ${c.req.path}` }, 501));
    app.route("/containers/:id/port/3000", api);
    return app;
  }

  #get(id: string | undefined): Running {
    const running = id === undefined ? undefined : this.#running.get(id);
    if (!running) throw new Error(`container ${id} is not running`);
    return running;
  }

  async #exec(id: string | undefined, body: z.infer<typeof ExecBody>): Promise<{ exitCode: number; stdout: string; stderr: string }> {
    const running = this.#get(id);
    const session = body.sessionId === undefined ? undefined : running.sessions.get(body.sessionId);
    const result = await running.box.tools.exec({
      command: ["/bin/bash", "-c", body.command],
      cwd: body.cwd ?? session?.cwd ?? "/workspace",
      env: { ...running.env, ...session?.env, ...body.env },
      timeoutMs: body.timeoutMs ?? 120_000,
      signal: AbortSignal.timeout((body.timeoutMs ?? 120_000) + 10_000),
    });
    if (result.type === "error") return { exitCode: 127, stdout: "", stderr: result.message };
    const text = (b: Uint8Array) => Buffer.from(b).toString("utf8");
    return { exitCode: result.type === "exited" ? result.exitCode : 124, stdout: text(result.stdout), stderr: text(result.stderr) };
  }
}
