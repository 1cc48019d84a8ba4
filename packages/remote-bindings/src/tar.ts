/**
 * Trees to and from tar archives, the one format every sandbox image can
 * read and write (`tar -c`, `tar -x`). Packing walks a host directory the
 * host owns. Extraction takes an archive a sandbox produced, so it is
 * hostile input: names are confined to the target (no absolute paths, no
 * `..`, no writing through a symlink or over a directory), only regular
 * files, directories and symlinks are kept (a symlink is recorded, never
 * followed), modes lose setuid/setgid/sticky, and entry count and total
 * size are bounded. What the checkpoint walker and the output collector
 * then refuse (escaping symlinks, oversized files) they refuse with their
 * own reasons, exactly as for a local sandbox's tree.
 */
import { constants } from "node:fs";
import { lstat, mkdir, open, readdir, readFile, readlink, rm, symlink } from "node:fs/promises";
import { join } from "node:path";
import { type Header, type Pack, extract as tarExtract, pack as tarPack } from "tar-stream";

export interface ExtractLimits {
  maxEntries: number;
  maxBytes: number;
}

export const DEFAULT_EXTRACT_LIMITS: ExtractLimits = { maxEntries: 200_000, maxBytes: 2 * 1024 * 1024 * 1024 };

export type ExtractResult = { ok: true; files: number; bytes: number; skipped: string[] } | { ok: false; error: string };

/** A tar of `dir`'s contents (relative names, uid/gid 0); symlinks are stored as links. */
export async function packDirectory(dir: string): Promise<Buffer> {
  const pack = tarPack();
  const chunks: Buffer[] = [];
  const ended = (async () => {
    for await (const chunk of pack) chunks.push(Buffer.from(chunk as Uint8Array));
  })();
  const walk = async (relative: string): Promise<void> => {
    const names = (await readdir(join(dir, relative))).sort();
    for (const name of names) {
      const path = relative === "" ? name : `${relative}/${name}`;
      const st = await lstat(join(dir, path));
      const header = { name: path, mode: st.mode & 0o777, mtime: st.mtime, uid: 0, gid: 0 };
      if (st.isSymbolicLink()) await entry(pack, { ...header, type: "symlink", linkname: await readlink(join(dir, path)) });
      else if (st.isDirectory()) {
        await entry(pack, { ...header, type: "directory" });
        await walk(path);
      } else if (st.isFile()) await entry(pack, { ...header, type: "file", size: st.size }, await readFile(join(dir, path)));
    }
  };
  await walk("");
  pack.finalize();
  await ended;
  return Buffer.concat(chunks);
}

function entry(pack: Pack, header: Partial<Header> & { name: string }, body?: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = (err?: Error | null) => (err ? reject(err) : resolve());
    if (body === undefined) pack.entry(header, done);
    else pack.entry(header, body, done);
  });
}

/** The confined relative name of an entry, or null when it must be refused. */
export function entryName(raw: string): string | null {
  if (raw.includes("\0")) return null;
  const name = raw.replace(/^(\.\/)+/, "").replace(/\/+$/, "");
  if (name === "" || name === ".") return "";
  if (name.startsWith("/")) return null;
  const parts = name.split("/");
  if (parts.some((part) => part === ".." || part === "" || part === ".")) return null;
  return parts.join("/");
}

/** Every ancestor of `name` inside `root` is a real directory (created when missing); false when one is not. */
async function ensureParents(root: string, name: string): Promise<boolean> {
  const parts = name.split("/").slice(0, -1);
  let current = root;
  for (const part of parts) {
    current = join(current, part);
    const st = await lstat(current).catch(() => null);
    if (st === null) await mkdir(current, { mode: 0o755 });
    else if (!st.isDirectory()) return false;
  }
  return true;
}

/** Unpacks `archive` into the existing directory `root` under the rules above. */
export async function extractInto(
  archive: Uint8Array,
  root: string,
  limits: ExtractLimits = DEFAULT_EXTRACT_LIMITS,
): Promise<ExtractResult> {
  const extract = tarExtract();
  extract.end(Buffer.from(archive));
  const state = { files: 0, bytes: 0, entries: 0, skipped: [] as string[] };
  try {
    for await (const item of extract) {
      const body: Buffer[] = [];
      for await (const chunk of item) body.push(Buffer.from(chunk as Uint8Array));
      await place(item.header, Buffer.concat(body), root, limits, state);
    }
  } catch (err) {
    return { ok: false, error: err instanceof Error ? err.message : String(err) };
  }
  return { ok: true, files: state.files, bytes: state.bytes, skipped: state.skipped };
}

/** Writes one entry, or throws why the archive is refused. */
async function place(
  header: Header,
  content: Buffer,
  root: string,
  limits: ExtractLimits,
  state: { files: number; bytes: number; entries: number; skipped: string[] },
): Promise<void> {
  state.entries++;
  if (state.entries > limits.maxEntries) throw new Error(`more than ${limits.maxEntries} entries`);
  const name = entryName(header.name);
  if (name === null) throw new Error(`refused entry name ${JSON.stringify(header.name)}`);
  if (name === "") return;
  if (!(await ensureParents(root, name))) throw new Error(`entry ${JSON.stringify(name)} would be written through a non-directory`);
  const target = join(root, ...name.split("/"));
  const existing = await lstat(target).catch(() => null);
  const mode = (header.mode ?? 0o644) & 0o777;
  if (header.type === "directory") {
    if (existing === null) await mkdir(target, { mode: mode | 0o700 });
    else if (!existing.isDirectory()) throw new Error(`entry ${JSON.stringify(name)} is both a directory and something else`);
    return;
  }
  if (existing?.isDirectory()) throw new Error(`entry ${JSON.stringify(name)} would replace a directory`);
  if (header.type === "symlink") {
    if (existing !== null) await rm(target);
    await symlink(header.linkname ?? "", target);
    return;
  }
  if (header.type !== "file" && header.type !== "contiguous-file") {
    state.skipped.push(name);
    return;
  }
  state.bytes += content.length;
  if (state.bytes > limits.maxBytes) throw new Error(`more than ${limits.maxBytes} bytes`);
  if (existing !== null) await rm(target);
  // O_EXCL | O_NOFOLLOW: a name that appeared in the meantime is never written through.
  const file = await open(target, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
  try {
    await file.writeFile(content);
  } finally {
    await file.close();
  }
  state.files++;
}

/** Empties `dir` (keeping `dir` itself) before a fresh extraction. */
export async function emptyDirectory(dir: string): Promise<void> {
  await mkdir(dir, { recursive: true });
  for (const name of await readdir(dir)) await rm(join(dir, name), { recursive: true, force: true });
}
