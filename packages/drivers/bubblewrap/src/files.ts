/**
 * File operations on a sandbox's filesystem, done by the host on the bound
 * host directories (no process is started), with sandbox semantics.
 *
 * The danger of host-side file access is the sandbox's own symlinks: a link
 * `/workspace/x -> /etc/shadow` must mean the sandbox's `/etc/shadow` (which
 * does not exist), never the host's. So paths are resolved here, component
 * by component, against the runtime's mount table:
 * - each directory is opened relative to its already-open parent
 *   (`/proc/self/fd/<fd>/<name>` with O_NOFOLLOW), so a sandbox process that
 *   swaps a directory for a symlink mid-walk makes the open fail instead of
 *   redirecting it;
 * - a symlink is read and its target resolved again in sandbox space
 *   (absolute targets restart at the sandbox root; at most 40 links);
 * - paths outside every mount (the host's real `/etc`, `/root`, ...) do not
 *   exist; writes are allowed only inside writable mounts.
 * Files the host creates are chowned to the sandbox's host identity so the
 * sandboxed user owns them.
 */

import { randomBytes } from "node:crypto";
import { constants, type Stats, statSync } from "node:fs";
import { type FileHandle, lchown, lstat, mkdir, open, readdir, readlink, rename, rm } from "node:fs/promises";
import type { EntryKind, ListEntry, ListResult, ReadFileResult, StatResult, WriteFileResult } from "@openma/contract";
import type { MountEntry } from "./layout.ts";

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK } = constants;
const MAX_SYMLINKS = 40;

type BindEntry = Extract<MountEntry, { kind: "bind" }>;

/** One directory on the walk: bwrap's own tmpfs (`synthetic`) or a real directory inside a bind. */
type Frame = { name: string; fd: FileHandle | null; mount: BindEntry | null };

type Found =
  /** The walk ended on a directory (the top frame). */
  | { type: "dir"; path: string; frame: Frame }
  /** A non-directory inside a bound directory. */
  | { type: "leaf"; path: string; parent: Frame; name: string; stat: Stats }
  /** A file bound directly (e.g. the synthesized /etc/passwd). */
  | { type: "mount_file"; path: string; mount: BindEntry }
  /** Only when not following the last component. */
  | { type: "link"; path: string; parent: Frame | null; name: string; link: string; stat: Stats | null }
  /** The last component does not exist; `parent` can hold it if it is a real directory. */
  | { type: "missing"; path: string; parent: Frame; name: string };

type Walk = { ok: true; found: Found; release: () => Promise<void> } | { ok: false; error: "not_found" | string };

function errno(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException).code;
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function kindOf(st: Stats): EntryKind {
  if (st.isSymbolicLink()) return "symlink";
  if (st.isFile()) return "file";
  if (st.isDirectory()) return "directory";
  return "other";
}

const at = (frame: Frame, name: string) => `/proc/self/fd/${(frame.fd as FileHandle).fd}/${name}`;
const join = (parent: string, name: string) => (parent === "/" ? `/${name}` : `${parent}/${name}`);

export class SandboxFs {
  readonly #binds: Map<string, BindEntry>;
  readonly #links: Map<string, string>;
  /** Every ancestor of a mount target: the directories bwrap creates in its own root. */
  readonly #synthetic: Map<string, Set<string>>;

