/**
 * A hostile-tree walker. The tree belongs to a sandbox we do not trust, so:
 * symlinks are never followed (recorded as data or refused), FIFOs, sockets
 * and devices are refused with a reason, names that are not UTF-8 are refused
 * (they could not round-trip through a JSON manifest), and entry count and
 * byte totals are bounded before anything is read. Files are later opened with
 * O_NOFOLLOW and checked against what the walk saw (`openVerified`), so a
 * path swapped for a symlink between the walk and the read is caught.
 */
import { closeSync, constants, open as fsOpen, read as fsRead, fstatSync, readlinkSync } from "node:fs";
import { type FileHandle, lstat, open, readdir, readlink, realpath } from "node:fs/promises";
import { join } from "node:path";
import { type Issue, IssueError } from "./issues.ts";
import { checkLogicalPath, decodeName, type PathLimits } from "./paths.ts";

export interface WalkLimits extends PathLimits {
  /** Directories, files and symlinks together. */
  maxEntries: number;
  maxFileBytes: number;
  maxTotalBytes: number;
}

/** What identifies one version of a file: any write changes ctime (ns), a replacement changes ino. */
export interface FileStamp {
  dev: bigint;
  ino: bigint;
  size: bigint;
  mtimeNs: bigint;
  ctimeNs: bigint;
}

export type TreeEntry =
  | { type: "dir"; path: string; mode: number }
  | { type: "file"; path: string; mode: number; size: number; stamp: FileStamp }
  | { type: "symlink"; path: string; target: string };

export interface WalkOptions {
  limits: WalkLimits;
  /** `record`: keep symlinks as entries (workspaces). `refuse`: an issue (outputs). */
  symlinks: "record" | "refuse";
}

export interface WalkResult {
  /** Sorted by path (UTF-16 code unit order, deterministic). */
  entries: TreeEntry[];
  issues: Issue[];
  /** A limit was hit and the walk stopped early: the entry list is incomplete. */
  truncated: boolean;
  /** Real path of the root, to which logical paths are joined. */
  root: string;
}

const BATCH = 64;

export async function walkTree(rootPath: string, opts: WalkOptions): Promise<WalkResult> {
  const root = await realpath(rootPath);
  const rootStat = await lstat(root);
  if (!rootStat.isDirectory()) {
    return { root, entries: [], issues: [{ code: "not_a_directory", path: "", message: "root is not a directory" }], truncated: true };
  }
  const state = { entries: [] as TreeEntry[], issues: [] as Issue[], totalBytes: 0, truncated: false };
  const stack: string[] = [""];
  while (stack.length > 0 && !state.truncated) {
    const dir = stack.pop()!;
    const children = await listDirectory(root, dir, state.issues);
    for (let i = 0; i < children.length && !state.truncated; i += BATCH) {
      const batch = children.slice(i, i + BATCH);
      const results = await Promise.all(batch.map((rel) => classify(root, rel, opts)));
      for (const r of results) {
        if ("code" in r) {
          state.issues.push(r);
          continue;
        }
        if (state.entries.length >= opts.limits.maxEntries) {
          state.issues.push({ code: "too_many_entries", path: r.path, message: `more than ${opts.limits.maxEntries} entries` });
          state.truncated = true;
          break;
        }
        state.entries.push(r);
        if (r.type === "dir") stack.push(r.path);
        if (r.type === "file") {
          state.totalBytes += r.size;
          if (state.totalBytes > opts.limits.maxTotalBytes) {
            state.issues.push({ code: "total_too_large", path: r.path, message: `total size exceeds ${opts.limits.maxTotalBytes} bytes` });
            state.truncated = true;
            break;
          }
        }
      }
    }
  }
  state.entries.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  return { root, entries: state.entries, issues: state.issues, truncated: state.truncated };
}

