/**
 * Daytona's REST API (app.daytona.io/api) as `@daytonaio/sdk` 0.218 calls
 * it in polling mode (`DAYTONA_USE_DEPRECATED_POLLING=true`): `Authorization:
 * Bearer <key>`, errors as `{"statusCode", "message", "error"}`.
 *
 *   POST   /sandbox                               create (by name, with labels)
 *   GET    /sandbox?labels=<json>&cursor&limit    list
 *   GET    /sandbox/{idOrName}                    detail (what the SDK polls while it waits for a state)
 *   DELETE /sandbox/{idOrName}                    delete
 *   POST   /sandbox/{idOrName}/start | /stop      start, stop (processes end, files stay)
 *   PUT    /sandbox/{idOrName}/labels             replace labels
 *   POST   /sandbox/{id}/last-activity            renew the auto-stop clock
 *   GET    /sandbox/{id}/toolbox-proxy-url        where its toolbox answers
 *
 * The event socket (socket.io) is not served: the SDK must run in polling mode.
 */
import type { Fault, FaultQueue, Hangs, StandInEnv } from "@openma/standin-kit";
import { noteAuth } from "@openma/standin-kit";
import type { Context, Hono, MiddlewareHandler } from "hono";
import { type SandboxRecord, type SandboxTable, sandboxDto } from "./sandboxes.ts";

type Ctx = Context<StandInEnv>;

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/;
const DEFAULT_AUTO_STOP_MINUTES = 15;

const REASONS: Record<number, string> = {
  400: "Bad Request",
  401: "Unauthorized",
  404: "Not Found",
  409: "Conflict",
  429: "Too Many Requests",
  500: "Internal Server Error",
  502: "Bad Gateway",
  503: "Service Unavailable",
};

export function apiError(c: Ctx, status: number, message: string): Response {
  return c.json({ statusCode: status, message, error: REASONS[status] ?? "Error" }, status as 400);
}

export interface DaytonaDeps {
  table: SandboxTable;
  faults: FaultQueue;
  hangs: Hangs;
  apiKey: string;
  /** Base URL of the toolbox proxy (the SDK appends `/{sandboxId}`). */
  toolboxBase(): string;
}

export function bearerGuard(deps: DaytonaDeps): MiddlewareHandler<StandInEnv> {
  return async (c, next) => {
    const header = c.req.header("authorization");
    const ok = header === `Bearer ${deps.apiKey}`;
    noteAuth(c, header === undefined ? null : "authorization", ok);
    if (!ok) return apiError(c, 401, "Invalid credentials");
    await next();
  };
}

/** Plays a queued fault of `op`: a response instead, or null to go on. `vanish` deletes `sandbox` first. */
export async function playFault(c: Ctx, deps: DaytonaDeps, op: Fault["op"], sandbox?: SandboxRecord): Promise<Response | Fault | null> {
  const fault = deps.faults.take(op);
  if (fault === undefined) return null;
  if (fault.kind === "cut") return fault;
  if (fault.kind === "status") return apiError(c, fault.status ?? 500, "Internal server error");
  if (fault.kind === "rate_limited") {
    c.header("Retry-After", String(fault.retryAfterSeconds ?? 1));
    return apiError(c, 429, "ThrottlerException: Too Many Requests");
  }
  if (fault.kind === "hang") {
    await deps.hangs.hang();
    return apiError(c, 503, "the stand-in is closing");
  }
  if (sandbox) await deps.table.destroy(sandbox);
  return apiError(c, 404, `Sandbox with ID or name ${sandbox?.name ?? "unknown"} not found`);
}

function stringMap(value: unknown): Record<string, string> | null {
  if (value === undefined || value === null) return {};
  if (typeof value !== "object" || Array.isArray(value)) return null;
  const out: Record<string, string> = {};
  for (const [key, item] of Object.entries(value)) {
    if (typeof item !== "string") return null;
    out[key] = item;
  }
  return out;
}

