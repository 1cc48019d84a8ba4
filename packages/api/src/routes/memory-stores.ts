/**
 * `/v1/memory_stores`: store CRUD and archive (API key only), plus the
 * memories and memory_versions sub-resources, which sessions tokens may also
 * reach for the stores attached to their session (see memory-access.ts).
 */

import { recordObjectEvent } from "@openma/webhooks";
import type { Context } from "hono";
import { Hono } from "hono";
import { requireCredential } from "../auth.ts";
import type { AppEnv } from "../context.ts";
import { ApiError, badRequest, notFound } from "../errors.ts";
import { registerMemoryRoutes } from "../memories.ts";
import { registerMemoryVersionRoutes } from "../memory-versions.ts";
import { listDocuments } from "../pagination.ts";
import { memoryStoreCreateSchema, memoryStoreListQuery, memoryStoreUpdateSchema } from "../schemas/memory.ts";
import { limitBody, MB } from "../uploads.ts";
import { fromJson, newIdFor, nowIso, pathId } from "../util.ts";
import { applyMetadataPatch, parseJsonBody, parseQuery } from "../validate.ts";

export interface MemoryStore {
  type: "memory_store";
  id: string;
  name: string;
  description: string;
  metadata: Record<string, string>;
  created_at: string;
  updated_at: string;
  archived_at: string | null;
}

const apiKeyOnly = async (c: Context<AppEnv>, next: () => Promise<void>) => {
  requireCredential(c, "api_key");
  await next();
};

export async function loadMemoryStoreBody(c: Context<AppEnv>, id: string): Promise<MemoryStore> {
  const row = await c.get("deps").storage.db.selectFrom("memory_stores").select("body").where("id", "=", id).executeTakeFirst();
  if (!row) throw notFound("memory store", id);
  return fromJson<MemoryStore>(row.body);
}

export function memoryStoreRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  const bodyCap = limitBody(MB, "request body");

  r.post("/", apiKeyOnly, bodyCap, async (c) => {
    const input = await parseJsonBody(c, memoryStoreCreateSchema);
    const now = nowIso(c);
    const store: MemoryStore = {
      type: "memory_store",
      id: newIdFor(c, "memstore"),
      name: input.name,
      description: input.description ?? "",
      metadata: input.metadata ?? {},
      created_at: now,
      updated_at: now,
      archived_at: null,
    };
    const deps = c.get("deps");
    await deps.storage.db.transaction().execute(async (trx) => {
      await trx
        .insertInto("memory_stores")
        .values({ id: store.id, body: JSON.stringify(store), created_at: now, updated_at: now, archived_at: null })
        .execute();
      await recordObjectEvent(trx, deps, "memory_store.created", store.id);
    });
    return c.json(store);
  });

  r.get("/", apiKeyOnly, async (c) => {
    const q = parseQuery(c, memoryStoreListQuery);
    return c.json(await listDocuments<MemoryStore>(c.get("deps").storage.db, "memory_stores", q));
  });

  r.get("/:memory_store_id", apiKeyOnly, async (c) => c.json(await loadMemoryStoreBody(c, pathId(c, "memory_store_id"))));

  r.post("/:memory_store_id", apiKeyOnly, bodyCap, async (c) => {
    const id = pathId(c, "memory_store_id");
    const input = await parseJsonBody(c, memoryStoreUpdateSchema, { allowEmpty: true });
    const current = await loadMemoryStoreBody(c, id);
    if (current.archived_at) throw badRequest("memory store is archived and cannot be updated");
    const next: MemoryStore = { ...current, metadata: applyMetadataPatch(current.metadata, input.metadata) };
    if (input.name) next.name = input.name;
    if (input.description !== undefined) next.description = input.description ?? "";
    if (JSON.stringify(next) === JSON.stringify(current)) return c.json(current);
    next.updated_at = nowIso(c);
    // Conditional on the body we read, so a concurrent update or archive is never overwritten.
    const res = await c
      .get("deps")
      .storage.db.updateTable("memory_stores")
      .set({ body: JSON.stringify(next), updated_at: next.updated_at })
      .where("id", "=", id)
      .where("body", "=", JSON.stringify(current))
      .executeTakeFirst();
    if (Number(res.numUpdatedRows) !== 1) throw new ApiError(409, "conflict_error", "memory store was modified concurrently; retry");
    return c.json(next);
  });

  r.delete("/:memory_store_id", apiKeyOnly, async (c) => {
    const id = pathId(c, "memory_store_id");
    await c
      .get("deps")
      .storage.db.transaction()
      .execute(async (trx) => {
        const res = await trx.deleteFrom("memory_stores").where("id", "=", id).executeTakeFirst();
        if (Number(res.numDeletedRows) !== 1) throw notFound("memory store", id);
        await trx.deleteFrom("memories").where("memory_store_id", "=", id).execute();
        await trx.deleteFrom("memory_versions").where("memory_store_id", "=", id).execute();
        await recordObjectEvent(trx, c.get("deps"), "memory_store.deleted", id);
      });
    return c.json({ id, type: "memory_store_deleted" as const });
  });

  r.post("/:memory_store_id/archive", apiKeyOnly, async (c) => {
    const id = pathId(c, "memory_store_id");
    const current = await loadMemoryStoreBody(c, id);
    if (current.archived_at) return c.json(current);
    const now = nowIso(c);
    const archived: MemoryStore = { ...current, archived_at: now, updated_at: now };
    const deps = c.get("deps");
    const won = await deps.storage.db.transaction().execute(async (trx) => {
      const res = await trx
        .updateTable("memory_stores")
        .set({ body: JSON.stringify(archived), archived_at: now, updated_at: now })
        .where("id", "=", id)
        .where("archived_at", "is", null)
        .executeTakeFirst();
      if (Number(res.numUpdatedRows) !== 1) return false;
      await recordObjectEvent(trx, deps, "memory_store.archived", id);
      return true;
    });
    return c.json(won ? archived : await loadMemoryStoreBody(c, id));
  });

  registerMemoryRoutes(r);
  registerMemoryVersionRoutes(r);
  return r;
}