  constructor(
    mounts: readonly MountEntry[],
    private readonly owner: { uid: number; gid: number } | null,
  ) {
    this.#binds = new Map();
    this.#links = new Map();
    this.#synthetic = new Map([["/", new Set()]]);
    for (const entry of mounts) {
      if (entry.kind === "bind") this.#binds.set(entry.target, entry);
      else this.#links.set(entry.target, entry.link);
      const parts = entry.target.split("/").slice(1);
      for (let i = 0; i < parts.length; i++) {
        const parent = `/${parts.slice(0, i).join("/")}`;
        if (!this.#synthetic.has(parent)) this.#synthetic.set(parent, new Set());
        this.#synthetic.get(parent)?.add(parts[i] as string);
      }
    }
  }

  /**
   * Resolves an absolute sandbox path. `create` makes missing intermediate
   * directories (inside writable mounts) on the way, like `mkdir -p`.
   */
  async #walk(path: string, followLast: boolean, create = false): Promise<Walk> {
    if (!path.startsWith("/") || path.includes("\0")) return { ok: false, error: `path ${JSON.stringify(path)} is not absolute` };
    const stack: Frame[] = [{ name: "", fd: null, mount: null }];
    const closeFrom = async (depth: number) => {
      for (const frame of stack.splice(depth)) await frame.fd?.close();
    };
    const fail = async (error: string): Promise<Walk> => {
      await closeFrom(0);
      return { ok: false, error };
    };
    const pending = path.split("/");
    let links = 0;
    try {
      while (pending.length > 0) {
        const name = pending.shift() as string;
        if (name === "" || name === ".") continue;
        if (name === "..") {
          if (stack.length > 1) await closeFrom(stack.length - 1);
          continue;
        }
        const isLast = pending.every((rest) => rest === "" || rest === ".");
        const top = stack[stack.length - 1] as Frame;
        const current = `/${stack
          .slice(1)
          .map((frame) => frame.name)
          .join("/")}`;
        const childPath = join(current, name);
        const step = await this.#step(top, current, name, childPath, create && !isLast);
        if (step.type === "push") {
          stack.push(step.frame);
          continue;
        }
        if (step.type === "link") {
          if (isLast && !followLast) {
            const found: Found = { type: "link", path: childPath, parent: top.fd ? top : null, name, link: step.link, stat: step.stat };
            return this.#done(found, stack, top);
          }
          if (++links > MAX_SYMLINKS) return fail(`too many levels of symbolic links in ${JSON.stringify(path)}`);
          pending.unshift(...step.link.split("/"));
          if (step.link.startsWith("/")) await closeFrom(1);
          continue;
        }
        if (!isLast) return fail("not_found");
        if (step.type === "leaf") return this.#done({ type: "leaf", path: childPath, parent: top, name, stat: step.stat }, stack, top);
        if (step.type === "mount_file") return this.#done({ type: "mount_file", path: childPath, mount: step.mount }, stack, null);
        if (top.fd === null) return fail("not_found");
        return this.#done({ type: "missing", path: childPath, parent: top, name }, stack, top);
      }
      const top = stack[stack.length - 1] as Frame;
      const dirPath = `/${stack
        .slice(1)
        .map((frame) => frame.name)
        .join("/")}`;
      return this.#done({ type: "dir", path: dirPath, frame: top }, stack, top);
    } catch (err) {
      if (errno(err) === "ENOENT" || errno(err) === "ENOTDIR") return fail("not_found");
      // ELOOP from O_NOFOLLOW: a component turned into a symlink after we looked at it.
      return fail(message(err));
    }
  }

