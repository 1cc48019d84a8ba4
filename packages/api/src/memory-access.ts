/**
 * Who may touch a memory store's memories, and as whom. API keys reach every
 * store; a sessions token only the stores attached to its session (rows of
 * `session_resources` with `type = 'memory_store'`), and only reads when the
 * attachment is `read_only`. Environment keys are refused (§1.4): the worker
 * never sends them here.
 */
import type { Database, MemoryStoreRow, Storage } from "@openma/storage";
import type { Context } from "hono";
import type { Transaction } from "kysely";
import { type Credential, requireCredential } from "./auth.ts";
import type { AppEnv } from "./context.ts";
import { badRequest, forbidden, notFound } from "./errors.ts";

export type Actor = { type: "api_actor"; api_key_id: string } | { type: "session_actor"; session_id: string };

export type MemoryCaller = Extract<Credential, { kind: "api_key" | "sessions_token" }>;

/** The actor recorded in `created_by` (key order fixed: the JSON text is matched by filters). */
export function actorOf(credential: MemoryCaller): Actor {
  return credential.kind === "sessions_token"
    ? { type: "session_actor", session_id: credential.sessionId }
    : { type: "api_actor", api_key_id: credential.keyId };
}

export function actorJson(actor: Actor): string {
  return actor.type === "session_actor"
    ? JSON.stringify({ type: actor.type, session_id: actor.session_id })
    : JSON.stringify({ type: actor.type, api_key_id: actor.api_key_id });
}

/** The session's attachment of a store, or null when the store is not attached. */
async function sessionAttachment(c: Context<AppEnv>, sessionId: string, storeId: string): Promise<{ access: string } | null> {
  const rows = await c
    .get("deps")
    .storage.db.selectFrom("session_resources")
    .select("body")
    .where("session_id", "=", sessionId)
    .where("type", "=", "memory_store")
    .execute();
  for (const row of rows) {
    let body: { memory_store_id?: unknown; access?: unknown };
    try {
      body = JSON.parse(row.body);
    } catch {
      continue;
    }
    if (body?.memory_store_id === storeId) return { access: typeof body.access === "string" ? body.access : "read_write" };
  }
  return null;
}

/** Authorises a memory request on `storeId`; `write` requires a writable attachment for tokens. */
export async function memoryCaller(c: Context<AppEnv>, storeId: string, mode: "read" | "write"): Promise<MemoryCaller> {
  const credential = requireCredential(c, "api_key", "sessions_token");
  if (credential.kind === "sessions_token") {
    const attachment = await sessionAttachment(c, credential.sessionId, storeId);
    if (!attachment) throw forbidden("this sessions token is not valid for this memory store: it is not attached to the session");
    if (mode === "write" && attachment.access === "read_only") {
      throw forbidden("this memory store is attached to the session read-only");
    }
  }
  return credential;
}

export async function loadMemoryStore(c: Context<AppEnv>, id: string): Promise<MemoryStoreRow> {
  const row = await c.get("deps").storage.db.selectFrom("memory_stores").selectAll().where("id", "=", id).executeTakeFirst();
  if (!row) throw notFound("memory store", id);
  return row;
}

/**
 * Starts a memory write: locks the store row (Postgres; SQLite transactions
 * are serial anyway) so path-overlap checks and inserts of concurrent writers
 * cannot interleave, and refuses writes to archived stores.
 */
export async function lockStoreForWrite(trx: Transaction<Database>, storage: Storage, storeId: string): Promise<MemoryStoreRow> {
  let query = trx.selectFrom("memory_stores").selectAll().where("id", "=", storeId);
  if (storage.dialect === "postgres") query = query.forUpdate();
  const row = await query.executeTakeFirst();
  if (!row) throw notFound("memory store", storeId);
  if (row.archived_at) throw badRequest("memory store is archived; its memories cannot be changed");
  return row;
}
