/**
 * `/v1/memory_stores/{ms}/memories`: create, retrieve, update, delete, list.
 *
 * Every write runs in one transaction that first locks the store row, so the
 * path-overlap check and the write cannot interleave with another writer's;
 * content changes are additionally conditional on the memory's current
 * version id. Each change appends one `memory_versions` row (who, what).
 * `content_sha256` is the lowercase hex SHA-256 of the exact UTF-8 bytes.
 */
import { type Database, type MemoryRow, sha256Hex } from "@openma/storage";
import type { Context, Hono } from "hono";
import type { Transaction } from "kysely";
import type { AppEnv } from "./context.ts";
import { ApiError, badRequest, notFound } from "./errors.ts";
import { type Actor, actorJson, actorOf, loadMemoryStore, lockStoreForWrite, type MemoryCaller, memoryCaller } from "./memory-access.ts";
import { ancestorsOf, prefixUpperBound, rollupOf } from "./memory-paths.ts";
import { decodeCursor, encodeCursor } from "./pagination.ts";
import {
  type MemoryView,
  memoryCreateSchema,
  memoryDeleteQuery,
  memoryListQuery,
  memoryUpdateSchema,
  pageLimit,
  viewQuery,
} from "./schemas/memory.ts";
import { bytewise, isUniqueViolation, limitBody, MB } from "./uploads.ts";
import { newIdFor, nowIso, pathId } from "./util.ts";
import { parseJsonBody, parseQuery } from "./validate.ts";

export interface Memory {
  type: "memory";
  id: string;
  memory_store_id: string;
  memory_version_id: string;
  path: string;
  content_sha256: string;
  content_size_bytes: number;
  content: string | null;
  created_at: string;
  updated_at: string;
}

export interface MemoryPrefix {
  type: "memory_prefix";
  path: string;
}

type MemoryListRow = Omit<MemoryRow, "content"> & { content?: string };

const LIST_COLUMNS = [
  "id",
  "memory_store_id",
  "path",
  "content_sha256",
  "content_size_bytes",
  "memory_version_id",
  "created_at",
  "updated_at",
] as const;

export function renderMemory(row: MemoryListRow, view: MemoryView): Memory {
  return {
    type: "memory",
    id: row.id,
    memory_store_id: row.memory_store_id,
    memory_version_id: row.memory_version_id,
    path: row.path,
    content_sha256: row.content_sha256,
    content_size_bytes: Number(row.content_size_bytes),
    content: view === "full" ? (row.content ?? "") : null,
    created_at: row.created_at,
    updated_at: row.updated_at,
  };
}

/** 409s here are permanent for this request: tell the SDK not to retry them. */
const NO_RETRY = { "x-should-retry": "false" };

function pathConflict(conflict: { id: string; path: string }): ApiError {
  return new ApiError(
    409,
    "memory_path_conflict_error",
    `path conflicts with the memory at ${JSON.stringify(conflict.path)}`,
    undefined,
    { conflicting_memory_id: conflict.id, conflicting_path: conflict.path },
    NO_RETRY,
  );
}

const preconditionFailed = (what: string) =>
  new ApiError(
    409,
    "memory_precondition_failed_error",
    `${what} does not match the memory's current content_sha256`,
    undefined,
    {},
    NO_RETRY,
  );

/** The memory whose path equals `path`, is an ancestor of it, or lies below it. */
async function findOverlap(
  trx: Transaction<Database>,
  c: Context<AppEnv>,
  storeId: string,
  path: string,
  excludeId?: string,
): Promise<{ id: string; path: string } | undefined> {
  let exact = trx
    .selectFrom("memories")
    .select(["id", "path"])
    .where("memory_store_id", "=", storeId)
    .where("path", "in", [path, ...ancestorsOf(path)]);
  if (excludeId) exact = exact.where("id", "!=", excludeId);
  const hit = await exact.limit(1).executeTakeFirst();
  if (hit) return hit;
  const col = bytewise("path", c.get("deps").storage.dialect);
  const below = `${path}/`;
  let under = trx
    .selectFrom("memories")
    .select(["id", "path"])
    .where("memory_store_id", "=", storeId)
    .where(col, ">=", below)
    .where(col, "<", prefixUpperBound(below));
  if (excludeId) under = under.where("id", "!=", excludeId);
  return await under.orderBy(col).limit(1).executeTakeFirst();
}

interface VersionInput {
  memoryId: string;
  storeId: string;
  operation: "created" | "modified" | "deleted";
  path: string;
  content: string | null;
  createdBy: MemoryCaller;
  now: string;
}

/** One `memory_versions` row: the change a writer (a request, or a dream on its creator's behalf) made to a memory. */
export interface MemoryVersionWrite extends Omit<VersionInput, "createdBy"> {
  id: string;
  actor: Actor;
}

