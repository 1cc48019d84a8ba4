/**
 * E2B's control plane (api.e2b.app) as the SDK 2.x calls it: `X-API-KEY`
 * on every request, errors as `{"code", "message"}` with the HTTP status,
 * and 429 with `Retry-After` (which the SDK honours by retrying).
 *
 *   POST   /v2/sandboxes                      create
 *   GET    /v2/sandboxes?metadata=&state=     list (pages through `x-next-token`)
 *   GET    /sandboxes/{id}                    detail
 *   DELETE /sandboxes/{id}                    kill
 *   POST   /sandboxes/{id}/pause              pause (409 when already paused)
 *   POST   /v2/sandboxes/{id}/connect         connect, resuming a paused sandbox
 *   POST   /sandboxes/{id}/timeout            new end of life
 */
import type { Fault, FaultQueue, Hangs, StandInEnv } from "@openma/standin-kit";
import { noteAuth } from "@openma/standin-kit";
import type { Context, Hono } from "hono";
import { detailJson, listedJson, type SandboxRecord, type SandboxTable, sandboxJson } from "./sandboxes.ts";

type Ctx = Context<StandInEnv>;

const DEFAULT_TIMEOUT_SECONDS = 300;
const MAX_TIMEOUT_SECONDS = 86_400;

export function apiError(c: Ctx, status: number, message: string): Response {
  return c.json({ code: status, message }, status as 400);
}

export interface ControlDeps {
  table: SandboxTable;
  faults: FaultQueue;
  hangs: Hangs;
  apiKey: string;
}

/** Plays a queued fault of `op`: a response instead, or null to go on. `vanish` kills `sandbox` first. */
export async function playFault(c: Ctx, deps: ControlDeps, op: Fault["op"], sandbox?: SandboxRecord): Promise<Response | null> {
  const fault = deps.faults.take(op);
  if (fault === undefined || fault.kind === "cut") return null;
  if (fault.kind === "status") return apiError(c, fault.status ?? 500, "Internal server error");
  if (fault.kind === "rate_limited") {
    c.header("Retry-After", String(fault.retryAfterSeconds ?? 1));
    return apiError(c, 429, "Rate limit exceeded");
  }
  if (fault.kind === "hang") {
    await deps.hangs.hang();
    return apiError(c, 503, "the stand-in is closing");
  }
  if (sandbox) await deps.table.kill(sandbox);
  return apiError(c, 404, `sandbox "${sandbox?.sandboxID ?? "unknown"}" not found`);
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

function timeoutOf(value: unknown): number | null {
  if (value === undefined || value === null) return DEFAULT_TIMEOUT_SECONDS;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > MAX_TIMEOUT_SECONDS) return null;
  return value;
}

/** `metadata=` of the list query: URL-encoded `k=v&k=v`, each key and value encoded again. */
function metadataFilter(raw: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (!raw) return out;
  for (const [key, value] of new URLSearchParams(raw)) out[decodeURIComponent(key)] = decodeURIComponent(value);
  return out;
}

