/**
 * The Work sub-resource of self-hosted environments (§2.2), mounted on
 * `/v1/environments` before the environment router. Each route names the
 * credential kinds it accepts (§1.4 accept-matrix) and checks scope: an
 * environment key reaches only its environment, a sessions token only its
 * own work item. No `use("*")` here: middleware on this router would also run
 * for every environment CRUD path sharing the prefix.
 */
import type { Context } from "hono";
import { Hono } from "hono";
import { z } from "zod";
import { type Credential, requireCredential, requireCredentialOf } from "../auth.ts";
import type { AppEnv } from "../context.ts";
import { badRequest, forbidden, notFound } from "../errors.ts";
import { decodeCursor, pageOf, pageOnlyQuery } from "../pagination.ts";
import { isPlausibleId, parseMetadataPatch } from "../schemas/environment.ts";
import { pathId } from "../util.ts";
import { applyMetadataPatch, parseJsonBody, parseQuery, queryInt } from "../validate.ts";
import {
  ackWork,
  claimWork,
  DEFAULT_RECLAIM_MS,
  encodeWorkSecret,
  heartbeatWork,
  loadWorkRow,
  patchWorkMetadata,
  queueStats,
  recordPoller,
  renderWork,
  stopWork,
  waitForWork,
  workTopic,
} from "../work-queue.ts";
import { environmentIdParam, loadEnvironment } from "./environments.ts";

const MAX_WORKER_ID_LENGTH = 512;

export const workPollQuery = z.object({
  block_ms: queryInt(1, 999).optional(),
  reclaim_older_than_ms: queryInt(0, 86_400_000).optional(),
});

export const workHeartbeatQuery = z.object({
  // Compared verbatim in SQL: NUL cannot be a value we returned, and Postgres text refuses it.
  expected_last_heartbeat: z
    .string()
    .max(64)
    .refine((s) => !s.includes("\u0000"), "must not contain NUL characters")
    .optional(),
  desired_ttl_seconds: queryInt(1, 86_400).optional(),
});

export const workStopBody = z.object({ force: z.boolean().nullish() });

export const workUpdateBody = z.object({ metadata: z.unknown() });

/** An environment key (or sessions token) only reaches its own environment and, for a token, its own item. */
function assertWorkScope(credential: Credential, environmentId: string, workId?: string): void {
  if (credential.kind === "environment_key" && credential.environmentId !== environmentId) {
    throw forbidden("this environment key is not valid for this environment");
  }
  if (credential.kind === "sessions_token" && (credential.environmentId !== environmentId || credential.workId !== workId)) {
    throw forbidden("this sessions token is not valid for this work item");
  }
}

/** Path ids; one we could never have minted is simply not found (and never reaches SQL). */
function ids(c: Context<AppEnv>) {
  const environmentId = environmentIdParam(c);
  const workId = pathId(c, "work_id");
  if (c.req.param("work_id") !== undefined && !isPlausibleId(workId)) throw notFound("work item", workId);
  return { environmentId, workId };
}

export function workRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  // Queue-level routes first, so `poll` and `stats` are never taken for a work id.
  queueRoutes(r);
  itemRoutes(r);
  return r;
}