export async function insertMemoryVersion(trx: Transaction<Database>, v: MemoryVersionWrite): Promise<void> {
  await trx
    .insertInto("memory_versions")
    .values({
      id: v.id,
      memory_id: v.memoryId,
      memory_store_id: v.storeId,
      operation: v.operation,
      path: v.path,
      content: v.content,
      content_sha256: v.content === null ? null : sha256Hex(v.content),
      content_size_bytes: v.content === null ? null : Buffer.byteLength(v.content, "utf8"),
      created_by: actorJson(v.actor),
      created_at: v.now,
      redacted_at: null,
      redacted_by: null,
    })
    .execute();
}

async function appendVersion(trx: Transaction<Database>, c: Context<AppEnv>, v: VersionInput): Promise<string> {
  const { createdBy, ...rest } = v;
  const id = newIdFor(c, "memver");
  await insertMemoryVersion(trx, { ...rest, id, actor: actorOf(createdBy) });
  return id;
}

/** Maps a unique-constraint race on (store, path) to the API's path conflict. */
async function mapUniqueRace<T>(path: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (isUniqueViolation(err)) throw pathConflict({ id: "", path });
    throw err;
  }
}

async function createMemory(c: Context<AppEnv>): Promise<Memory> {
  const storeId = pathId(c, "memory_store_id");
  const caller = await memoryCaller(c, storeId, "write");
  const q = parseQuery(c, viewQuery);
  const input = await parseJsonBody(c, memoryCreateSchema);
  const content = input.content ?? "";
  const { storage } = c.get("deps");
  const row = await mapUniqueRace(input.path, () =>
    storage.db.transaction().execute(async (trx) => {
      await lockStoreForWrite(trx, storage, storeId);
      const conflict = await findOverlap(trx, c, storeId, input.path);
      if (conflict) throw pathConflict(conflict);
      const now = nowIso(c);
      const id = newIdFor(c, "mem");
      const versionId = await appendVersion(trx, c, {
        memoryId: id,
        storeId,
        operation: "created",
        path: input.path,
        content,
        createdBy: caller,
        now,
      });
      const memory: MemoryRow = {
        id,
        memory_store_id: storeId,
        path: input.path,
        content,
        content_sha256: sha256Hex(content),
        content_size_bytes: Buffer.byteLength(content, "utf8"),
        memory_version_id: versionId,
        created_at: now,
        updated_at: now,
      };
      await trx.insertInto("memories").values(memory).execute();
      return memory;
    }),
  );
  return renderMemory(row, q.view ?? "basic");
}

async function loadMemoryIn(trx: Transaction<Database>, storeId: string, id: string): Promise<MemoryRow> {
  const row = await trx.selectFrom("memories").selectAll().where("id", "=", id).where("memory_store_id", "=", storeId).executeTakeFirst();
  if (!row) throw notFound("memory", id);
  return row;
}

async function updateMemory(c: Context<AppEnv>): Promise<Memory> {
  const storeId = pathId(c, "memory_store_id");
  const id = pathId(c, "memory_id");
  const caller = await memoryCaller(c, storeId, "write");
  const q = parseQuery(c, viewQuery);
  const input = await parseJsonBody(c, memoryUpdateSchema, { allowEmpty: true });
  const { storage } = c.get("deps");
  const row = await mapUniqueRace(input.path ?? "", () =>
    storage.db.transaction().execute(async (trx) => {
      await lockStoreForWrite(trx, storage, storeId);
      const current = await loadMemoryIn(trx, storeId, id);
      const path = input.path ?? current.path;
      const content = input.content ?? current.content;
      const unchanged = path === current.path && content === current.content;
      // A retry of an update that already landed still succeeds (SDK docs: same content and path).
      if (input.precondition && input.precondition.content_sha256 !== current.content_sha256 && !unchanged) {
        throw preconditionFailed("precondition.content_sha256");
      }
      if (unchanged) return current; // nothing changes: no new version
      if (path !== current.path) {
        const conflict = await findOverlap(trx, c, storeId, path, id);
        if (conflict) throw pathConflict(conflict);
      }
      const now = nowIso(c);
      const versionId = await appendVersion(trx, c, {
        memoryId: id,
        storeId,
        operation: "modified",
        path,
        content,
        createdBy: caller,
        now,
      });
      const next: MemoryRow = {
        ...current,
        path,
        content,
        content_sha256: sha256Hex(content),
        content_size_bytes: Buffer.byteLength(content, "utf8"),
        memory_version_id: versionId,
        updated_at: now,
      };
      const res = await trx
        .updateTable("memories")
        .set({
          path,
          content,
          content_sha256: next.content_sha256,
          content_size_bytes: next.content_size_bytes,
          memory_version_id: versionId,
          updated_at: now,
        })
        .where("id", "=", id)
        .where("memory_version_id", "=", current.memory_version_id)
        .executeTakeFirst();
      if (Number(res.numUpdatedRows) !== 1) throw preconditionFailed("the memory changed concurrently; its version");
      return next;
    }),
  );
  return renderMemory(row, q.view ?? "basic");
}

