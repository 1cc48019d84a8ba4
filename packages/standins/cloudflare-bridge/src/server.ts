/**
 * The Cloudflare Sandbox Bridge stand-in: the routes of
 * `@cloudflare/sandbox/bridge` (0.12) under `/v1`, as its OpenAPI document
 * describes them and its bundle behaves. Bearer `SANDBOX_API_KEY`; errors
 * are the bridge's `{error, code}`. `POST /v1/sandbox` only mints an id:
 * like the bridge's warm pool, a container is assigned to an id on its
 * first `/v1/sandbox/{id}/*` request (any well-formed id), and again after
 * its container went away. Exec is an SSE stream (`stdout`/`stderr`
 * base64, `exit`, `error`) of argv joined into one bash command with the
 * bridge's quoting; a client that disconnects does not stop the command
 * (the bridge has no kill). Files, cwd, persist and hydrate are confined to
 * /workspace. Every container is a real local one (the stand-in kit).
 *
 * `startCloudflareWorkerStandIn` adds our Worker's egress route (below).
 *
 * Not served, said plainly: the PTY WebSocket, tunnels, bucket mounts,
 * exec sessions (`Session-Id`, `POST .../session`) and the warm pool's
 * admin routes answer the bridge's error body with 501.
 */

import { EgressConfigInput, prepareEgress, type StoredEgress } from "@openma/cloudflare-worker/egress";
import {
  type Box,
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
import { bridgeDocument } from "./document.ts";
import { newSandboxId, resolveWorkspacePath, SANDBOX_ID, shellQuote, sseEvent, WORKSPACE } from "./wire.ts";

export const DEFAULT_SANDBOX_API_KEY = "cfbridge_standin_0123456789abcdef";
/** The bridge's bound on a file write and a hydrate body. */
const MAX_BODY_BYTES = 32 * 1024 * 1024;

export interface CloudflareBridgeStandIn extends CloudStandIn {
  /** The sandbox ids that have a container now. */
  assigned(): string[];
}

export interface CloudflareWorkerStandIn extends CloudflareBridgeStandIn {
  /** What `PUT /openma/v1/sandbox/{id}/egress` last stored for an id (as our Worker's Durable Object keeps it), or null. */
  egressOf(id: string): StoredEgress | null;
}

type Ctx = Context<StandInEnv>;

function errorJson(c: Ctx, status: number, code: string, error: string) {
  return c.json({ error, code }, status as 400);
}

export function startCloudflareBridgeStandIn(options: StandInOptions = {}): Promise<CloudflareBridgeStandIn> {
  return startStandIn(options, false);
}

/**
 * The same bridge plus our Worker's egress route (packages/cloudflare-worker,
 * ADR 0019), for the `cloudflare` driver: the body is checked and the
 * placeholders minted by the Worker's own code (`EgressConfigInput`,
 * `prepareEgress`), and the configuration is kept per sandbox id. Nothing
 * is enforced here (the boxes have no network at all); enforcement is the
 * real Worker's, tested in workerd (test/cloud/cloudflare-egress.test.ts).
 */
export function startCloudflareWorkerStandIn(options: StandInOptions = {}): Promise<CloudflareWorkerStandIn> {
  return startStandIn(options, true);
}

async function startStandIn(options: StandInOptions, worker: true): Promise<CloudflareWorkerStandIn>;
async function startStandIn(options: StandInOptions, worker: boolean): Promise<CloudflareBridgeStandIn>;
async function startStandIn(options: StandInOptions, worker: boolean): Promise<CloudflareWorkerStandIn> {
  const apiKey = options.apiKey ?? DEFAULT_SANDBOX_API_KEY;
  const faults = new FaultQueue();
  const hangs = new Hangs();
  const requests: RecordedRequest[] = [];
  const boxes = new LocalBoxes({ vendor: "cloudflare-bridge", image: options.image, networkMode: options.networkMode });
  /** Sandbox id → its container, as the warm pool assigns them (a pending assignment is shared). */
  const assignments = new Map<string, Promise<Box>>();

  /**
   * The id's container, assigning one when it has none or its container went away. The check and the
   * assignment are one synchronous step, so concurrent first requests of an id share one container (as the
   * pool's Durable Object serializes them); a stale assignment is replaced only while it is still the one seen.
   */
  const assign = async (id: string): Promise<Box> => {
    for (;;) {
      const held = assignments.get(id);
      if (held === undefined) {
        const made = boxes.create("cfb-");
        assignments.set(id, made);
        made.catch(() => {
          if (assignments.get(id) === made) assignments.delete(id);
        });
        return made;
      }
      const box = await held.catch(() => undefined);
      if (box && boxes.get(box.id)) return box;
      if (assignments.get(id) === held) assignments.delete(id);
    }
  };
  /** The container an id has now, if any (a destroyed one is forgotten). */
  const current = async (id: string): Promise<Box | undefined> => {
    const held = assignments.get(id);
    const box = held ? await held.catch(() => undefined) : undefined;
    return box && boxes.get(box.id) ? box : undefined;
  };
  /** Our Worker keeps a sandbox's egress in its container's Durable Object: it goes with the container. */
  const egress = new Map<string, StoredEgress>();
  const release = async (id: string) => {
    const held = assignments.get(id);
    const box = await current(id);
    // Forgotten only if no request assigned the id a new container meanwhile; the egress goes either way (fail closed).
    if (assignments.get(id) === held) assignments.delete(id);
    egress.delete(id);
    if (box) await boxes.destroy(box);
  };

  const app = new Hono<StandInEnv>();
  app.use("*", recorder(requests));
  const bearer = (c: Ctx) => {
    const header = c.req.header("authorization");
    const ok = header?.toLowerCase().startsWith("bearer ") === true && header.slice(7) === apiKey;
    noteAuth(c, header === undefined ? null : "authorization", ok);
    return ok;
  };

  /** A queued fault as the bridge would show it: a response instead, or null to go on (a cut is the exec's). */
  const play = async (c: Ctx, f: Fault | undefined, id?: string): Promise<Response | null> => {
    if (f === undefined || f.kind === "cut") return null;
    if (f.kind === "status") return errorJson(c, f.status ?? 500, "pool_error", "pool error: internal error");
    if (f.kind === "rate_limited") {
      c.header("Retry-After", String(f.retryAfterSeconds ?? 1));
      return errorJson(c, 429, "capacity_exceeded", "rate limited");
    }
    if (f.kind === "hang") {
      await hangs.hang();
      return errorJson(c, 503, "pool_error", "stand-in closing");
    }
    // vanish: the container goes away; the next request of the id is given a fresh one, as the pool does.
    if (id !== undefined) await release(id);
    return null;
  };

  app.post("/v1/sandbox", async (c) => {
    if (!bearer(c)) return errorJson(c, 401, "unauthorized", "Unauthorized");
    const refused = await play(c, faults.take("create"));
    if (refused) return refused;
    return c.json({ id: newSandboxId() });
  });

  app.use("/v1/sandbox/*", async (c, next) => {
    const id = new URL(c.req.url).pathname.split("/")[3];
    if (id && !SANDBOX_ID.test(id)) return errorJson(c, 400, "invalid_request", "Invalid sandbox ID format");
    if (!bearer(c)) return errorJson(c, 401, "unauthorized", "Unauthorized");
    await next();
  });

  app.delete("/v1/sandbox/:id", async (c) => {
    const id = c.req.param("id");
    const refused = await play(c, faults.take("kill"), id);
    if (refused) return refused;
    await release(id);
    return c.body(null, 204);
  });

  /** The container of the addressed id, assigned now if it has none (the pool's `getContainer`). */
  const boxOf = async (c: Ctx, op: Fault["op"] | null): Promise<Box | Response> => {
    const id = c.req.param("id") as string;
    const refused = op === null ? null : await play(c, faults.take(op), id);
    if (refused) return refused;
    try {
      const box = await current(id);
      if (box) return box;
      // Assigning a container is where the bridge's pool fails (capacity, a start that does not come up): a create fault.
      const failed = await play(c, faults.take("create"), id);
      if (failed) return failed;
      return await assign(id);
    } catch (err) {
      return errorJson(c, 502, "pool_error", `pool error: ${err instanceof Error ? err.message : String(err)}`);
    }
  };
  const unserved = (c: Ctx) => errorJson(c, 501, "invalid_request", "not served by the stand-in");

  if (worker)
    app.put("/openma/v1/sandbox/:id/egress", async (c) => {
      const id = c.req.param("id");
      if (!SANDBOX_ID.test(id)) return c.text("Not Found", 404);
      if (!bearer(c)) return errorJson(c, 401, "unauthorized", "Unauthorized");
      const parsed = EgressConfigInput.safeParse(await c.req.json().catch(() => null));
      if (!parsed.success) return errorJson(c, 400, "invalid_request", parsed.error.message);
      // The Worker resolves the id's container through the pool first (assigning one if it has none).
      const box = await boxOf(c, null);
      if (box instanceof Response) return box;
      try {
        const { stored, env } = prepareEgress(parsed.data);
        egress.set(id, stored);
        return c.json({ env });
      } catch (err) {
        return errorJson(c, 400, "invalid_request", err instanceof Error ? err.message : String(err));
      }
    });

  app.post("/v1/sandbox/:id/exec", async (c) => {
    const body = (await c.req.json().catch(() => null)) as { argv?: unknown; cwd?: unknown; timeout_ms?: unknown } | null;
    if (body === null) return errorJson(c, 400, "invalid_request", "Invalid JSON body");
    if (!Array.isArray(body.argv) || body.argv.length === 0 || !body.argv.every((a) => typeof a === "string"))
      return errorJson(c, 400, "invalid_request", "argv must be a non-empty array");
    if (c.req.header("session-id") !== undefined) return unserved(c);
    let cwd: string | undefined;
    if (typeof body.cwd === "string") {
      const resolved = resolveWorkspacePath(body.cwd);
      if (resolved === null) return errorJson(c, 403, "invalid_request", "cwd must resolve to a location within /workspace");
      cwd = resolved;
    }
    const cut = faults.take("exec");
    if (cut && cut.kind !== "cut") {
      const refused = await play(c, cut, c.req.param("id"));
      if (refused) return refused;
    }
    const box = await boxOf(c, null);
    if (box instanceof Response) return box;
    const command = (body.argv as string[]).map(shellQuote).join(" ");
    const encoder = new TextEncoder();
    let budget = cut?.kind === "cut" ? (cut.afterBytes ?? 0) : Number.POSITIVE_INFINITY;
    const stream = new ReadableStream<Uint8Array>({
      start: async (controller) => {
        let open = true;
        const send = (event: string, data: string) => {
          if (!open) return;
          try {
            controller.enqueue(encoder.encode(sseEvent(event, data)));
          } catch {
            open = false;
          }
        };
        const end = (how: "close" | "cut") => {
          if (!open) return;
          open = false;
          if (how === "close") controller.close();
          else controller.error(new Error("stand-in: exec stream cut"));
        };
        try {
          const proc = await box.tools.spawn({
            command: ["/bin/bash", "-c", command],
            ...(cwd === undefined ? {} : { cwd }),
            ...(typeof body.timeout_ms === "number" ? { timeoutMs: body.timeout_ms } : {}),
            signal: new AbortController().signal,
            onOutput: (name, chunk) => {
              if (budget <= 0) return;
              const allowed = chunk.subarray(0, Math.min(chunk.length, budget));
              budget -= allowed.length;
              send(name, Buffer.from(allowed).toString("base64"));
              if (budget <= 0) end("cut");
            },
          });
          proc.closeStdin();
          if (budget <= 0) end("cut");
          const result = await proc.done;
          if (result.type === "exited") send("exit", JSON.stringify({ exit_code: result.exitCode }));
          else if (result.type === "timeout") send("error", JSON.stringify({ error: "Command timed out", code: "exec_error" }));
          else send("error", JSON.stringify({ error: result.type === "error" ? result.message : result.type, code: "exec_error" }));
          end("close");
        } catch (err) {
          send(
            "error",
            JSON.stringify({ error: `exec failed: ${err instanceof Error ? err.message : String(err)}`, code: "exec_transport_error" }),
          );
          end("close");
        }
      },
    });
    return new Response(stream, { status: 200, headers: { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" } });
  });

  /** The absolute path a file route names, or the bridge's refusal. */
  const filePath = (c: Ctx): string | Response => {
    const marker = `/v1/sandbox/${c.req.param("id")}/file/`;
    const relative = c.req.path.slice(marker.length);
    if (!relative) return errorJson(c, 400, "invalid_request", "file path must not be empty");
    const resolved = resolveWorkspacePath(`/${relative}`);
    return resolved ?? errorJson(c, 403, "invalid_request", "path must resolve to a location within /workspace");
  };

  app.get("/v1/sandbox/:id/file/*", async (c) => {
    const path = filePath(c);
    if (path instanceof Response) return path;
    if (c.req.header("session-id") !== undefined) return unserved(c);
    const box = await boxOf(c, "files");
    if (box instanceof Response) return box;
    const read = await box.tools.readFile({ path, maxBytes: 1 << 30, signal: AbortSignal.timeout(120_000) });
    if (read.type === "not_found") return errorJson(c, 404, "workspace_read_not_found", `File not found: ${path}`);
    if (read.type !== "ok") return errorJson(c, 502, "exec_transport_error", `read failed: ${read.type}`);
    return new Response(Buffer.from(read.content), { status: 200, headers: { "Content-Type": "application/octet-stream" } });
  });

  app.put("/v1/sandbox/:id/file/*", async (c) => {
    const path = filePath(c);
    if (path instanceof Response) return path;
    if (c.req.header("session-id") !== undefined) return unserved(c);
    const box = await boxOf(c, "files");
    if (box instanceof Response) return box;
    const content = new Uint8Array(await c.req.arrayBuffer());
    if (content.byteLength > MAX_BODY_BYTES)
      return errorJson(
        c,
        413,
        "payload_too_large",
        `payload too large: ${content.byteLength} bytes exceeds the ${MAX_BODY_BYTES}-byte limit`,
      );
    const written = await box.tools.writeFile({ path, content, signal: AbortSignal.timeout(120_000) });
    if (written.type !== "ok") return errorJson(c, 502, "workspace_archive_write_error", `write failed: ${written.type}`);
    return c.json({ ok: true });
  });

  /** A shell command in the box, to its end (the bridge's own `sandbox.exec`). */
  const run = (box: Box, script: string, args: string[] = []) =>
    box.tools.exec({ command: ["/bin/sh", "-c", script, "sh", ...args], timeoutMs: 300_000, signal: AbortSignal.timeout(300_000) });
  const stderrOf = (result: Awaited<ReturnType<typeof run>>) =>
    result.type === "exited" ? Buffer.from(result.stderr).toString("utf8") : result.type;

  app.post("/v1/sandbox/:id/persist", async (c) => {
    const excludes = (c.req.query("excludes") ?? "").split(",").filter((s) => s.length > 0);
    if (excludes.some((e) => e.includes(".."))) return errorJson(c, 400, "invalid_request", 'exclude paths must not contain ".."');
    const box = await boxOf(c, "files");
    if (box instanceof Response) return box;
    const tmp = `/tmp/sandbox-persist-${Date.now()}-${Math.random().toString(36).slice(2)}.tar`;
    const excluded = excludes.flatMap((e) => ["--exclude", `./${e.replace(/^\.\//, "")}`]);
    const made = await run(box, 'out=$1; shift; tar cf "$out" "$@" -C /workspace .', [tmp, ...excluded]);
    if (made.type !== "exited" || made.exitCode !== 0)
      return errorJson(
        c,
        502,
        "workspace_archive_read_error",
        `tar failed (exit ${made.type === "exited" ? made.exitCode : "?"}): ${stderrOf(made)}`,
      );
    const read = await box.tools.readFile({ path: tmp, maxBytes: 1 << 30, signal: AbortSignal.timeout(120_000) });
    void run(box, 'rm -f -- "$1"', [tmp]).catch(() => {});
    if (read.type !== "ok") return errorJson(c, 502, "workspace_archive_read_error", `persist failed: ${read.type}`);
    return new Response(Buffer.from(read.content), { status: 200, headers: { "Content-Type": "application/octet-stream" } });
  });

  app.post("/v1/sandbox/:id/hydrate", async (c) => {
    const box = await boxOf(c, "files");
    if (box instanceof Response) return box;
    const tar = new Uint8Array(await c.req.arrayBuffer());
    if (tar.byteLength === 0) return errorJson(c, 400, "invalid_request", "Empty tar payload");
    if (tar.byteLength > MAX_BODY_BYTES)
      return errorJson(
        c,
        400,
        "invalid_request",
        `tar payload too large: ${tar.byteLength} bytes exceeds the ${MAX_BODY_BYTES}-byte limit`,
      );
    const tmp = `/tmp/sandbox-hydrate-${Date.now()}-${Math.random().toString(36).slice(2)}.tar`;
    const written = await box.tools.writeFile({ path: tmp, content: tar, signal: AbortSignal.timeout(120_000) });
    if (written.type !== "ok") return errorJson(c, 502, "workspace_archive_write_error", `hydrate failed: ${written.type}`);
    const extracted = await run(box, 'mkdir -p /workspace && tar xf "$1" -C /workspace; s=$?; rm -f -- "$1"; exit $s', [tmp]);
    if (extracted.type !== "exited" || extracted.exitCode !== 0)
      return errorJson(c, 502, "workspace_archive_write_error", `tar extract failed: ${stderrOf(extracted)}`);
    return c.json({ ok: true });
  });

  app.get("/v1/sandbox/:id/running", async (c) => {
    const box = await boxOf(c, "get");
    if (box instanceof Response) return box;
    const alive = await run(box, "true").catch(() => null);
    return c.json({ running: alive?.type === "exited" && alive.exitCode === 0 });
  });

  for (const route of ["/v1/sandbox/:id/pty", "/v1/sandbox/:id/session", "/v1/sandbox/:id/session/:sid", "/v1/sandbox/:id/tunnel/:port"])
    app.all(route, unserved);
  app.post("/v1/sandbox/:id/mount", unserved);
  app.post("/v1/sandbox/:id/unmount", unserved);

  app.get("/v1/openapi.json", (c) => {
    const ok = bearer(c) || c.req.query("token") === apiKey;
    if (!ok) return errorJson(c, 401, "unauthorized", "Unauthorized");
    return c.json(bridgeDocument());
  });
  app.get("/health", (c) => c.json({ ok: true }));
  app.use("/v1/pool/*", async (c, next) => {
    if (!bearer(c)) return errorJson(c, 401, "unauthorized", "Unauthorized");
    await next();
  });
  app.get("/v1/pool/stats", (c) =>
    c.json({
      warm: 0,
      assigned: assignments.size,
      total: assignments.size,
      config: { warmTarget: 0, refreshInterval: 10_000, maxInstances: 0, scaleBatchSize: 5 },
      maxInstances: null,
    }),
  );
  app.post("/v1/pool/shutdown-prewarmed", (c) => c.json({ ok: true }));
  app.post("/v1/pool/prime", (c) => c.json({ ok: true }));

  const server = await serveStandIn({ app, port: options.port, host: options.host });
  mountAdmin(app, {
    token: apiKey,
    faults,
    state: async () => ({ live: boxes.live, containers: await boxes.containers(), sandboxes: [...assignments.keys()] }),
  });
  return standInHandle(
    {
      vendor: worker ? "cloudflare" : "cloudflare-bridge",
      url: server.url,
      env: worker
        ? { CLOUDFLARE_WORKER_URL: server.url, SANDBOX_API_KEY: apiKey }
        : { CLOUDFLARE_BRIDGE_URL: server.url, SANDBOX_API_KEY: apiKey },
      faults,
      requests,
      boxes,
      live: () => boxes.live,
      find: (id) => assignments.get(id),
      // The bridge has no suspend: an assigned sandbox runs until deleted.
      running: () => true,
      hangs,
      servers: [server],
    },
    { assigned: () => [...assignments.keys()], egressOf: (id: string) => egress.get(id) ?? null },
  );
}

export { WORKSPACE };
