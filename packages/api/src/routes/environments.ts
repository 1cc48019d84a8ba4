/**
 * `/v1/environments`: create, retrieve, update, list, archive, delete (API key
 * only), plus the OpenMA extension that (re)issues a self-hosted
 * environment's key. The row's `body` is the full response object.
 */

import { type Database, hashSecret, newSecret } from "@openma/storage";
import { recordObjectEvent } from "@openma/webhooks";
import type { Context } from "hono";
import { Hono } from "hono";
import type { Kysely, Transaction } from "kysely";
import { checkAcpSelection } from "../acp-harness.ts";
import { ENVIRONMENT_KEY_PREFIX, requireCredential } from "../auth.ts";
import type { AppEnv } from "../context.ts";
import { ApiError, badRequest, notFound } from "../errors.ts";
import { documentQuery, listDocuments } from "../pagination.ts";
import {
  type Environment,
  environmentCreateSchema,
  environmentUpdateSchema,
  isPlausibleId,
  parseMetadata,
  parseMetadataPatch,
  resolveConfig,
} from "../schemas/environment.ts";
import { stopEnvironmentWork } from "../session-work.ts";
import { fromJson, newIdFor, nowIso, pathId } from "../util.ts";
import { applyMetadataPatch, parseJsonBody, parseQuery } from "../validate.ts";

export type { Environment } from "../schemas/environment.ts";

export const environmentNotFound = (id: string) => notFound("environment", id, "environment_not_found");

/** Loads an environment (archived ones included); 404 `environment_not_found` when absent. */
export async function loadEnvironment(db: Kysely<Database> | Transaction<Database>, id: string): Promise<Environment> {
  if (!isPlausibleId(id)) throw environmentNotFound(id);
  const row = await db.selectFrom("environments").select("body").where("id", "=", id).executeTakeFirst();
  if (!row) throw environmentNotFound(id);
  return fromJson<Environment>(row.body);
}

/**
 * Mints a new environment key, stored only as its hash; the plaintext is
 * returned to the caller once and never again.
 */
async function issueEnvironmentKey(trx: Transaction<Database>, environmentId: string, now: string): Promise<string> {
  const key = newSecret(ENVIRONMENT_KEY_PREFIX);
  await trx
    .insertInto("environment_keys")
    .values({ key_hash: hashSecret(key), environment_id: environmentId, created_at: now, revoked_at: null })
    .execute();
  return key;
}

/** The `:environment_id` path parameter; an id we could never have minted is simply not found. */
export function environmentIdParam(c: Context<AppEnv>): string {
  const id = pathId(c, "environment_id");
  if (!isPlausibleId(id)) throw environmentNotFound(id);
  return id;
}

function rowOf(env: Environment) {
  return {
    name: env.name,
    config_type: env.config.type,
    body: JSON.stringify(env),
    updated_at: env.updated_at,
    archived_at: env.archived_at,
  };
}

async function updateEnvironment(c: Context<AppEnv>, id: string): Promise<Environment> {
  const input = await parseJsonBody(c, environmentUpdateSchema, { allowEmpty: true });
  const metadataPatch = parseMetadataPatch(input.metadata);
  const { db } = c.get("deps").storage;
  return db.transaction().execute(async (trx) => {
    const row = await trx.selectFrom("environments").select("body").where("id", "=", id).executeTakeFirst();
    if (!row) throw environmentNotFound(id);
    const current = fromJson<Environment>(row.body);
    if (current.archived_at)
      throw badRequest(`environment ${JSON.stringify(id)} is archived and cannot be updated`, { error_code: "environment_archived" });
    const next: Environment = { ...current };
    if (input.name !== undefined && input.name !== null) next.name = input.name;
    // Omitted keeps the description, null clears it, "" is stored as "".
    if (input.description !== undefined) next.description = input.description;
    if (input.config !== undefined && input.config !== null) next.config = resolveConfig(input.config, current.config);
    if (input.scope === null) delete next.scope;
    else if (input.scope !== undefined) next.scope = input.scope;
    next.metadata = applyMetadataPatch(current.metadata, metadataPatch);
    checkAcpSelection(c.get("deps"), next.metadata, "metadata");
    if (JSON.stringify(next) === row.body) return current; // nothing changed: no new updated_at
    next.updated_at = nowIso(c);
    // Conditional on the body we read, so a concurrent update cannot be lost.
    const updated = await trx
      .updateTable("environments")
      .set(rowOf(next))
      .where("id", "=", id)
      .where("body", "=", row.body)
      .executeTakeFirst();
    if (Number(updated.numUpdatedRows) !== 1) throw new ApiError(409, "conflict_error", "environment was modified concurrently; retry");
    await recordObjectEvent(trx, c.get("deps"), "environment.updated", id);
    return next;
  });
}

