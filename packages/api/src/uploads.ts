/**
 * Shared plumbing for the multipart endpoints (files, skills) and the
 * content-addressed blobs behind them, plus two small portable SQL helpers.
 */
import { type Dialect, putStagedBlob, type StagedBlob, type Storage } from "@openma/storage";
import type { Context, MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { type RawBuilder, sql } from "kysely";
import type { AppEnv } from "./context.ts";
import { ApiError, badRequest } from "./errors.ts";

export const MB = 1024 * 1024;

/** Refuses bodies over `maxBytes` with a 413 in the API's error shape (before buffering them). */
export function limitBody(maxBytes: number, what: string): MiddlewareHandler<AppEnv> {
  return bodyLimit({
    maxSize: maxBytes,
    onError: () => {
      throw new ApiError(413, "request_too_large", `${what} exceeds the ${Math.round(maxBytes / MB)} MB limit`);
    },
  });
}

/** Parses a multipart/form-data body; anything else is a 400 (never a 500). */
export async function readMultipart(c: Context<AppEnv>): Promise<FormData> {
  const type = c.req.header("content-type") ?? "";
  if (!/^multipart\/form-data\s*;/i.test(type)) throw badRequest("request body must be multipart/form-data");
  try {
    return await c.req.formData();
  } catch {
    throw badRequest("request body is not valid multipart/form-data");
  }
}

/** A text field of a multipart form (absent or empty → undefined); a file part there is a 400. */
export function formText(form: FormData, name: string): string | undefined {
  const value = form.get(name);
  if (value === null) return undefined;
  if (typeof value !== "string") throw badRequest(`${name}: expected a text field, got a file`);
  return value === "" ? undefined : value;
}

/** Every file part under `names` (e.g. `files[]` as the SDK sends it, or plain `files`). */
export function formFiles(form: FormData, ...names: string[]): File[] {
  const out: File[] = [];
  for (const name of names) {
    for (const value of form.getAll(name)) {
      if (typeof value === "string") throw badRequest(`${name}: expected a file part, got a text field`);
      out.push(value);
    }
  }
  return out;
}

/**
 * Stores bytes under their content key unless already present. Callers write
 * it before committing the row that references the key and once more after
 * the commit: a concurrent delete of the last other reference may have
 * removed the shared blob in between.
 */
export async function putBlob(storage: Storage, key: string, data: Uint8Array): Promise<void> {
  if (!(await storage.blobs.exists(key))) await storage.blobs.put(key, data);
}

/** `putBlob` for an upload spooled to a staged file (the file stays; the caller discards it). */
export async function putStagedBlobOnce(storage: Storage, key: string, staged: StagedBlob, signal?: AbortSignal): Promise<void> {
  if (!(await storage.blobs.exists(key))) await putStagedBlob(storage.blobs, key, staged, signal);
}

/** Removes a blob once no row references it any more (content-addressed blobs are shared). */
export async function releaseBlob(storage: Storage, key: string, referenced: () => Promise<boolean>): Promise<void> {
  if (!(await referenced())) await storage.blobs.delete(key);
}

/**
 * A column compared bytewise on both engines. SQLite's default collation is
 * binary; Postgres text uses the database's locale unless told `collate "C"`.
 * Prefix ranges (`prefix <= x < upper`) are only correct under bytewise order.
 */
export function bytewise(column: string, dialect: Dialect): RawBuilder<string> {
  return dialect === "postgres" ? sql<string>`${sql.ref(column)} collate "C"` : sql<string>`${sql.ref(column)}`;
}

export function isUniqueViolation(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === "23505" || code === "SQLITE_CONSTRAINT_UNIQUE" || code === "SQLITE_CONSTRAINT_PRIMARYKEY";
}

/** `attachment` disposition with an ASCII fallback and the exact UTF-8 name (RFC 6266 / 5987). */
export function contentDisposition(filename: string): string {
  const ascii = filename.replace(/[^\x20-\x7e]|["\\]/g, "_");
  const encoded = encodeURIComponent(filename).replace(/['()*]/g, (ch) => `%${ch.charCodeAt(0).toString(16).toUpperCase()}`);
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encoded}`;
}
