/**
 * Read-only access to a session's host workspace directory on behalf of the
 * console. The tree is written by a sandbox we do not trust, so a requested
 * path is opened component by component, each relative to its already-open
 * parent (`/proc/self/fd/<fd>/<name>` with O_NOFOLLOW): a symlink anywhere on
 * the path (or swapped in mid-walk) refuses the request instead of leading
 * out of the tree, `..` and `.` segments are refused before anything is
 * opened, and only directories and regular files are served (FIFOs are opened
 * non-blocking and refused after fstat, so they never stall the server).
 */
import { constants, type Stats } from "node:fs";
import { type FileHandle, lstat, open, opendir } from "node:fs/promises";
import { ApiError, badRequest } from "./errors.ts";

const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK } = constants;

export const MAX_WORKSPACE_PATH_BYTES = 4096;
export const MAX_LISTING_ENTRIES = 1000;

export type WorkspaceEntryType = "file" | "directory" | "symlink" | "other";

export interface WorkspaceEntry {
  name: string;
  path: string;
  type: WorkspaceEntryType;
  size_bytes: number;
  modified_at: string;
}

export type Opened = { type: "directory"; fh: FileHandle; path: string } | { type: "file"; fh: FileHandle; path: string; stat: Stats };

/** The path's segments (`""` or `/` is the root); traversal and odd bytes are a 400 before any open. */
export function workspaceSegments(raw: string | undefined): string[] {
  const path = raw ?? "";
  if (Buffer.byteLength(path) > MAX_WORKSPACE_PATH_BYTES) throw badRequest(`path: at most ${MAX_WORKSPACE_PATH_BYTES} bytes`);
  if (/\p{Cc}/u.test(path)) throw badRequest("path: must not contain control characters");
  const segments = path.split("/").filter((s) => s !== "");
  if (segments.some((s) => s === "." || s === ".."))
    throw badRequest("path: must be relative to the workspace, without `.` or `..` segments", { error_code: "path_traversal" });
  return segments;
}

const notFoundPath = (path: string) =>
  new ApiError(404, "not_found_error", `no such file or directory in the workspace: ${JSON.stringify(path)}`);

const refused = (path: string, why: string) => badRequest(`${JSON.stringify(path)} ${why}`, { error_code: "path_refused" });

/** Opens `segments` under `root` without ever following a link. The caller closes `fh`. */
export async function openInWorkspace(root: string, segments: string[]): Promise<Opened> {
  const path = segments.join("/");
  let fh: FileHandle;
  try {
    fh = await open(root, O_RDONLY | O_DIRECTORY);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") throw notFoundPath(path);
    throw err;
  }
  for (let i = 0; i < segments.length; i++) {
    const next = `/proc/self/fd/${fh.fd}/${segments[i]}`;
    try {
      const child = await open(next, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
      await fh.close();
      fh = child;
    } catch (err) {
      await fh.close();
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ENOENT" || code === "ENOTDIR") throw notFoundPath(path);
      // ELOOP: O_NOFOLLOW met a symlink. Its target belongs to the sandbox's view, never the server's.
      if (code === "ELOOP")
        throw refused(segments.slice(0, i + 1).join("/"), "is a symbolic link, which the workspace browser does not follow");
      throw err;
    }
    const st = await fh.stat();
    const last = i === segments.length - 1;
    if (st.isDirectory()) continue;
    if (!last) {
      await fh.close();
      throw notFoundPath(path);
    }
    if (st.isFile()) return { type: "file", fh, path, stat: st };
    await fh.close();
    throw refused(path, "is not a regular file or directory");
  }
  return { type: "directory", fh, path };
}

/**
 * The directory's entries sorted by name: at most MAX_LISTING_ENTRIES, read
 * one by one (a sandbox's directory of millions of names is never read whole);
 * `truncated` says when more exist, and then which ones are shown is the
 * directory's own order.
 */
export async function listOpenDirectory(
  dir: Extract<Opened, { type: "directory" }>,
): Promise<{ entries: WorkspaceEntry[]; truncated: boolean }> {
  const base = `/proc/self/fd/${dir.fh.fd}`;
  const names: string[] = [];
  let truncated = false;
  for await (const entry of await opendir(base)) {
    if (names.length === MAX_LISTING_ENTRIES) {
      truncated = true;
      break;
    }
    names.push(entry.name);
  }
  const shown = names.sort();
  const entries: WorkspaceEntry[] = [];
  for (const name of shown) {
    // lstat: a link is described as a link, never as what it points at.
    const st = await lstat(`${base}/${name}`).catch(() => null);
    if (!st) continue;
    entries.push({
      name,
      path: dir.path === "" ? name : `${dir.path}/${name}`,
      type: st.isSymbolicLink() ? "symlink" : st.isDirectory() ? "directory" : st.isFile() ? "file" : "other",
      size_bytes: st.isFile() ? st.size : 0,
      modified_at: st.mtime.toISOString(),
    });
  }
  return { entries, truncated };
}