export function mountControlPlane(app: Hono<StandInEnv>, deps: ControlDeps): void {
  const { table } = deps;
  const guard = async (c: Ctx, next: () => Promise<void>) => {
    const key = c.req.header("x-api-key");
    const ok = key === deps.apiKey;
    noteAuth(c, key === undefined ? null : "x-api-key", ok);
    if (!ok) return apiError(c, 401, "Invalid API key");
    await next();
  };
  for (const path of ["/sandboxes", "/sandboxes/*", "/v2/sandboxes", "/v2/sandboxes/*"]) app.use(path, guard);
  const byId = (c: Ctx) => table.get(c.req.param("id") ?? "");

  app.post("/v2/sandboxes", async (c) => {
    const body = (await c.req.json().catch(() => null)) as Record<string, unknown> | null;
    if (body === null || typeof body.templateID !== "string" || body.templateID === "") return apiError(c, 400, "templateID is required");
    const metadata = stringMap(body.metadata);
    const envVars = stringMap(body.envVars);
    const timeout = timeoutOf(body.timeout);
    if (metadata === null) return apiError(c, 400, "metadata must map strings to strings");
    if (envVars === null) return apiError(c, 400, "envVars must map strings to strings");
    if (timeout === null) return apiError(c, 400, `timeout must be an integer number of seconds up to ${MAX_TIMEOUT_SECONDS}`);
    const refused = await playFault(c, deps, "create");
    if (refused) return refused;
    let sandbox: SandboxRecord;
    try {
      sandbox = await table.create({
        templateID: body.templateID,
        metadata,
        envVars,
        timeoutSeconds: timeout,
        autoPause: body.autoPause === true,
      });
    } catch (err) {
      return apiError(c, 500, `Failed to create sandbox: ${String(err)}`);
    }
    return c.json(sandboxJson(sandbox), 201);
  });

  app.get("/v2/sandboxes", async (c) => {
    const refused = await playFault(c, deps, "list");
    if (refused) return refused;
    const wanted = metadataFilter(c.req.query("metadata"));
    const states = (c.req.queries("state") ?? []).flatMap((s) => s.split(",")).filter(Boolean);
    const limit = Math.min(100, Math.max(1, Number(c.req.query("limit") ?? 100) || 100));
    const after = c.req.query("nextToken");
    let matching = table
      .all()
      .filter((s) => Object.entries(wanted).every(([k, v]) => s.metadata[k] === v))
      .filter((s) => states.length === 0 || states.includes(table.state(s)));
    if (after) matching = matching.slice(matching.findIndex((s) => s.sandboxID === after) + 1);
    const page = matching.slice(0, limit);
    if (matching.length > limit) c.header("x-next-token", page.at(-1)?.sandboxID ?? "");
    return c.json(page.map((s) => listedJson(table, s)));
  });

  app.get("/sandboxes/:id", async (c) => {
    const sandbox = byId(c);
    const refused = await playFault(c, deps, "get", sandbox);
    if (refused) return refused;
    if (!sandbox) return apiError(c, 404, `sandbox "${c.req.param("id")}" not found`);
    return c.json(detailJson(table, sandbox));
  });

  app.delete("/sandboxes/:id", async (c) => {
    const sandbox = byId(c);
    const refused = await playFault(c, deps, "kill", sandbox);
    if (refused) return refused;
    if (!sandbox) return apiError(c, 404, `sandbox "${c.req.param("id")}" not found`);
    await table.kill(sandbox);
    return c.body(null, 204);
  });

  app.post("/sandboxes/:id/pause", async (c) => {
    const sandbox = byId(c);
    const refused = await playFault(c, deps, "lifecycle", sandbox);
    if (refused) return refused;
    if (!sandbox) return apiError(c, 404, `sandbox "${c.req.param("id")}" not found`);
    if (table.state(sandbox) === "paused") return apiError(c, 409, `sandbox "${sandbox.sandboxID}" is already paused`);
    await table.pause(sandbox);
    return c.body(null, 204);
  });

  app.post("/v2/sandboxes/:id/connect", async (c) => {
    const sandbox = byId(c);
    const refused = await playFault(c, deps, "lifecycle", sandbox);
    if (refused) return refused;
    if (!sandbox) return apiError(c, 404, `sandbox "${c.req.param("id")}" not found`);
    const body = (await c.req.json().catch(() => ({}))) as { timeout?: unknown };
    const timeout = timeoutOf(body.timeout);
    if (timeout === null) return apiError(c, 400, "timeout must be an integer number of seconds");
    const wasPaused = table.state(sandbox) === "paused";
    if (wasPaused) await table.resume(sandbox, timeout);
    else if (body.timeout !== undefined) table.setTimeout(sandbox, timeout);
    return c.json(sandboxJson(sandbox), wasPaused ? 201 : 200);
  });

  app.post("/sandboxes/:id/timeout", async (c) => {
    const sandbox = byId(c);
    const refused = await playFault(c, deps, "lifecycle", sandbox);
    if (refused) return refused;
    if (!sandbox) return apiError(c, 404, `sandbox "${c.req.param("id")}" not found`);
    const body = (await c.req.json().catch(() => null)) as { timeout?: unknown } | null;
    const timeout = body === null ? null : timeoutOf(body.timeout);
    if (timeout === null || body?.timeout === undefined) return apiError(c, 400, "timeout is required");
    table.setTimeout(sandbox, timeout);
    return c.body(null, 204);
  });
}
