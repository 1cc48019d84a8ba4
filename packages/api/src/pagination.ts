/**
 * Cursor pages `{data, next_page}`: the cursor is an opaque base64url token
 * wrapping the keyset position (the last id served). A malformed cursor is a
 * 400, never a 500 or a silent restart from the beginning.
 */
import type { Database } from "@openma/storage";
import { type Kysely, type RawBuilder, sql } from "kysely";
import { z } from "zod";
import { badRequest } from "./errors.ts";
import { queryBool, queryInt } from "./validate.ts";

export interface Cursor {
  /** Keyset position: the sort key of the last item served. */
  k: string;
  /** Direction for bidirectional pages. */
  d?: "next" | "prev";
}

export function encodeCursor(cursor: Cursor): string {
  return Buffer.from(JSON.stringify(cursor), "utf8").toString("base64url");
}

export function decodeCursor(token: string | undefined): Cursor | undefined {
  if (token === undefined) return undefined;
  try {
    const value = JSON.parse(Buffer.from(token, "base64url").toString("utf8"));
    // Postgres text cannot hold NUL: such a key would fail the keyset query with a 500.
    if (typeof value?.k === "string" && value.k.includes("\u0000")) throw badRequest("page: invalid page cursor");
    if (value && typeof value.k === "string" && (value.d === undefined || value.d === "next" || value.d === "prev")) return value;
  } catch {
    // fall through
  }
  throw badRequest("page: invalid page cursor");
}

export const pageQuery = (maxLimit = 1000, defaultLimit = 20) => ({
  limit: queryInt(1, maxLimit)
    .optional()
    .transform((v) => v ?? defaultLimit),
  page: z.string().max(2048).optional(),
});

/**
 * Given `limit + 1` rows fetched past the cursor, returns the page and the
 * next cursor (null on the last page).
 */
export function pageOf<Row, Out>(rows: Row[], limit: number, key: (row: Row) => string, render: (row: Row) => Out) {
  const hasMore = rows.length > limit;
  const pageRows = hasMore ? rows.slice(0, limit) : rows;
  const last = pageRows[pageRows.length - 1];
  return {
    data: pageRows.map(render),
    next_page: hasMore && last !== undefined ? encodeCursor({ k: key(last) }) : null,
  };
}

/** The list query every archivable document resource accepts. */
export const documentListQuery = (maxLimit = 100) =>
  z.object({
    ...pageQuery(maxLimit),
    include_archived: queryBool.optional(),
    "created_at[gte]": z.iso.datetime({ offset: true }).optional(),
    "created_at[lte]": z.iso.datetime({ offset: true }).optional(),
  });

/** The list query of agents, environments, vaults and credentials. */
export const documentQuery = documentListQuery();

/** The query of a list with nothing but paging (limit up to 100). */
export const pageOnlyQuery = z.object(pageQuery(100));

/** Tables that keep one JSON document per row under the shared columns id, body, created_at, archived_at. */
export type DocumentTable =
  | "agents"
  | "environments"
  | "vaults"
  | "vault_credentials"
  | "memory_stores"
  | "tunnels"
  | "tunnel_certificates"
  | "dreams";

export interface DocumentListOptions {
  limit: number;
  page?: string | undefined;
  include_archived?: boolean | undefined;
  "created_at[gte]"?: string | undefined;
  "created_at[lte]"?: string | undefined;
  /** Only the credentials of this vault (vault_credentials). */
  vaultId?: string;
  /** Further conditions on the table's own columns (a tunnel's certificates, dreams by status). */
  where?: RawBuilder<boolean>[];
}

/** Newest first, keyset on the time-ordered id, archived rows only on request. */
export async function listDocuments<T>(db: Kysely<Database>, table: DocumentTable, opts: DocumentListOptions) {
  const cursor = decodeCursor(opts.page);
  // The tables share these columns; Kysely is typed against one of them.
  let query = db
    .selectFrom(table as "vaults")
    .select(["id", "body"])
    .orderBy("id", "desc")
    .limit(opts.limit + 1);
  if (cursor) query = query.where("id", "<", cursor.k);
  if (!opts.include_archived) query = query.where("archived_at", "is", null);
  if (opts["created_at[gte]"]) query = query.where("created_at", ">=", new Date(opts["created_at[gte]"]).toISOString());
  if (opts["created_at[lte]"]) query = query.where("created_at", "<=", new Date(opts["created_at[lte]"]).toISOString());
  if (opts.vaultId !== undefined) query = query.where(sql<boolean>`vault_id = ${opts.vaultId}`);
  for (const condition of opts.where ?? []) query = query.where(condition);
  const rows = await query.execute();
  return pageOf(
    rows,
    opts.limit,
    (row) => row.id,
    (row) => JSON.parse(row.body) as T,
  );
}
