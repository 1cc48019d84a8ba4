/**
 * Cursor pages `{data, next_page}`: the cursor is an opaque base64url token
 * wrapping the keyset position (the last id served). A malformed cursor is a
 * 400, never a 500 or a silent restart from the beginning.
 */
import { z } from "zod";
import { badRequest } from "./errors.ts";
import { queryInt } from "./validate.ts";

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