export function environmentRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  // Mounted after the work router on the same prefix: its handlers answer
  // work paths first, so this guard only sees environment CRUD.
  r.use("*", async (c, next) => {
    requireCredential(c, "api_key");
    await next();
  });

  r.post("/", async (c) => {
    const input = await parseJsonBody(c, environmentCreateSchema);
    const metadata = parseMetadata(input.metadata);
    checkAcpSelection(c.get("deps"), metadata, "metadata");
    const now = nowIso(c);
    const env: Environment = {
      type: "environment",
      id: newIdFor(c, "env"),
      name: input.name,
      description: input.description ?? null,
      config: resolveConfig(input.config),
      metadata,
      ...(input.scope ? { scope: input.scope } : {}),
      created_at: now,
      updated_at: now,
      archived_at: null,
    };
    const environmentKey = await c
      .get("deps")
      .storage.db.transaction()
      .execute(async (trx) => {
        await trx
          .insertInto("environments")
          .values({ id: env.id, created_at: now, ...rowOf(env) })
          .execute();
        await recordObjectEvent(trx, c.get("deps"), "environment.created", env.id);
        return env.config.type === "self_hosted" ? issueEnvironmentKey(trx, env.id, now) : undefined;
      });
    // OpenMA extension (§1.4): the worker fleet's key, shown only in this response.
    return c.json(environmentKey ? { ...env, environment_key: environmentKey } : env);
  });

  r.get("/", async (c) => {
    const q = parseQuery(c, documentQuery);
    return c.json(await listDocuments<Environment>(c.get("deps").storage.db, "environments", q));
  });

  r.get("/:environment_id", async (c) => c.json(await loadEnvironment(c.get("deps").storage.db, environmentIdParam(c))));

  r.post("/:environment_id", async (c) => c.json(await updateEnvironment(c, environmentIdParam(c))));

  r.post("/:environment_id/archive", async (c) => {
    const id = environmentIdParam(c);
    const { db } = c.get("deps").storage;
    const env = await loadEnvironment(db, id);
    if (env.archived_at) return c.json(env);
    const now = nowIso(c);
    const archived: Environment = { ...env, archived_at: now, updated_at: now };
    // Only the first archive wins; a concurrent second one re-reads the result.
    const won = await db.transaction().execute(async (trx) => {
      const updated = await trx
        .updateTable("environments")
        .set(rowOf(archived))
        .where("id", "=", id)
        .where("archived_at", "is", null)
        .executeTakeFirst();
      if (Number(updated.numUpdatedRows) !== 1) return false;
      await recordObjectEvent(trx, c.get("deps"), "environment.archived", id);
      return true;
    });
    return c.json(won ? archived : await loadEnvironment(db, id));
  });

  r.delete("/:environment_id", async (c) => {
    const id = environmentIdParam(c);
    const deps = c.get("deps");
    await deps.storage.db.transaction().execute(async (trx) => {
      const deleted = await trx.deleteFrom("environments").where("id", "=", id).executeTakeFirst();
      if (Number(deleted.numDeletedRows) !== 1) throw environmentNotFound(id);
      await trx.deleteFrom("environment_keys").where("environment_id", "=", id).execute();
      await trx.deleteFrom("work_pollers").where("environment_id", "=", id).execute();
      // Workers learn it from their next heartbeat (state "stopped"); their tokens die with the items.
      await stopEnvironmentWork(trx, deps, id);
      await recordObjectEvent(trx, deps, "environment.deleted", id);
    });
    return c.json({ id, type: "environment_deleted" as const });
  });

  /**
   * OpenMA extension, not part of Anthropic's API (where environment keys are
   * issued out of band in the Console): rotates a self-hosted environment's
   * key. Every existing key of the environment is revoked and the new one is
   * returned once: `{type:"environment_key", environment_id, environment_key}`.
   */
  r.post("/:environment_id/environment_key", async (c) => {
    const id = environmentIdParam(c);
    const now = nowIso(c);
    const key = await c
      .get("deps")
      .storage.db.transaction()
      .execute(async (trx) => {
        const env = await loadEnvironment(trx, id);
        if (env.config.type !== "self_hosted") throw badRequest("environment_key: only self_hosted environments have environment keys");
        await trx
          .updateTable("environment_keys")
          .set({ revoked_at: now })
          .where("environment_id", "=", id)
          .where("revoked_at", "is", null)
          .execute();
        return issueEnvironmentKey(trx, id, now);
      });
    return c.json({ type: "environment_key" as const, environment_id: id, environment_key: key });
  });

  return r;
}