/** Child logical paths of one directory; refuses names that are not UTF-8 and directories swapped for links. */
async function listDirectory(root: string, dir: string, issues: Issue[]): Promise<string[]> {
  const abs = dir === "" ? root : join(root, dir);
  let raw: Buffer[];
  try {
    raw = await readdir(abs, { encoding: "buffer" });
    // readdir follows a symlink; if the directory was swapped for one after
    // the parent listing, its real path no longer matches: ignore its listing.
    if ((await realpath(abs)) !== abs) {
      issues.push({ code: "changed", path: dir, message: "directory was replaced while being walked" });
      return [];
    }
  } catch (err) {
    issues.push(fsIssue(dir, err));
    return [];
  }
  const out: string[] = [];
  for (const name of raw) {
    const decoded = decodeName(name);
    if (decoded === null) {
      issues.push({ code: "invalid_path", path: dir, message: `an entry name is not valid UTF-8 (${name.toString("hex")})` });
    } else {
      out.push(dir === "" ? decoded : `${dir}/${decoded}`);
    }
  }
  return out;
}

async function classify(root: string, rel: string, opts: WalkOptions): Promise<TreeEntry | Issue> {
  const bad = checkLogicalPath(rel, opts.limits);
  if (bad) return { code: "invalid_path", path: rel, message: bad };
  const abs = join(root, rel);
  try {
    const st = await lstat(abs, { bigint: true });
    const mode = Number(st.mode & 0o777n);
    if (st.isDirectory()) return { type: "dir", path: rel, mode };
    if (st.isFile()) {
      if (st.size > BigInt(opts.limits.maxFileBytes)) {
        return { code: "file_too_large", path: rel, message: `file is ${st.size} bytes, limit ${opts.limits.maxFileBytes}` };
      }
      return { type: "file", path: rel, mode, size: Number(st.size), stamp: stampOf(st) };
    }
    if (st.isSymbolicLink()) {
      const target = await readlink(abs);
      if (opts.symlinks === "refuse") return { code: "symlink", path: rel, message: `symbolic links are not allowed (-> ${target})` };
      return { type: "symlink", path: rel, target };
    }
    return { code: "special_file", path: rel, message: `${kindOf(st)} is not a regular file or directory` };
  } catch (err) {
    return fsIssue(rel, err);
  }
}

function kindOf(st: { isFIFO(): boolean; isSocket(): boolean; isBlockDevice(): boolean }): string {
  if (st.isFIFO()) return "a FIFO";
  if (st.isSocket()) return "a socket";
  if (st.isBlockDevice()) return "a block device";
  return "a character device";
}

export function fsIssue(path: string, err: unknown): Issue {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === "ENOENT") return { code: "changed", path, message: "entry disappeared while being read" };
  if (code === "ELOOP") return { code: "changed", path, message: "entry was replaced by a symbolic link while being read" };
  return { code: "unreadable", path, message: `cannot read entry (${code ?? (err as Error).message})` };
}

export function stampOf(st: { dev: bigint; ino: bigint; size: bigint; mtimeNs: bigint; ctimeNs: bigint }): FileStamp {
  return { dev: st.dev, ino: st.ino, size: st.size, mtimeNs: st.mtimeNs, ctimeNs: st.ctimeNs };
}

export function sameStamp(a: FileStamp, b: FileStamp): boolean {
  return a.dev === b.dev && a.ino === b.ino && a.size === b.size && a.mtimeNs === b.mtimeNs && a.ctimeNs === b.ctimeNs;
}

/** A human explanation of how a file changed between two stamps. */
export function describeChange(before: FileStamp, after: FileStamp): string {
  if (before.ino !== after.ino || before.dev !== after.dev) return "file was replaced while being read";
  if (after.size > before.size) return `file grew from ${before.size} to ${after.size} bytes while being read`;
  if (after.size < before.size) return `file shrank from ${before.size} to ${after.size} bytes while being read`;
  return "file was modified while being read";
}

const procFd = process.platform === "linux";

/**
 * A walked file opened for reading, by raw descriptor. Only `open` and `read`
 * go through the thread pool (they may wait on the disk); `fstat`, the
 * `/proc/self/fd` readlink and `close` of a read-only descriptor only touch
 * kernel memory, and run synchronously: a thread-pool round trip costs about
 * ten times the system call itself, and these were most of a many-file
 * checkpoint's profile (docs/benchmarks.md, "fewer round trips").
 */