async function deleteMemory(c: Context<AppEnv>): Promise<{ id: string; type: "memory_deleted" }> {
  const storeId = pathId(c, "memory_store_id");
  const id = pathId(c, "memory_id");
  const caller = await memoryCaller(c, storeId, "write");
  const q = parseQuery(c, memoryDeleteQuery);
  const { storage } = c.get("deps");
  await storage.db.transaction().execute(async (trx) => {
    await lockStoreForWrite(trx, storage, storeId);
    const current = await loadMemoryIn(trx, storeId, id);
    if (q.expected_content_sha256 && q.expected_content_sha256 !== current.content_sha256) {
      throw preconditionFailed("expected_content_sha256");
    }
    const res = await trx
      .deleteFrom("memories")
      .where("id", "=", id)
      .where("memory_version_id", "=", current.memory_version_id)
      .executeTakeFirst();
    if (Number(res.numDeletedRows) !== 1) throw preconditionFailed("the memory changed concurrently; its version");
    await appendVersion(trx, c, {
      memoryId: id,
      storeId,
      operation: "deleted",
      path: current.path,
      content: null,
      createdBy: caller,
      now: nowIso(c),
    });
  });
  return { id, type: "memory_deleted" };
}

type Position = { value: string; inclusive: boolean } | null;

/** Where the page after `key` starts: past a memory, or past everything under a rollup. */
function resumeAfter(key: string): Position {
  return key.endsWith("/") ? { value: prefixUpperBound(key), inclusive: true } : { value: key, inclusive: false };
}

/**
 * Lists memories under `path_prefix` in bytewise path order. With `depth` d,
 * memories more than d segments below the prefix collapse into one
 * `memory_prefix` item per directory; the scan then jumps past that
 * directory. Every item (memory or prefix) counts toward the page limit.
 */
async function listMemories(c: Context<AppEnv>) {
  const storeId = pathId(c, "memory_store_id");
  await memoryCaller(c, storeId, "read");
  const q = parseQuery(c, memoryListQuery);
  await loadMemoryStore(c, storeId);
  const view = q.view ?? "basic";
  const limit = pageLimit(q.limit, view);
  const prefix = q.path_prefix ?? "/";
  const depth = q.depth ?? 0;
  const cursor = decodeCursor(q.page);
  if (cursor && !cursor.k.startsWith(prefix)) throw badRequest("page: invalid page cursor for this path_prefix");
  const { storage } = c.get("deps");
  const col = bytewise("path", storage.dialect);
  const upper = prefix === "/" ? null : prefixUpperBound(prefix);
  let from: Position = cursor ? resumeAfter(cursor.k) : prefix === "/" ? null : { value: prefix, inclusive: true };
  const items: Array<{ key: string; item: Memory | MemoryPrefix }> = [];
  while (items.length <= limit) {
    const want = limit + 1 - items.length;
    let query = storage.db
      .selectFrom("memories")
      .select(view === "full" ? [...LIST_COLUMNS, "content"] : [...LIST_COLUMNS])
      .where("memory_store_id", "=", storeId)
      .orderBy(col)
      .limit(want);
    if (from) query = query.where(col, from.inclusive ? ">=" : ">", from.value);
    if (upper) query = query.where(col, "<", upper);
    const rows: MemoryListRow[] = await query.execute();
    let jumped = false;
    for (const row of rows) {
      const rollup = rollupOf(row.path, prefix, depth);
      if (rollup) {
        items.push({ key: rollup, item: { type: "memory_prefix", path: rollup } });
        from = resumeAfter(rollup);
        jumped = true;
        break;
      }
      items.push({ key: row.path, item: renderMemory(row, view) });
      from = resumeAfter(row.path);
    }
    if (!jumped && rows.length < want) break;
  }
  const page = items.slice(0, limit);
  const last = page[page.length - 1];
  return { data: page.map((i) => i.item), next_page: items.length > limit && last ? encodeCursor({ k: last.key }) : null };
}

async function retrieveMemory(c: Context<AppEnv>): Promise<Memory> {
  const storeId = pathId(c, "memory_store_id");
  const id = pathId(c, "memory_id");
  await memoryCaller(c, storeId, "read");
  const q = parseQuery(c, viewQuery);
  const row = await c
    .get("deps")
    .storage.db.selectFrom("memories")
    .selectAll()
    .where("id", "=", id)
    .where("memory_store_id", "=", storeId)
    .executeTakeFirst();
  if (!row) throw notFound("memory", id);
  return renderMemory(row, q.view ?? "full");
}

export function registerMemoryRoutes(r: Hono<AppEnv>): void {
  const bodyCap = limitBody(MB, "request body");
  r.post("/:memory_store_id/memories", bodyCap, async (c) => c.json(await createMemory(c)));
  r.get("/:memory_store_id/memories", async (c) => c.json(await listMemories(c)));
  r.get("/:memory_store_id/memories/:memory_id", async (c) => c.json(await retrieveMemory(c)));
  r.post("/:memory_store_id/memories/:memory_id", bodyCap, async (c) => c.json(await updateMemory(c)));
  r.delete("/:memory_store_id/memories/:memory_id", async (c) => c.json(await deleteMemory(c)));
}