  /** Closes every frame except `keep`, whose handle the caller releases when done. */
  #done(found: Found, stack: Frame[], keep: Frame | null): Walk {
    const others = stack.filter((frame) => frame !== keep);
    const release = async () => {
      for (const frame of others) await frame.fd?.close();
      await keep?.fd?.close();
    };
    return { ok: true, found, release };
  }

  async #step(
    top: Frame,
    current: string,
    name: string,
    childPath: string,
    create: boolean,
  ): Promise<
    | { type: "push"; frame: Frame }
    | { type: "link"; link: string; stat: Stats | null }
    | { type: "leaf"; stat: Stats }
    | { type: "mount_file"; mount: BindEntry }
    | { type: "missing" }
  > {
    // Mounts hide whatever is underneath them, so they are checked first.
    const bind = this.#binds.get(childPath);
    if (bind) {
      if (bind.type === "file") return { type: "mount_file", mount: bind };
      return { type: "push", frame: { name, fd: await open(bind.source, O_RDONLY | O_DIRECTORY), mount: bind } };
    }
    const link = this.#links.get(childPath);
    if (link !== undefined) return { type: "link", link, stat: null };
    if (top.fd === null) {
      if (this.#synthetic.get(current)?.has(name)) return { type: "push", frame: { name, fd: null, mount: null } };
      return { type: "missing" };
    }
    let st: Stats;
    try {
      st = await lstat(at(top, name));
    } catch (err) {
      if (errno(err) !== "ENOENT") throw err;
      if (!create || !top.mount?.writable) return { type: "missing" };
      await mkdir(at(top, name), { mode: 0o755 });
      await this.#chown(at(top, name));
      st = await lstat(at(top, name));
    }
    if (st.isSymbolicLink()) return { type: "link", link: await readlink(at(top, name)), stat: st };
    if (!st.isDirectory()) return { type: "leaf", stat: st };
    return { type: "push", frame: { name, fd: await open(at(top, name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW), mount: top.mount } };
  }

  async #chown(hostPath: string): Promise<void> {
    if (this.owner) await lchown(hostPath, this.owner.uid, this.owner.gid);
  }

  async stat(path: string): Promise<StatResult> {
    const walk = await this.#walk(path, false);
    if (!walk.ok) return walk.error === "not_found" ? { type: "not_found" } : { type: "error", message: walk.error };
    const { found } = walk;
    let result: StatResult;
    try {
      result = await this.#statFound(found);
    } catch (err) {
      result = errno(err) === "ENOENT" ? { type: "not_found" } : { type: "error", message: message(err) };
    } finally {
      await walk.release();
    }
    if (result.type !== "found") return result;
    // realPath follows every link, including the leaf; a dangling leaf keeps its own path.
    const real = await this.#walk(path, true);
    if (real.ok) {
      await real.release();
      return { ...result, realPath: real.found.path };
    }
    return result;
  }

  async #statFound(found: Found): Promise<StatResult> {
    switch (found.type) {
      case "dir": {
        const st = found.frame.fd ? await found.frame.fd.stat() : null;
        return { type: "found", kind: "directory", size: st?.size ?? 0, mtimeMs: st?.mtimeMs ?? 0, realPath: found.path };
      }
      case "leaf":
        return { type: "found", kind: kindOf(found.stat), size: found.stat.size, mtimeMs: found.stat.mtimeMs, realPath: found.path };
      case "mount_file": {
        const st = statSync(found.mount.source);
        return { type: "found", kind: "file", size: st.size, mtimeMs: st.mtimeMs, realPath: found.path };
      }
      case "link":
        return {
          type: "found",
          kind: "symlink",
          size: found.stat?.size ?? found.link.length,
          mtimeMs: found.stat?.mtimeMs ?? 0,
          realPath: found.path,
        };
      case "missing":
        return { type: "not_found" };
    }
  }

  async readFile(path: string, maxBytes: number, signal: AbortSignal): Promise<ReadFileResult> {
    const walk = await this.#walk(path, true);
    if (!walk.ok) return walk.error === "not_found" ? { type: "not_found" } : { type: "error", message: walk.error };
    const { found } = walk;
    try {
      if (found.type === "missing") return { type: "not_found" };
      if (found.type === "dir") return { type: "not_a_file", kind: "directory" };
      if (found.type === "link") return { type: "error", message: "unresolved symbolic link" };
      const hostPath = found.type === "leaf" ? at(found.parent, found.name) : found.mount.source;
      // O_NONBLOCK: opening a FIFO the sandbox planted must not hang the host.
      const handle = await open(hostPath, O_RDONLY | O_NONBLOCK | (found.type === "leaf" ? O_NOFOLLOW : 0));
      try {
        const st = await handle.stat();
        if (!st.isFile()) return { type: "not_a_file", kind: kindOf(st) };
        if (st.size > maxBytes) return { type: "too_large", size: st.size };
        const content = await handle.readFile({ signal });
        if (content.length > maxBytes) return { type: "too_large", size: content.length };
        return { type: "ok", content, size: content.length };
      } finally {
        await handle.close();
      }
    } catch (err) {
      if (errno(err) === "ENOENT") return { type: "not_found" };
      return { type: "error", message: message(err) };
    } finally {
      await walk.release();
    }
  }

  /** Atomic replace inside a writable mount; missing parents are created; an existing file keeps its mode. */
  async writeFile(path: string, content: Uint8Array, mode: number | undefined, signal: AbortSignal): Promise<WriteFileResult> {
    const walk = await this.#walk(path, false, true);
    if (!walk.ok) return { type: "error", message: walk.error === "not_found" ? `${JSON.stringify(path)}: no such directory` : walk.error };
    const { found } = walk;
    try {
      if (found.type === "dir") return { type: "error", message: `${JSON.stringify(path)} is a directory` };
      if (found.type === "mount_file") return { type: "error", message: `${JSON.stringify(path)} is a read-only mount` };
      const parent = found.parent;
      if (parent === null || parent.mount === null || !parent.mount.writable) {
        return { type: "error", message: `${JSON.stringify(path)} is on a read-only file system` };
      }
      const name = found.name;
      const existingMode = found.type === "leaf" && found.stat.isFile() ? found.stat.mode & 0o7777 : undefined;
      const temp = `.${name.slice(0, 200)}.${randomBytes(6).toString("hex")}.tmp`;
      const handle = await open(at(parent, temp), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, existingMode ?? mode ?? 0o600);
      try {
        try {
          if (this.owner) await handle.chown(this.owner.uid, this.owner.gid);
          await handle.chmod(existingMode ?? mode ?? 0o600);
          await handle.writeFile(content, { signal });
          await handle.sync();
        } finally {
          await handle.close();
        }
        // rename replaces a symlink at the target itself, never the file it points to.
        await rename(at(parent, temp), at(parent, name));
      } catch (err) {
        await rm(at(parent, temp), { force: true }).catch(() => {});
        throw err;
      }
      return { type: "ok", bytes: content.length };
    } catch (err) {
      return { type: "error", message: message(err) };
    } finally {
      await walk.release();
    }
  }

  async list(input: {
    path: string;
    recursive: boolean;
    maxEntries: number;
    skipDirNames?: readonly string[];
    signal: AbortSignal;
  }): Promise<ListResult> {
    const walk = await this.#walk(input.path, true);
    if (!walk.ok) return walk.error === "not_found" ? { type: "not_found" } : { type: "error", message: walk.error };
    const { found } = walk;
    try {
      if (found.type === "missing") return { type: "not_found" };
      if (found.type !== "dir") return { type: "error", message: `${JSON.stringify(input.path)} is not a directory` };
      return await this.#listFrom(found.path, found.frame, input);
    } catch (err) {
      return { type: "error", message: message(err) };
    } finally {
      await walk.release();
    }
  }

  async #listFrom(
    rootPath: string,
    root: Frame,
    input: { recursive: boolean; maxEntries: number; skipDirNames?: readonly string[]; signal: AbortSignal },
  ): Promise<ListResult> {
    const skip = new Set(input.skipDirNames ?? []);
    const entries: ListEntry[] = [];
    if (root.fd === null) {
      // bwrap's own directories hold only mount points; list them without descending into mounts.
      for (const name of [...(this.#synthetic.get(rootPath) ?? [])].sort()) {
        if (entries.length >= input.maxEntries) return { type: "ok", entries, truncated: true };
        const path = join(rootPath, name);
        const kind: EntryKind = this.#links.has(path) ? "symlink" : this.#binds.get(path)?.type === "file" ? "file" : "directory";
        entries.push({ path, kind, size: 0, mtimeMs: 0 });
      }
      return { type: "ok", entries, truncated: false };
    }
    // Directories are reopened from the root by name, one component at a time, so no open handle is held per queued directory.
    const pending: string[][] = [[]];
    while (pending.length > 0) {
      if (input.signal.aborted) return { type: "error", message: "aborted" };
      const rel = pending.shift() as string[];
      const dir = await this.#openRelative(root, rel);
      if (dir === null) continue; // vanished or turned into a link since it was listed
      try {
        const names = (await readdir(`/proc/self/fd/${dir.fd}`)).sort();
        for (const name of names) {
          const st = await lstat(`/proc/self/fd/${dir.fd}/${name}`).catch(() => null);
          if (!st) continue;
          const kind = kindOf(st);
          if (kind === "directory" && skip.has(name)) continue;
          if (entries.length >= input.maxEntries) return { type: "ok", entries, truncated: true };
          entries.push({ path: [rootPath, ...rel, name].join("/").replace(/^\/\//, "/"), kind, size: st.size, mtimeMs: st.mtimeMs });
          if (kind === "directory" && input.recursive) pending.push([...rel, name]);
        }
      } finally {
        if (dir !== root.fd) await dir.close();
      }
    }
    return { type: "ok", entries, truncated: false };
  }

  async #openRelative(root: Frame, rel: readonly string[]): Promise<FileHandle | null> {
    let current = root.fd as FileHandle;
    for (const name of rel) {
      try {
        const next = await open(`/proc/self/fd/${current.fd}/${name}`, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
        if (current !== root.fd) await current.close();
        current = next;
      } catch {
        if (current !== root.fd) await current.close();
        return null;
      }
    }
    return current;
  }
}

/** Gives a directory tree to the sandbox's host identity (shared with the Docker driver). */
export { chownTree } from "@openma/driver-kit/chown-tree";
