/**
 * The operator endpoints beside the API: `/ready` for load balancers and
 * `/metrics` for Prometheus (`/health`, liveness, is the API's own).
 *
 * `/ready` is unauthenticated and says only which dependency is not
 * reachable (`ok` / `fail` per check): the reasons go to the log, never to an
 * anonymous caller. It answers 503 `draining` from the moment a SIGTERM
 * arrives, before anything stops, so a balancer takes the server out of
 * rotation while its turns finish.
 *
 * `/metrics` takes the admin API key (Bearer or x-api-key) or, when set, the
 * separate scrape token `OPENMA_METRICS_TOKEN` (Bearer), so Prometheus needs
 * no key that can change data.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { type AppEnv, authenticate, type Logger, requireCredential } from "@openma/api";
import type { Storage } from "@openma/storage";
import type { Hono, MiddlewareHandler } from "hono";
import { sql } from "kysely";

/** A dependency `/ready` checks; throws (or rejects) when it is not reachable. */
export type ReadinessCheck = (signal: AbortSignal) => Promise<void>;

export interface Readiness {
  /** From now on `/ready` answers 503 `draining`. */
  drain(): void;
  readonly draining: boolean;
  check(): Promise<{ ready: boolean; status: "ready" | "not_ready" | "draining"; checks: Record<string, "ok" | "fail"> }>;
}

/** Per check: a dependency that does not answer in time is not ready. */
export const READY_CHECK_TIMEOUT_MS = 2_000;

export function readiness(checks: Record<string, ReadinessCheck>, logger: Logger, timeoutMs = READY_CHECK_TIMEOUT_MS): Readiness {
  let draining = false;
  return {
    drain() {
      draining = true;
    },
    get draining() {
      return draining;
    },
    async check() {
      const names = Object.keys(checks);
      const results = await Promise.all(
        names.map(async (name) => {
          const signal = AbortSignal.timeout(timeoutMs);
          try {
            await Promise.race([
              checks[name]?.(signal),
              new Promise((_, reject) => signal.addEventListener("abort", () => reject(new Error("timed out")), { once: true })),
            ]);
            return "ok" as const;
          } catch (err) {
            logger.warn({ check: name, err: err instanceof Error ? err.message : String(err) }, "readiness check failed");
            return "fail" as const;
          }
        }),
      );
      const report = Object.fromEntries(names.map((n, i) => [n, results[i] ?? "fail"]));
      const healthy = results.every((r) => r === "ok");
      const status = draining ? "draining" : healthy ? "ready" : "not_ready";
      return { ready: status === "ready", status, checks: report };
    },
  };
}

/** The database answers a query and the blob store a lookup. */
export function storageChecks(storage: Storage): Record<string, ReadinessCheck> {
  return {
    database: async () => {
      await sql`select 1`.execute(storage.db);
    },
    blobs: async () => {
      await storage.blobs.exists("readiness-probe");
    },
  };
}

/** The Docker Engine answers a ping (only when sessions' sandboxes are Docker containers). */
export const dockerEngineCheck: ReadinessCheck = async () => {
  const { connectDocker } = await import("@openma/driver-node-docker");
  await connectDocker().ping();
};

export interface OpsRoutes {
  readiness: Readiness;
  /** Absent: no `/metrics` route. */
  metrics?: { scrape(): Promise<{ contentType: string; body: string }>; token: string | undefined };
}

/** Registers `/ready` and `/metrics` on the API app (after its middleware, so they get request ids and the error body). */
export function mountOps(app: Hono<AppEnv>, ops: OpsRoutes): void {
  app.get("/ready", async (c) => {
    const report = await ops.readiness.check();
    c.header("cache-control", "no-store");
    return c.json({ status: report.status, checks: report.checks }, report.ready ? 200 : 503);
  });
  const metrics = ops.metrics;
  if (!metrics) return;
  app.get("/metrics", scrapeAuth(metrics.token), async (c) => {
    const { contentType, body } = await metrics.scrape();
    return c.body(body, 200, { "content-type": contentType, "cache-control": "no-store" });
  });
}

/** The scrape token when one is configured and presented, else the admin API key. */
function scrapeAuth(token: string | undefined): MiddlewareHandler<AppEnv> {
  const expected = token === undefined ? null : digest(token);
  return async (c, next) => {
    const bearer = /^Bearer\s+(\S+)\s*$/i.exec(c.req.header("authorization") ?? "")?.[1];
    if (expected !== null && bearer !== undefined && timingSafeEqual(digest(bearer), expected)) return next();
    return authenticate(c, async () => {
      requireCredential(c, "api_key");
      await next();
    });
  };
}

function digest(text: string): Buffer {
  return createHash("sha256").update(text).digest();
}
