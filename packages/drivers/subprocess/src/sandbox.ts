/**
 * A ToolSandboxPort backed by host child processes in one directory.
 *
 * TEST ONLY: nothing here isolates anything. Processes run as the server's
 * user on the server's host; only the file operations are confined to the
 * directory (a check, not a boundary). `SubprocessSandboxDriver` refuses to
 * construct outside `NODE_ENV=test`.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { lstat, mkdir, open, readdir, realpath, rename, rm } from "node:fs/promises";
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import type {
  EntryKind,
  ExecInput,
  ExecResult,
  ListEntry,
  ListResult,
  ReadFileResult,
  SandboxProcessEnd,
  SandboxSpawnInput,
  SandboxSpawnResult,
  StatResult,
  ToolSandboxPort,
  WriteFileResult,
} from "@openma/contract";
import { TailBuffer } from "@openma/driver-kit";

const DEFAULT_MAX_OUTPUT = 1024 * 1024;

function kindOf(st: { isFile(): boolean; isDirectory(): boolean; isSymbolicLink(): boolean }): EntryKind {
  if (st.isSymbolicLink()) return "symlink";
  if (st.isFile()) return "file";
  if (st.isDirectory()) return "directory";
  return "other";
}

function errno(err: unknown): string | undefined {
  return (err as NodeJS.ErrnoException).code;
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Kills the whole process group (the child was started as its leader); a group already gone is fine. */
function killGroup(child: ChildProcess): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, "SIGKILL");
  } catch {
    // ESRCH: every member already exited.
  }
}

export class SubprocessToolSandbox implements ToolSandboxPort {
  /**
   * @param workdir an existing, canonical directory (no symlinks in it)
   * @param baseEnv the whole environment of started processes (the host's is never inherited)
   */
  constructor(
    readonly workdir: string,
    private readonly baseEnv: Readonly<Record<string, string>>,
  ) {}

