/**
 * A session's outputs as Files scoped to the session (ADR 0023): what
 * `GET /v1/files?scope_id=<session id>` lists. A collector (the serve lane's
 * outputs directory, or a published outputs manifest) reports each output
 * path with its content digest; this module keeps one immutable file row per
 * path and content: an unchanged path keeps its row (and id), a changed one
 * gets a new row that replaces the old, a path that is gone loses its row.
 * Rows scoped to a session are only ever written here (uploads are never
 * scoped), so the session's scoped rows are exactly its collected outputs.
 */
import { contentKeyOf, type FileRow, type Storage } from "@openma/storage";
import { FILE_BLOB_NAMESPACE, releaseFileBlob } from "./routes/files.ts";

export interface OutputFileDeps {
  storage: Storage;
  ids: (prefix: string) => string;
  clock: { now(): number };
}

export interface CollectedOutput {
  /** Relative POSIX path inside the outputs directory; the file's `filename`. */
  path: string;
  sha256: string;
  size: number;
  mimeType: string;
}

/** The session's output rows by path (one per path once a sync has run). */
export async function outputFilesOf(storage: Storage, sessionId: string): Promise<Map<string, FileRow>> {
  const rows = await storage.db.selectFrom("files").selectAll().where("scope", "=", sessionId).execute();
  return new Map(rows.map((row) => [row.filename, row]));
}

/**
 * Records one collected output. `place(key)` puts its bytes under the blob key
 * (called before the row commits and once more after, as uploads do: a
 * concurrent delete of another row sharing the blob may remove it in between);
 * it is not called when the path already holds this very content.
 */
export async function recordOutputFile(
  deps: OutputFileDeps,
  sessionId: string,
  known: Map<string, FileRow>,
  output: CollectedOutput,
  place: (key: string) => Promise<void>,
): Promise<FileRow> {
  const previous = known.get(output.path);
  if (previous && previous.sha256 === output.sha256) return previous;
  const { storage } = deps;
  const key = contentKeyOf(FILE_BLOB_NAMESPACE, output.sha256);
  const row: FileRow = {
    id: deps.ids("file"),
    filename: output.path,
    mime_type: output.mimeType,
    size_bytes: output.size,
    sha256: output.sha256,
    blob_key: key,
    scope: sessionId,
    downloadable: 1,
    expires_at: null,
    created_at: new Date(deps.clock.now()).toISOString(),
  };
  if (!(await storage.blobs.exists(key))) await place(key);
  await storage.db.transaction().execute(async (trx) => {
    if (previous) await trx.deleteFrom("files").where("id", "=", previous.id).execute();
    await trx.insertInto("files").values(row).execute();
  });
  if (!(await storage.blobs.exists(key))) await place(key);
  if (previous) await releaseFileBlob(storage, previous.blob_key);
  known.set(output.path, row);
  return row;
}

/** Drops the rows of paths that are no longer outputs (`keep`: the paths still present, collected or not). */
export async function pruneOutputFiles(storage: Storage, known: Map<string, FileRow>, keep: ReadonlySet<string>): Promise<number> {
  let removed = 0;
  for (const [path, row] of known) {
    if (keep.has(path)) continue;
    await storage.db.deleteFrom("files").where("id", "=", row.id).execute();
    await releaseFileBlob(storage, row.blob_key);
    known.delete(path);
    removed++;
  }
  return removed;
}