export function mountControlPlane(app: Hono<StandInEnv>, deps: DaytonaDeps): void {
  const { table } = deps;
  app.use("/sandbox", bearerGuard(deps));
  app.use("/sandbox/*", bearerGuard(deps));
  const dto = (sandbox: SandboxRecord) => sandboxDto(table, sandbox, deps.toolboxBase());
  const target = (c: Ctx) => table.find(c.req.param("idOrName") ?? c.req.param("id") ?? "");
  const missing = (c: Ctx) => apiError(c, 404, `Sandbox with ID or name ${c.req.param("idOrName") ?? c.req.param("id")} not found`);
  const played = async (c: Ctx, op: Fault["op"], sandbox?: SandboxRecord) => {
    const fault = await playFault(c, deps, op, sandbox);
    return fault instanceof Response ? fault : null;
  };

  app.post("/sandbox", async (c) => {
    const body = (await c.req.json().catch(() => null)) as Record<string, unknown> | null;
    if (body === null) return apiError(c, 400, "request body must be a JSON object");
    const labels = stringMap(body.labels);
    const env = stringMap(body.env);
    if (labels === null || env === null) return apiError(c, 400, "labels and env must map strings to strings");
    const name = typeof body.name === "string" && body.name !== "" ? body.name : undefined;
    if (name !== undefined && !NAME.test(name))
      return apiError(c, 400, "name may contain letters, digits, dots, dashes and underscores (at most 63)");
    const interval = body.autoStopInterval;
    if (interval !== undefined && !(typeof interval === "number" && Number.isInteger(interval) && interval >= 0)) {
      return apiError(c, 400, "autoStopInterval must be a non-negative integer");
    }
    const refused = await played(c, "create");
    if (refused) return refused;
    if (name !== undefined && table.find(name)) return apiError(c, 409, `Sandbox with name ${name} already exists`);
    let sandbox: SandboxRecord;
    try {
      sandbox = await table.create({
        name: name ?? `sandbox-${Date.now().toString(36)}`,
        labels,
        env,
        snapshot: typeof body.snapshot === "string" ? body.snapshot : "daytonaio/sandbox:standin",
        autoStopInterval: typeof interval === "number" ? interval : DEFAULT_AUTO_STOP_MINUTES,
      });
    } catch (err) {
      return apiError(c, 500, `Failed to create sandbox: ${String(err)}`);
    }
    return c.json(dto(sandbox));
  });

  app.get("/sandbox", async (c) => {
    const refused = await played(c, "list");
    if (refused) return refused;
    let wanted: Record<string, string> = {};
    const raw = c.req.query("labels");
    if (raw) {
      const parsed = stringMap(
        (() => {
          try {
            return JSON.parse(raw);
          } catch {
            return null;
          }
        })(),
      );
      if (parsed === null) return apiError(c, 400, "labels must be a JSON object of strings");
      wanted = parsed;
    }
    const limit = Math.min(200, Math.max(1, Number(c.req.query("limit") ?? 100) || 100));
    let matching = table.all().filter((s) => Object.entries(wanted).every(([k, v]) => s.labels[k] === v));
    const cursor = c.req.query("cursor");
    if (cursor) matching = matching.slice(matching.findIndex((s) => s.id === cursor) + 1);
    const page = matching.slice(0, limit);
    return c.json({ items: page.map(dto), nextCursor: matching.length > limit ? (page.at(-1)?.id ?? null) : null });
  });

  app.get("/sandbox/:idOrName", async (c) => {
    const sandbox = target(c);
    const refused = await played(c, "get", sandbox);
    if (refused) return refused;
    return sandbox ? c.json(dto(sandbox)) : missing(c);
  });

  app.delete("/sandbox/:idOrName", async (c) => {
    const sandbox = target(c);
    const refused = await played(c, "kill", sandbox);
    if (refused) return refused;
    if (!sandbox) return missing(c);
    await table.destroy(sandbox);
    return c.json({ ...dto(sandbox), state: "destroyed", desiredState: "destroyed" });
  });

  app.post("/sandbox/:idOrName/start", async (c) => {
    const sandbox = target(c);
    const refused = await played(c, "lifecycle", sandbox);
    if (refused) return refused;
    if (!sandbox) return missing(c);
    await table.start(sandbox);
    return c.json(dto(sandbox));
  });

  app.post("/sandbox/:idOrName/stop", async (c) => {
    const sandbox = target(c);
    const refused = await played(c, "lifecycle", sandbox);
    if (refused) return refused;
    if (!sandbox) return missing(c);
    await table.stop(sandbox);
    return c.body(null, 200);
  });

  app.put("/sandbox/:idOrName/labels", async (c) => {
    const sandbox = target(c);
    if (!sandbox) return missing(c);
    const body = (await c.req.json().catch(() => null)) as { labels?: unknown } | null;
    const labels = stringMap(body?.labels);
    if (labels === null || body?.labels === undefined) return apiError(c, 400, "labels must map strings to strings");
    sandbox.labels = labels;
    return c.json({ labels });
  });

  app.post("/sandbox/:id/last-activity", async (c) => {
    const sandbox = target(c);
    const refused = await played(c, "lifecycle", sandbox);
    if (refused) return refused;
    if (!sandbox) return missing(c);
    table.touch(sandbox);
    return c.body(null, 201);
  });

  app.get("/sandbox/:id/toolbox-proxy-url", (c) => (target(c) ? c.json({ url: deps.toolboxBase() }) : missing(c)));
}
