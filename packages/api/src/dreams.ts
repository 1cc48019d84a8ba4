/**
 * The dream document (SDK `BetaDream`) and the one way it changes: a
 * transaction that locks the row, reads the document, applies a change and
 * writes the document and its status column together. The API (cancel,
 * archive) and the job (start, finish) both go through `changeDream`, so a
 * cancel and a finishing job never both win: whichever commits second sees
 * the other's status.
 */
import type { Database, Storage } from "@openma/storage";
import type { Transaction } from "kysely";
import { notFound } from "./errors.ts";
import { fromJson } from "./util.ts";

export type DreamStatus = "pending" | "running" | "completed" | "failed" | "canceled";

export const FINAL_STATUSES: ReadonlySet<DreamStatus> = new Set(["completed", "failed", "canceled"]);

export interface DreamUsage {
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  input_tokens: number;
  output_tokens: number;
}

export type DreamInput = { type: "memory_store"; memory_store_id: string } | { type: "sessions"; session_ids: string[] };

export interface Dream {
  id: string;
  type: "dream";
  archived_at: string | null;
  created_at: string;
  ended_at: string | null;
  error: { type: string; message: string } | null;
  inputs: DreamInput[];
  instructions: string | null;
  model: { id: string; speed: "standard" };
  output_behavior: { type: "create_new" } | { type: "update_existing"; memory_store_id: string };
  outputs: { type: "memory_store"; memory_store_id: string }[];
  session_id: string | null;
  status: DreamStatus;
  usage: DreamUsage;
}

export const ZERO_USAGE: DreamUsage = { cache_creation_input_tokens: 0, cache_read_input_tokens: 0, input_tokens: 0, output_tokens: 0 };

export function inputStoreOf(d: Dream): string {
  const input = d.inputs.find((i) => i.type === "memory_store");
  if (!input) throw new Error(`dream ${d.id} has no memory_store input`);
  return input.memory_store_id;
}

export function inputSessionsOf(d: Dream): string[] {
  return d.inputs.flatMap((i) => (i.type === "sessions" ? i.session_ids : []));
}

/** The store the dream writes (or will write) into: known from the start for update_existing. */
export function outputStoreOf(d: Dream): string | null {
  if (d.output_behavior.type === "update_existing") return d.output_behavior.memory_store_id;
  return d.outputs[0]?.memory_store_id ?? null;
}

export async function loadDream(db: Storage["db"] | Transaction<Database>, id: string): Promise<Dream> {
  const row = await db.selectFrom("dreams").select("body").where("id", "=", id).executeTakeFirst();
  if (!row) throw notFound("dream", id);
  return fromJson<Dream>(row.body);
}

/**
 * Locks the dream (Postgres `FOR UPDATE`; SQLite transactions are serial),
 * hands its document to `change`, and writes back what `change` returns
 * (null: leave it). `change` may write other rows in `trx` too.
 */
export async function changeDream<T extends Dream | null>(
  storage: Storage,
  id: string,
  change: (current: Dream, trx: Transaction<Database>) => Promise<T> | T,
): Promise<{ before: Dream; after: T }> {
  return storage.db.transaction().execute(async (trx) => {
    let query = trx.selectFrom("dreams").select("body").where("id", "=", id);
    if (storage.dialect === "postgres") query = query.forUpdate();
    const row = await query.executeTakeFirst();
    if (!row) throw notFound("dream", id);
    const before = fromJson<Dream>(row.body);
    const after = await change(before, trx);
    if (after) {
      await trx
        .updateTable("dreams")
        .set({
          body: JSON.stringify(after),
          status: after.status,
          archived_at: after.archived_at,
          output_store_id: outputStoreOf(after),
        })
        .where("id", "=", id)
        .execute();
    }
    return { before, after };
  });
}