  /** Starts a child in the workdir with the base environment; a string is why it could not start. */
  #start(file: string, args: string[], input: { cwd?: string; env?: Readonly<Record<string, string>> }): ChildProcess | string {
    try {
      // detached: the child leads a new process group, so a kill reaches everything it started.
      return spawn(file, args, {
        cwd: input.cwd ?? this.workdir,
        env: { ...this.baseEnv, ...input.env },
        detached: true,
        stdio: ["pipe", "pipe", "pipe"],
      });
    } catch (err) {
      return message(err);
    }
  }

  exec(input: ExecInput): Promise<ExecResult> {
    const [file, ...args] = input.command;
    if (!file) return Promise.resolve({ type: "error", message: "exec: command is empty" });
    if (input.signal.aborted)
      return Promise.resolve({ type: "aborted", stdout: new Uint8Array(), stderr: new Uint8Array(), truncated: false });
    const limit = input.maxOutputBytes ?? DEFAULT_MAX_OUTPUT;
    const stdout = new TailBuffer(limit);
    const stderr = new TailBuffer(limit);
    return new Promise<ExecResult>((done) => {
      const child = this.#start(file, args, input);
      if (typeof child === "string") {
        done({ type: "error", message: child });
        return;
      }
      let ending: "timeout" | "aborted" | null = null;
      let exit: { code: number | null; signal: string | null } | null = null;
      const stop = (why: "timeout" | "aborted") => {
        ending ??= why;
        killGroup(child);
      };
      const timer = setTimeout(() => stop("timeout"), Math.max(0, input.timeoutMs));
      const onAbort = () => stop("aborted");
      input.signal.addEventListener("abort", onAbort, { once: true });
      const capture = (stream: "stdout" | "stderr", buf: TailBuffer) => (chunk: Buffer) => {
        buf.push(chunk);
        input.onOutput?.(stream, chunk);
      };
      child.stdout?.on("data", capture("stdout", stdout));
      child.stderr?.on("data", capture("stderr", stderr));
      child.stdin?.on("error", () => {}); // the process may exit without reading its input
      child.stdin?.end(input.stdin ?? undefined);
      child.once("exit", (code, signal) => {
        exit = { code, signal };
        // Background children would otherwise hold the pipes open after the command is done.
        killGroup(child);
      });
      child.once("error", (err) => {
        clearTimeout(timer);
        input.signal.removeEventListener("abort", onAbort);
        done({ type: "error", message: message(err) });
      });
      child.once("close", () => {
        clearTimeout(timer);
        input.signal.removeEventListener("abort", onAbort);
        const out = { stdout: stdout.bytes(), stderr: stderr.bytes(), truncated: stdout.truncated || stderr.truncated };
        if (ending) done({ type: ending, ...out });
        else done({ type: "exited", exitCode: exit?.code ?? -1, signal: exit?.signal ?? null, ...out });
      });
    });
  }

  /** Long-lived processes still running, killed by `close`. */
  readonly #processes = new Set<ChildProcess>();

  /** A long-lived process (the persistent shell): its own process group, killed with the group. */
  async spawnProcess(input: SandboxSpawnInput): Promise<SandboxSpawnResult> {
    const [file, ...args] = input.command;
    if (!file) return { type: "error", message: "spawn: command is empty" };
    const child = this.#start(file, args, input);
    if (typeof child === "string") return { type: "error", message: child };
    this.#processes.add(child);
    let killed = false;
    child.stdout?.on("data", (chunk: Buffer) => input.onOutput("stdout", chunk));
    child.stderr?.on("data", (chunk: Buffer) => input.onOutput("stderr", chunk));
    child.stdin?.on("error", () => {}); // a write after exit surfaces through `write`'s callback
    const done = new Promise<SandboxProcessEnd>((resolve) => {
      child.once("error", (err) => resolve({ type: "error", message: message(err) }));
      child.once("exit", (code, signal) => {
        // What it left in the background dies with it, as it would with its sandbox.
        killGroup(child);
        this.#processes.delete(child);
        resolve(killed ? { type: "killed" } : { type: "exited", exitCode: code ?? -1, signal });
      });
    });
    const spawned = await new Promise<string | null>((resolve) => {
      child.once("spawn", () => resolve(null));
      child.once("error", (err) => resolve(message(err)));
    });
    if (spawned !== null) return { type: "error", message: spawned };
    return {
      type: "started",
      process: {
        write: (chunk) =>
          new Promise<void>((resolve, reject) => {
            const stdin = child.stdin;
            if (!stdin || stdin.destroyed || stdin.writableEnded) return reject(new Error("stdin is closed"));
            stdin.write(chunk, (err) => (err ? reject(err) : resolve()));
          }),
        closeStdin: () => child.stdin?.end(),
        kill: async () => {
          killed = true;
          killGroup(child);
        },
        done,
      },
    };
  }

  /** Kills every long-lived process started here (the sandbox going away). */
  close(): void {
    for (const child of this.#processes) killGroup(child);
    this.#processes.clear();
  }

  /** The path made absolute against the workdir. */
  private absolute(path: string): string {
    return isAbsolute(path) ? resolve(path) : resolve(this.workdir, path);
  }

  private inside(path: string): boolean {
    const rel = relative(this.workdir, path);
    return rel === "" || (!rel.startsWith(`..${sep}`) && rel !== ".." && !isAbsolute(rel));
  }

  /** Canonical form of `path`: realpath of its deepest existing ancestor plus the rest. */
  private async canonical(path: string): Promise<string> {
    const missing: string[] = [];
    let current = path;
    for (;;) {
      try {
        const real = await realpath(current);
        return missing.length ? join(real, ...missing.reverse()) : real;
      } catch (err) {
        const parent = dirname(current);
        if ((errno(err) !== "ENOENT" && errno(err) !== "ENOTDIR") || parent === current) throw err;
        missing.push(basename(current));
        current = parent;
      }
    }
  }

  /** Refuses paths that escape the directory (defence in depth: the harness checks first). */
  private async confined(path: string): Promise<{ ok: true; path: string } | { ok: false; message: string }> {
    const abs = this.absolute(path);
    let real: string;
    try {
      real = await this.canonical(abs);
    } catch (err) {
      return { ok: false, message: message(err) };
    }
    if (!this.inside(real)) return { ok: false, message: `path ${JSON.stringify(path)} is outside the sandbox directory` };
    return { ok: true, path: abs };
  }

  async stat(input: { path: string; signal: AbortSignal }): Promise<StatResult> {
    const abs = this.absolute(input.path);
    try {
      const st = await lstat(abs);
      const realPath = await this.canonical(abs).catch(() => abs);
      return { type: "found", kind: kindOf(st), size: st.size, mtimeMs: st.mtimeMs, realPath };
    } catch (err) {
      if (errno(err) === "ENOENT" || errno(err) === "ENOTDIR") return { type: "not_found" };
      return { type: "error", message: message(err) };
    }
  }

  async readFile(input: { path: string; maxBytes: number; signal: AbortSignal }): Promise<ReadFileResult> {
    const target = await this.confined(input.path);
    if (!target.ok) return { type: "error", message: target.message };
    try {
      const real = await realpath(target.path);
      if (!this.inside(real)) return { type: "error", message: `path ${JSON.stringify(input.path)} is outside the sandbox directory` };
      const handle = await open(real, "r");
      try {
        const st = await handle.stat();
        if (!st.isFile()) return { type: "not_a_file", kind: kindOf(st) };
        if (st.size > input.maxBytes) return { type: "too_large", size: st.size };
        const content = await handle.readFile({ signal: input.signal });
        if (content.length > input.maxBytes) return { type: "too_large", size: content.length };
        return { type: "ok", content, size: content.length };
      } finally {
        await handle.close();
      }
    } catch (err) {
      if (errno(err) === "ENOENT" || errno(err) === "ENOTDIR") return { type: "not_found" };
      return { type: "error", message: message(err) };
    }
  }

  async writeFile(input: { path: string; content: Uint8Array; mode?: number; signal: AbortSignal }): Promise<WriteFileResult> {
    const target = await this.confined(input.path);
    if (!target.ok) return { type: "error", message: target.message };
    const dir = dirname(target.path);
    const temp = join(dir, `.${basename(target.path)}.${randomBytes(6).toString("hex")}.tmp`);
    try {
      await mkdir(dir, { recursive: true, mode: 0o700 });
      const existing = await lstat(target.path).catch(() => null);
      if (existing?.isDirectory()) return { type: "error", message: `${JSON.stringify(input.path)} is a directory` };
      const mode = existing?.isFile() ? existing.mode & 0o7777 : (input.mode ?? 0o600);
      const handle = await open(temp, "wx", mode);
      try {
        await handle.writeFile(input.content, { signal: input.signal });
        await handle.sync();
      } finally {
        await handle.close();
      }
      // rename replaces a symlink at the target itself, never the file it points to.
      await rename(temp, target.path);
      return { type: "ok", bytes: input.content.length };
    } catch (err) {
      await rm(temp, { force: true }).catch(() => {});
      return { type: "error", message: message(err) };
    }
  }

  async list(input: {
    path: string;
    recursive: boolean;
    maxEntries: number;
    skipDirNames?: readonly string[];
    signal: AbortSignal;
  }): Promise<ListResult> {
    const target = await this.confined(input.path);
    if (!target.ok) return { type: "error", message: target.message };
    const skip = new Set(input.skipDirNames ?? []);
    const entries: ListEntry[] = [];
    let root: string;
    try {
      root = await realpath(target.path);
      if (!(await lstat(root)).isDirectory()) return { type: "error", message: `${JSON.stringify(input.path)} is not a directory` };
    } catch (err) {
      if (errno(err) === "ENOENT" || errno(err) === "ENOTDIR") return { type: "not_found" };
      return { type: "error", message: message(err) };
    }
    const pending = [root];
    while (pending.length > 0) {
      if (input.signal.aborted) return { type: "error", message: "aborted" };
      const dir = pending.shift() as string;
      let names: string[];
      try {
        names = (await readdir(dir)).sort();
      } catch {
        continue; // unreadable directories are skipped, like `find` would report and go on
      }
      for (const name of names) {
        const path = join(dir, name);
        const st = await lstat(path).catch(() => null);
        if (!st) continue;
        const kind = kindOf(st);
        if (kind === "directory" && skip.has(name)) continue;
        if (entries.length >= input.maxEntries) return { type: "ok", entries, truncated: true };
        entries.push({ path, kind, size: st.size, mtimeMs: st.mtimeMs });
        if (kind === "directory" && input.recursive) pending.push(path);
      }
    }
    return { type: "ok", entries, truncated: false };
  }
}