/** poll, stats, list: one environment's queue. */
function queueRoutes(r: Hono<AppEnv>): void {
  r.get("/:environment_id/work/poll", async (c) => {
    const credential = requireCredential(c, "environment_key");
    const { environmentId } = ids(c);
    assertWorkScope(credential, environmentId);
    const q = parseQuery(c, workPollQuery);
    const workerId = c.req.header("anthropic-worker-id")?.trim() || undefined;
    if (workerId && workerId.length > MAX_WORKER_ID_LENGTH) {
      throw badRequest(`Anthropic-Worker-ID: must be at most ${MAX_WORKER_ID_LENGTH} characters`);
    }
    const deps = c.get("deps");
    if (workerId) await recordPoller(deps, environmentId, workerId);
    const claimed = await waitForWork({
      subscribe: (wake) => deps.storage.bus.subscribe(workTopic(environmentId), wake),
      claim: () => claimWork(deps, environmentId, { reclaimOlderThanMs: q.reclaim_older_than_ms ?? DEFAULT_RECLAIM_MS, workerId }),
      blockMs: q.block_ms ?? 0,
      signal: c.req.raw.signal,
    });
    if (!claimed) return c.body(null, 204);
    return c.json(renderWork(claimed.row, encodeWorkSecret(claimed.sessionsToken, deps.publicBaseUrl)));
  });

  r.get("/:environment_id/work/stats", async (c) => {
    const credential = requireCredential(c, "api_key", "environment_key");
    const { environmentId } = ids(c);
    assertWorkScope(credential, environmentId);
    const deps = c.get("deps");
    await loadEnvironment(deps.storage.db, environmentId);
    return c.json(await queueStats(deps, environmentId));
  });

  r.get("/:environment_id/work", async (c) => {
    const credential = requireCredential(c, "environment_key");
    const { environmentId } = ids(c);
    assertWorkScope(credential, environmentId);
    const q = parseQuery(c, pageOnlyQuery);
    const cursor = decodeCursor(q.page);
    if (cursor && !isPlausibleId(cursor.k)) throw badRequest("page: invalid page cursor");
    let query = c
      .get("deps")
      .storage.db.selectFrom("work_items")
      .selectAll()
      .where("environment_id", "=", environmentId)
      .orderBy("id", "desc")
      .limit(q.limit + 1);
    if (cursor) query = query.where("id", "<", cursor.k);
    const rows = await query.execute();
    return c.json(
      pageOf(
        rows,
        q.limit,
        (row) => row.id,
        (row) => renderWork(row),
      ),
    );
  });
}

/** retrieve, update, ack, heartbeat, stop: one work item. */
function itemRoutes(r: Hono<AppEnv>): void {
  r.get("/:environment_id/work/:work_id", async (c) => {
    requireCredential(c, "api_key");
    const { environmentId, workId } = ids(c);
    const { db } = c.get("deps").storage;
    await loadEnvironment(db, environmentId);
    return c.json(renderWork(await loadWorkRow(db, environmentId, workId)));
  });

  r.post("/:environment_id/work/:work_id", async (c) => {
    requireCredential(c, "api_key");
    const { environmentId, workId } = ids(c);
    const input = await parseJsonBody(c, workUpdateBody);
    if (input.metadata === undefined) throw badRequest("body.metadata: required");
    const patch = parseMetadataPatch(input.metadata);
    const deps = c.get("deps");
    await loadEnvironment(deps.storage.db, environmentId);
    const row = await patchWorkMetadata(deps, environmentId, workId, (current) => applyMetadataPatch(current, patch));
    return c.json(renderWork(row));
  });

  r.post("/:environment_id/work/:work_id/ack", async (c) => {
    const credential = requireCredential(c, "environment_key", "sessions_token");
    const { environmentId, workId } = ids(c);
    assertWorkScope(credential, environmentId, workId);
    return c.json(renderWork(await ackWork(c.get("deps"), environmentId, workId)));
  });

  r.post("/:environment_id/work/:work_id/heartbeat", async (c) => {
    const credential = requireCredential(c, "environment_key", "sessions_token");
    const { environmentId, workId } = ids(c);
    assertWorkScope(credential, environmentId, workId);
    const q = parseQuery(c, workHeartbeatQuery);
    return c.json(
      await heartbeatWork(c.get("deps"), environmentId, workId, {
        expected: q.expected_last_heartbeat,
        desiredTtlSeconds: q.desired_ttl_seconds,
      }),
    );
  });

  r.post("/:environment_id/work/:work_id/stop", async (c) => {
    // A stopped item's sessions token still reaches this one endpoint, to be told 409 "already stopped".
    const credential = requireCredentialOf(c, ["api_key", "environment_key", "sessions_token"], true);
    const { environmentId, workId } = ids(c);
    assertWorkScope(credential, environmentId, workId);
    const input = await parseJsonBody(c, workStopBody, { allowEmpty: true });
    const deps = c.get("deps");
    if (credential.kind === "api_key") await loadEnvironment(deps.storage.db, environmentId);
    return c.json(renderWork(await stopWork(deps, environmentId, workId, input.force ?? false)));
  });
}
