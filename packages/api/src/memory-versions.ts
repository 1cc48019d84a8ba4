/**
 * `/v1/memory_stores/{ms}/memory_versions`: the audit trail of a store's
 * memories (one row per create/modify/delete). Versions outlive their memory;
 * redaction blanks a version's path and content but keeps who wrote it.
 */
import type { MemoryVersionRow } from "@openma/storage";
import type { Context, Hono } from "hono";
import { requireCredential } from "./auth.ts";
import type { AppEnv } from "./context.ts";
import { badRequest, notFound } from "./errors.ts";
import { type Actor, actorJson, actorOf, loadMemoryStore, memoryCaller } from "./memory-access.ts";
import { decodeCursor, pageOf } from "./pagination.ts";
import { type MemoryView, memoryVersionListQuery, pageLimit, viewQuery } from "./schemas/memory.ts";
import { nowIso, pathId } from "./util.ts";
import { parseQuery } from "./validate.ts";

export interface MemoryVersion {
  type: "memory_version";
  id: string;
  memory_id: string;
  memory_store_id: string;
  operation: "created" | "modified" | "deleted";
  path: string | null;
  content: string | null;
  content_sha256: string | null;
  content_size_bytes: number | null;
  created_at: string;
  created_by: Actor | null;
  redacted_at: string | null;
  redacted_by: Actor | null;
}

const parseActor = (text: string | null): Actor | null => (text ? (JSON.parse(text) as Actor) : null);

export function renderMemoryVersion(row: MemoryVersionRow, view: MemoryView): MemoryVersion {
  return {
    type: "memory_version",
    id: row.id,
    memory_id: row.memory_id,
    memory_store_id: row.memory_store_id,
    operation: row.operation as MemoryVersion["operation"],
    path: row.path,
    content: view === "full" ? row.content : null,
    content_sha256: row.content_sha256,
    content_size_bytes: row.content_size_bytes === null ? null : Number(row.content_size_bytes),
    created_at: row.created_at,
    created_by: parseActor(row.created_by),
    redacted_at: row.redacted_at,
    redacted_by: parseActor(row.redacted_by),
  };
}

async function loadVersion(c: Context<AppEnv>, storeId: string, id: string): Promise<MemoryVersionRow> {
  const row = await c
    .get("deps")
    .storage.db.selectFrom("memory_versions")
    .selectAll()
    .where("id", "=", id)
    .where("memory_store_id", "=", storeId)
    .executeTakeFirst();
  if (!row) throw notFound("memory version", id);
  return row;
}

async function listVersions(c: Context<AppEnv>) {
  const storeId = pathId(c, "memory_store_id");
  await memoryCaller(c, storeId, "read");
  const q = parseQuery(c, memoryVersionListQuery);
  await loadMemoryStore(c, storeId);
  const view = q.view ?? "basic";
  const limit = pageLimit(q.limit, view);
  const cursor = decodeCursor(q.page);
  // Only API keys and sessions write here: no version has a service-account author.
  if (q.service_account_id) return { data: [], next_page: null };
  let query = c
    .get("deps")
    .storage.db.selectFrom("memory_versions")
    .selectAll()
    .where("memory_store_id", "=", storeId)
    .orderBy("id", "desc")
    .limit(limit + 1);
  if (cursor) query = query.where("id", "<", cursor.k);
  if (q.memory_id) query = query.where("memory_id", "=", q.memory_id);
  if (q.operation) query = query.where("operation", "=", q.operation);
  if (q.session_id) query = query.where("created_by", "=", actorJson({ type: "session_actor", session_id: q.session_id }));
  if (q.api_key_id) query = query.where("created_by", "=", actorJson({ type: "api_actor", api_key_id: q.api_key_id }));
  if (q["created_at[gte]"]) query = query.where("created_at", ">=", new Date(q["created_at[gte]"]).toISOString());
  if (q["created_at[lte]"]) query = query.where("created_at", "<=", new Date(q["created_at[lte]"]).toISOString());
  const rows = await query.execute();
  return pageOf(
    rows,
    limit,
    (row) => row.id,
    (row) => renderMemoryVersion(row, view),
  );
}

/**
 * Blanks a version's path and content. The version holding a live memory's
 * current content is refused: its content would still be readable through
 * the memory, so the redaction would be a false promise.
 */
async function redactVersion(c: Context<AppEnv>): Promise<MemoryVersion> {
  const credential = requireCredential(c, "api_key");
  const storeId = pathId(c, "memory_store_id");
  const id = pathId(c, "memory_version_id");
  const current = await loadVersion(c, storeId, id);
  if (current.redacted_at) return renderMemoryVersion(current, "full");
  const { db } = c.get("deps").storage;
  const live = await db.selectFrom("memories").select("id").where("memory_version_id", "=", id).executeTakeFirst();
  if (live) throw badRequest("this version holds the memory's current content; update or delete the memory before redacting it");
  const now = nowIso(c);
  const row = await db
    .updateTable("memory_versions")
    .set({
      path: null,
      content: null,
      content_sha256: null,
      content_size_bytes: null,
      redacted_at: now,
      redacted_by: actorJson(actorOf(credential)),
    })
    .where("id", "=", id)
    .where("redacted_at", "is", null)
    .returningAll()
    .executeTakeFirst();
  return renderMemoryVersion(row ?? (await loadVersion(c, storeId, id)), "full");
}

export function registerMemoryVersionRoutes(r: Hono<AppEnv>): void {
  r.get("/:memory_store_id/memory_versions", async (c) => c.json(await listVersions(c)));
  r.get("/:memory_store_id/memory_versions/:memory_version_id", async (c) => {
    const storeId = pathId(c, "memory_store_id");
    await memoryCaller(c, storeId, "read");
    const q = parseQuery(c, viewQuery);
    return c.json(renderMemoryVersion(await loadVersion(c, storeId, pathId(c, "memory_version_id")), q.view ?? "full"));
  });
  r.post("/:memory_store_id/memory_versions/:memory_version_id/redact", async (c) => c.json(await redactVersion(c)));
}
