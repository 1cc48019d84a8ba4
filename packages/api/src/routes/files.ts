/**
 * `/v1/files` (API key only; no anthropic-beta header required): multipart
 * upload into content-addressed blobs, metadata, list, raw download, delete.
 * Expired files read as 404 `file_expired` and drop out of listings.
 */
import { contentKeyOf, discardStaged, type FileRow, type Storage } from "@openma/storage";
import type { Context } from "hono";
import { Hono } from "hono";
import { requireCredential } from "../auth.ts";
import type { AppEnv } from "../context.ts";
import { ApiError, badRequest, notFound } from "../errors.ts";
import { decodeCursor, pageOf } from "../pagination.ts";
import { expiresInSeconds, fileListQuery, uploadFilename, uploadMimeType } from "../schemas/file.ts";
import { type ReceivedUpload, receiveUpload, sendBlob, transferSettings } from "../transfers.ts";
import { contentDisposition, putStagedBlobOnce, releaseBlob } from "../uploads.ts";
import { newIdFor, nowIso, pathId } from "../util.ts";
import { parseQuery, parseWith } from "../validate.ts";

export const FILE_BLOB_NAMESPACE = "files";

export interface FileMetadata {
  type: "file";
  id: string;
  filename: string;
  mime_type: string;
  size_bytes: number;
  created_at: string;
  downloadable: boolean;
  expires_at: string | null;
  scope: { type: "session"; id: string } | null;
}

export function renderFile(row: FileRow): FileMetadata {
  return {
    type: "file",
    id: row.id,
    filename: row.filename,
    mime_type: row.mime_type,
    size_bytes: Number(row.size_bytes),
    created_at: row.created_at,
    downloadable: Number(row.downloadable) === 1,
    expires_at: row.expires_at,
    scope: row.scope ? { type: "session", id: row.scope } : null,
  };
}

/** Removes a file blob once no file row references it (file blobs are content-addressed and shared). */
export async function releaseFileBlob(storage: Storage, key: string): Promise<void> {
  await releaseBlob(storage, key, async () => {
    const other = await storage.db.selectFrom("files").select("id").where("blob_key", "=", key).limit(1).executeTakeFirst();
    return !!other;
  });
}

/** A file that exists and has not expired (404 `file_expired` once it has). */
export async function loadLiveFile(c: Context<AppEnv>, id: string): Promise<FileRow> {
  const row = await c.get("deps").storage.db.selectFrom("files").selectAll().where("id", "=", id).executeTakeFirst();
  if (!row) throw notFound("file", id);
  if (row.expires_at !== null && row.expires_at <= nowIso(c)) {
    throw new ApiError(404, "not_found_error", `file ${JSON.stringify(id)} has expired`, { error_code: "file_expired" });
  }
  return row;
}

/** Validates the upload's metadata, places its blob and commits its row. */
async function storeUpload(c: Context<AppEnv>, upload: ReceivedUpload): Promise<FileRow> {
  const filename = uploadFilename(upload.filename);
  const expiresText = upload.fields.get("expires_in_seconds") || undefined;
  const expiresIn = expiresText === undefined ? undefined : parseWith(expiresInSeconds, expiresText, "expires_in_seconds");
  const { staged } = upload;
  const deps = c.get("deps");
  const key = contentKeyOf(FILE_BLOB_NAMESPACE, staged.sha256);
  const now = deps.clock.now();
  const row: FileRow = {
    id: newIdFor(c, "file"),
    filename,
    mime_type: uploadMimeType(upload.mimeType, filename),
    size_bytes: staged.size,
    sha256: staged.sha256,
    blob_key: key,
    scope: null,
    downloadable: 1,
    expires_at: expiresIn === undefined ? null : new Date(now + expiresIn * 1000).toISOString(),
    created_at: new Date(now).toISOString(),
  };
  // Placed before the row and again after it (see putBlob). A client gone while the blob is sent stops it (S3 aborts).
  await putStagedBlobOnce(deps.storage, key, staged, c.req.raw.signal);
  await deps.storage.db.insertInto("files").values(row).execute();
  await putStagedBlobOnce(deps.storage, key, staged);
  return row;
}

export function fileRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  r.use("*", async (c, next) => {
    requireCredential(c, "api_key");
    await next();
  });

  // Streamed: the file part is spooled to the blob store's staging directory as it arrives (transfers.ts).
  r.post("/", async (c) => {
    const settings = transferSettings(c);
    const release = settings.slots.acquire();
    try {
      const upload = await receiveUpload(c, {
        fileField: "file",
        maxBytes: settings.fileUploadLimitBytes,
        bufferBytes: settings.bufferBytes,
        what: "file upload",
      });
      try {
        return c.json(renderFile(await storeUpload(c, upload)));
      } finally {
        await discardStaged(upload.staged);
      }
    } finally {
      release();
    }
  });

  r.get("/", async (c) => {
    const q = parseQuery(c, fileListQuery);
    const cursor = decodeCursor(q.page);
    const now = nowIso(c);
    let query = c
      .get("deps")
      .storage.db.selectFrom("files")
      .selectAll()
      .where((eb) => eb.or([eb("expires_at", "is", null), eb("expires_at", ">", now)]))
      .orderBy("id", "desc")
      .limit(q.limit + 1);
    if (cursor) query = query.where("id", "<", cursor.k);
    if (q.ids) query = query.where("id", "in", q.ids);
    if (q.scope_id) query = query.where("scope", "=", q.scope_id);
    const rows = await query.execute();
    return c.json(pageOf(rows, q.limit, (row) => row.id, renderFile));
  });

  r.get("/:file_id", async (c) => c.json(renderFile(await loadLiveFile(c, pathId(c, "file_id")))));

  r.get("/:file_id/content", async (c) => {
    const row = await loadLiveFile(c, pathId(c, "file_id"));
    if (Number(row.downloadable) !== 1) {
      throw badRequest(`file ${JSON.stringify(row.id)} is not downloadable`, { error_code: "file_not_downloadable" });
    }
    return sendBlob(
      c,
      row.blob_key,
      {
        contentType: row.mime_type,
        headers: { "content-disposition": contentDisposition(row.filename) },
        onMissing: () => notFound("file content", row.id),
      },
      transferSettings(c),
    );
  });

  r.delete("/:file_id", async (c) => {
    const id = pathId(c, "file_id");
    const { storage } = c.get("deps");
    const row = await storage.db.deleteFrom("files").where("id", "=", id).returning(["blob_key"]).executeTakeFirst();
    if (!row) throw notFound("file", id);
    await releaseFileBlob(storage, row.blob_key);
    return c.json({ id, type: "file_deleted" as const });
  });

  return r;
}
