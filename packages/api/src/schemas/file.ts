/** File upload fields and list query: names, media types and expiry, validated at the edge. */
import { z } from "zod";
import { badRequest } from "../errors.ts";
import { pageQuery } from "../pagination.ts";
import { queryArray } from "../validate.ts";

export const FILE_UPLOAD_LIMIT_BYTES = 500 * 1024 * 1024;
/** Ten years: keeps `now + expires_in_seconds` a valid timestamp. */
export const MAX_EXPIRES_IN_SECONDS = 315_360_000;

export const fileListQuery = z.object({
  ...pageQuery(1000),
  ids: queryArray(z.string().min(1).max(256))
    .refine((ids) => ids.length <= 100, "at most 100 ids")
    .optional(),
  scope_id: z.string().min(1).max(256).optional(),
});

export const expiresInSeconds = z
  .string()
  .regex(/^\d+$/, "expected a positive integer")
  .transform(Number)
  .pipe(z.number().int().min(1).max(MAX_EXPIRES_IN_SECONDS));

// Control characters (NUL above all: Postgres text cannot hold it) and invalid UTF-16.
const BAD_NAME_CHARS = /[\p{Cc}\p{Cs}\u2028\u2029]/u;

/** The upload's filename with any client directories stripped (`a/b\\c.txt` → `c.txt`). */
export function uploadFilename(raw: string): string {
  const name = raw.split(/[\\/]/).pop() ?? "";
  if (name === "" || name === "." || name === "..") throw badRequest("file: the file part needs a filename");
  if (name.length > 255) throw badRequest("file: filename must be at most 255 characters");
  if (BAD_NAME_CHARS.test(name)) throw badRequest("file: filename must not contain control characters");
  return name;
}

const MEDIA_TYPE = /^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}\/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$/;

const BY_EXTENSION: Record<string, string> = {
  txt: "text/plain",
  md: "text/markdown",
  csv: "text/csv",
  html: "text/html",
  htm: "text/html",
  xml: "application/xml",
  json: "application/json",
  pdf: "application/pdf",
  zip: "application/zip",
  png: "image/png",
  jpg: "image/jpeg",
  jpeg: "image/jpeg",
  gif: "image/gif",
  webp: "image/webp",
  svg: "image/svg+xml",
  py: "text/x-python",
  js: "text/javascript",
  ts: "text/plain",
};

/**
 * The stored media type: the part's own type when it is a specific plain
 * `type/subtype` (parameters dropped), else a guess from the extension, else
 * octet-stream.
 * It is echoed as a response header, so nothing else may get through.
 */
export function uploadMimeType(partType: string, filename: string): string {
  const declared = (partType.split(";")[0] ?? "").trim().toLowerCase();
  // Multipart encoders label untyped parts octet-stream: that says nothing, so try the extension.
  if (MEDIA_TYPE.test(declared) && declared !== "application/octet-stream") return declared;
  const ext = filename.includes(".") ? (filename.split(".").pop() ?? "").toLowerCase() : "";
  return BY_EXTENSION[ext] ?? "application/octet-stream";
}
