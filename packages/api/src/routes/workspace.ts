/**
 * OpenMA extension (docs/api.md): browse a session's workspace files, for
 * the console. `GET /v1/sessions/{id}/workspace?path=` lists a directory and
 * `GET /v1/sessions/{id}/workspace/content?path=` streams a regular file
 * (bounded buffers, a transfer slot, backpressure from the client). API key
 * only. Available where the server knows the session's workspace as a host
 * directory (`openma serve` with a local sandbox); elsewhere a 404 says so.
 * Hostile paths are refused by workspace-fs.ts.
 */
import { basename } from "node:path";
import { Readable } from "node:stream";
import type { Context } from "hono";
import { Hono } from "hono";
import { requireCredential } from "../auth.ts";
import type { AppEnv } from "../context.ts";
import { ApiError, notFound } from "../errors.ts";
import { workspaceQuery } from "../schemas/workspace.ts";
import { transferSettings } from "../transfers.ts";
import { contentDisposition } from "../uploads.ts";
import { pathId } from "../util.ts";
import { parseQuery } from "../validate.ts";
import { listOpenDirectory, openInWorkspace, workspaceSegments } from "../workspace-fs.ts";

/** The session's workspace root on this host, after checking the caller and the session. */
async function workspaceRoot(c: Context<AppEnv>): Promise<string> {
  requireCredential(c, "api_key");
  const id = pathId(c, "session_id");
  const deps = c.get("deps");
  const row = await deps.storage.db.selectFrom("sessions").select("id").where("id", "=", id).executeTakeFirst();
  if (!row) throw notFound("session", id);
  const root = deps.workspaces?.dirOf(id);
  if (!root) throw new ApiError(404, "not_found_error", "this server holds no browsable workspace for this session");
  return root;
}

export function workspaceRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();

  r.get("/:session_id/workspace", async (c) => {
    const root = await workspaceRoot(c);
    const segments = workspaceSegments(parseQuery(c, workspaceQuery).path);
    let opened: Awaited<ReturnType<typeof openInWorkspace>>;
    try {
      opened = await openInWorkspace(root, segments);
    } catch (err) {
      // No sandbox has run yet: an empty root, not an error.
      if (segments.length === 0 && err instanceof ApiError && err.status === 404) {
        return c.json({ type: "workspace_listing", path: "", entries: [], truncated: false });
      }
      throw err;
    }
    try {
      if (opened.type === "file")
        throw new ApiError(400, "invalid_request_error", `${JSON.stringify(opened.path)} is a file: use /workspace/content`);
      const listing = await listOpenDirectory(opened);
      return c.json({ type: "workspace_listing", path: opened.path, ...listing });
    } finally {
      await opened.fh.close();
    }
  });

  r.get("/:session_id/workspace/content", async (c) => {
    const root = await workspaceRoot(c);
    const opened = await openInWorkspace(root, workspaceSegments(parseQuery(c, workspaceQuery).path));
    if (opened.type === "directory") {
      await opened.fh.close();
      throw new ApiError(400, "invalid_request_error", `${JSON.stringify(opened.path)} is a directory: list it with /workspace`);
    }
    const settings = transferSettings(c);
    let release: (() => void) | undefined;
    try {
      release = settings.slots.acquire();
      // Never more than the size the file had when opened: a file growing while it is sent is cut there.
      const size = opened.stat.size;
      const body =
        size === 0 ? Readable.from([]) : opened.fh.createReadStream({ start: 0, end: size - 1, highWaterMark: settings.bufferBytes });
      const done = release;
      body.once("close", () => {
        done();
        void opened.fh.close().catch(() => undefined);
      });
      return c.body(Readable.toWeb(body) as unknown as ReadableStream<Uint8Array>, 200, {
        "content-type": "application/octet-stream",
        "content-length": String(size),
        "content-disposition": contentDisposition(basename(opened.path)),
        "x-content-type-options": "nosniff",
      });
    } catch (err) {
      release?.();
      await opened.fh.close();
      throw err;
    }
  });

  return r;
}
