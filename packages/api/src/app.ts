/**
 * The HTTP application: request ids, authentication, the error body, and one
 * router per resource family. Composition (storage, clock, config) is injected.
 */
import { type Context, Hono } from "hono";
import { HTTPException } from "hono/http-exception";
import { routePath } from "hono/route";
import { authenticate } from "./auth.ts";
import type { ApiDeps, AppEnv } from "./context.ts";
import { ApiError } from "./errors.ts";
import { openApiDocument } from "./openapi.ts";
import { agentRoutes } from "./routes/agents.ts";
import { deploymentRoutes, deploymentRunRoutes } from "./routes/deployments.ts";
import { dreamRoutes } from "./routes/dreams.ts";
import { environmentRoutes } from "./routes/environments.ts";
import { eventRoutes } from "./routes/events.ts";
import { fileRoutes } from "./routes/files.ts";
import { harnessEventRoutes } from "./routes/harness-events.ts";
import { memoryStoreRoutes } from "./routes/memory-stores.ts";
import { sessionRoutes } from "./routes/sessions.ts";
import { skillRoutes } from "./routes/skills.ts";
import { threadRoutes } from "./routes/threads.ts";
import { tunnelRoutes } from "./routes/tunnels.ts";
import { userProfileRoutes } from "./routes/user-profiles.ts";
import { vaultRoutes } from "./routes/vaults.ts";
import { webhookEndpointRoutes } from "./routes/webhooks.ts";
import { workRoutes } from "./routes/work.ts";
import { workspaceRoutes } from "./routes/workspace.ts";

export interface AppInfo {
  version: string;
}

export function createApp(deps: ApiDeps, info: AppInfo = { version: "0.0.0" }): Hono<AppEnv> {
  const app = new Hono<AppEnv>();

  app.use("*", async (c, next) => {
    const requestId = deps.ids("req");
    c.set("deps", deps);
    c.set("requestId", requestId);
    c.set("credential", null);
    c.header("request-id", requestId);
    const started = performance.now();
    await next();
    const ms = performance.now() - started;
    // One structured line per request; credentials are never logged.
    deps.logger.info(
      { method: c.req.method, path: c.req.path, status: c.res.status, ms: Math.round(ms), request_id: requestId },
      "request",
    );
    if (deps.metrics) {
      // The route pattern, never the raw path: ids in paths would make a series per session.
      const route = routeLabel(c);
      const method = METHODS.has(c.req.method) ? c.req.method : "OTHER";
      deps.metrics.httpRequests.inc({ method, route, status: String(c.res.status) });
      deps.metrics.httpRequestDuration.observe({ method, route }, ms / 1000);
    }
  });

  app.onError((err, c) => {
    const requestId = c.get("requestId") ?? null;
    if (err instanceof ApiError) {
      for (const [k, v] of Object.entries(err.headers ?? {})) c.header(k, v);
      return c.json(err.body(requestId), err.status);
    }
    if (err instanceof HTTPException) {
      const type = err.status === 413 ? "request_too_large" : "invalid_request_error";
      const apiErr = new ApiError(err.status as 400, type, err.message || "invalid request");
      return c.json(apiErr.body(requestId), apiErr.status);
    }
    if (isDataException(err)) {
      // Safety net: a value the database cannot represent is the caller's input, not our failure.
      deps.logger.warn({ err: err.message, requestId, path: c.req.path }, "database rejected a value");
      return c.json(
        new ApiError(400, "invalid_request_error", "a value in the request cannot be stored (out of range or not representable)").body(
          requestId,
        ),
        400,
      );
    }
    deps.logger.error({ err: { message: err.message, stack: err.stack }, requestId, path: c.req.path }, "unhandled error");
    return c.json(new ApiError(500, "api_error", "internal server error").body(requestId), 500);
  });

  app.notFound((c) => {
    const err = new ApiError(404, "not_found_error", `no route for ${c.req.method} ${c.req.path}`);
    return c.json(err.body(c.get("requestId") ?? null), 404);
  });

  app.get("/health", (c) => c.json({ status: "ok", version: info.version, storage: { backend: deps.storage.dialect } }));

  // The API's description is public, like the SDK that embodies it.
  let openapi: string | null = null;
  app.get("/v1/openapi.json", (c) => {
    openapi ??= JSON.stringify(openApiDocument(info.version));
    return c.body(openapi, 200, { "content-type": "application/json" });
  });

  app.use("/v1/*", authenticate);
  app.route("/v1/agents", agentRoutes());
  app.route("/v1/environments", workRoutes());
  app.route("/v1/environments", environmentRoutes());
  app.route("/v1/sessions", eventRoutes());
  // OpenMA extension: the event sink of a harness running inside a self-hosted sandbox.
  app.route("/v1/sessions", harnessEventRoutes());
  app.route("/v1/sessions", threadRoutes());
  app.route("/v1/sessions", sessionRoutes());
  // OpenMA extension: the console's workspace browser.
  app.route("/v1/sessions", workspaceRoutes());
  app.route("/v1/vaults", vaultRoutes());
  app.route("/v1/files", fileRoutes());
  app.route("/v1/skills", skillRoutes());
  app.route("/v1/memory_stores", memoryStoreRoutes());
  app.route("/v1/deployments", deploymentRoutes());
  app.route("/v1/deployment_runs", deploymentRunRoutes());
  app.route("/v1/organizations/webhooks", webhookEndpointRoutes());
  app.route("/v1/dreams", dreamRoutes());
  app.route("/v1/user_profiles", userProfileRoutes());
  app.route("/v1/tunnels", tunnelRoutes());
  return app;
}

const METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]);

/** The matched route's pattern; a request no route handled (a 404, a wildcard middleware answering) is `unmatched`. */
function routeLabel(c: Context<AppEnv>): string {
  const path = routePath(c);
  return path === "" || path.endsWith("*") ? "unmatched" : path;
}

/** Postgres SQLSTATE class 22 ("data exception"): value out of range, bad encoding, … */
function isDataException(err: Error): boolean {
  const e = err as Error & { code?: unknown; severity?: unknown };
  return typeof e.code === "string" && e.code.startsWith("22") && typeof e.severity === "string";
}