export class VerifiedFile {
  private closed = false;

  constructor(readonly fd: number) {}

  /** Reads into `buf` at `offset`; `position` null reads on from the current offset. */
  read(buf: Uint8Array, offset: number, length: number, position: number | null = null): Promise<number> {
    return new Promise((resolve, reject) => {
      fsRead(this.fd, buf, offset, length, position, (err, bytesRead) => (err ? reject(err) : resolve(bytesRead)));
    });
  }

  stamp(): FileStamp {
    return stampOf(fstatSync(this.fd, { bigint: true }));
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    closeSync(this.fd);
  }
}

function openFd(path: string, flags: number): Promise<number> {
  return new Promise((resolve, reject) => fsOpen(path, flags, (err, fd) => (err ? reject(err) : resolve(fd))));
}

/** Walked files are opened read-only, never through a final symlink, never blocking on a FIFO swapped in. */
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/**
 * Opens a walked file without following links and proves it is the same inode
 * at the same real location the walk saw. On Linux `/proc/self/fd` names what
 * the descriptor really points at, which also catches a parent directory that
 * was swapped for a symlink after the walk.
 */
export function openVerified(root: string, entry: Extract<TreeEntry, { type: "file" }>): Promise<FileHandle> {
  return openChecked(
    root,
    entry,
    (abs) => open(abs, OPEN_FLAGS),
    (fh) => fh.close(),
  );
}

/** `openVerified` by raw descriptor, for the checkpoint's hot loop (see `VerifiedFile`). */
export function openVerifiedFile(root: string, entry: Extract<TreeEntry, { type: "file" }>): Promise<VerifiedFile> {
  return openChecked(
    root,
    entry,
    async (abs) => new VerifiedFile(await openFd(abs, OPEN_FLAGS)),
    (file) => file.close(),
  );
}

async function openChecked<T extends { fd: number }>(
  root: string,
  entry: Extract<TreeEntry, { type: "file" }>,
  openIt: (abs: string) => Promise<T>,
  close: (opened: T) => Promise<void> | void,
): Promise<T> {
  const abs = join(root, entry.path);
  let opened: T;
  try {
    opened = await openIt(abs);
  } catch (err) {
    throw new IssueError(fsIssue(entry.path, err));
  }
  try {
    await verifyOpened(opened.fd, abs, entry);
    return opened;
  } catch (err) {
    await close(opened);
    throw err;
  }
}

async function verifyOpened(fd: number, abs: string, entry: Extract<TreeEntry, { type: "file" }>): Promise<void> {
  try {
    const st = fstatSync(fd, { bigint: true });
    if (!st.isFile()) throw new IssueError({ code: "changed", path: entry.path, message: "entry is no longer a regular file" });
    const now = stampOf(st);
    if (now.dev !== entry.stamp.dev || now.ino !== entry.stamp.ino) {
      throw new IssueError({ code: "changed", path: entry.path, message: "file was replaced after it was listed" });
    }
    const real = (procFd ? procPath(fd) : null) ?? (await realpath(abs));
    if (real === `${abs} (deleted)`)
      throw new IssueError({ code: "changed", path: entry.path, message: "file was deleted while being read" });
    if (real !== abs) throw new IssueError({ code: "symlink_escape", path: entry.path, message: "file resolves outside its tree" });
    // Freed inode numbers are reused at once, so a replacement can keep the inode: ctime still tells.
    if (!sameStamp(now, entry.stamp))
      throw new IssueError({ code: "changed", path: entry.path, message: describeChange(entry.stamp, now) });
  } catch (err) {
    throw err instanceof IssueError ? err : new IssueError(fsIssue(entry.path, err));
  }
}

/** What the descriptor points at, or null where /proc is not mounted (then realpath answers). */
function procPath(fd: number): string | null {
  try {
    return readlinkSync(`/proc/self/fd/${fd}`);
  } catch {
    return null;
  }
}
