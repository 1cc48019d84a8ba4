/**
 * ToolSandboxPort over one container: the default harness's tools (bash,
 * read, write, edit, glob, grep) run inside it through the exec API.
 *
 * File operations are short POSIX shell programs (see `scripts.ts`) run
 * through the same wrapper as any command, so they honour abort signals and
 * never depend on anything but the image's `/bin/sh` and core utilities.
 * Paths are resolved against `workdir`; there is no extra confinement here
 * because the container is the isolation boundary (the harness still
 * confines tool paths to the workspace before calling).
 */
import { posix } from "node:path";
import type {
  EntryKind,
  ExecInput,
  ExecResult,
  ListEntry,
  ListResult,
  ReadFileResult,
  StatResult,
  ToolSandboxPort,
  WriteFileResult,
} from "@openma/contract";
import type Docker from "dockerode";
import { type ContainerProcess, type ContainerProcessInput, spawnInContainer } from "./process.ts";
import { FILE_EXIT, LIST_DIR, READ_FILE, STAT_PATH, WRITE_FILE } from "./scripts.ts";

/** File programs are tiny; this only bounds a wedged engine or filesystem. */
const FILE_OP_TIMEOUT_MS = 60_000;
/** Upper bound of a listing's output per entry (path + fields), for the capture buffer. */
const LIST_BYTES_PER_ENTRY = 4200;

export interface DockerToolSandboxOptions {
  workdir?: string;
  /** Non-secret variables for every process. */
  env?: Readonly<Record<string, string>>;
  /** Secret variables for every process (tmpfs file, never argv or `Env`). */
  secretEnv?: Readonly<Record<string, string>>;
}

/** ExecInput plus secrets for this one command. */
export interface DockerExecInput extends ExecInput {
  secretEnv?: Readonly<Record<string, string>>;
}

function kindOf(fileType: string): EntryKind {
  if (fileType.startsWith("regular")) return "file";
  if (fileType === "directory") return "directory";
  if (fileType === "symbolic link") return "symlink";
  return "other";
}

/** `<size> <mtime> <type words>` as printed by `stat -c '%s %Y %F'`. */
function parseStatFields(text: string): { size: number; mtimeMs: number; kind: EntryKind } | null {
  const match = /^(\d+) (\d+) (.+)$/.exec(text);
  if (!match) return null;
  return { size: Number(match[1]), mtimeMs: Number(match[2]) * 1000, kind: kindOf(match[3] as string) };
}

const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");

export class DockerToolSandbox implements ToolSandboxPort {
  readonly workdir: string;
  readonly #env: Readonly<Record<string, string>>;
  readonly #secretEnv: Readonly<Record<string, string>>;

  constructor(
    private readonly container: Docker.Container,
    options: DockerToolSandboxOptions = {},
  ) {
    this.workdir = options.workdir ?? "/workspace";
    this.#env = options.env ?? {};
    this.#secretEnv = options.secretEnv ?? {};
  }

  /** A duplex process: stream stdin with `write`, read output through `onOutput`, await `done`. */
  spawn(input: ContainerProcessInput): Promise<ContainerProcess> {
    return spawnInContainer(this.container, {
      ...input,
      cwd: input.cwd ?? this.workdir,
      env: { ...this.#env, ...input.env },
      secretEnv: { ...this.#secretEnv, ...input.secretEnv },
    });
  }

  async exec(input: DockerExecInput): Promise<ExecResult> {
    const { stdin, ...rest } = input;
    const proc = await this.spawn(rest);
    if (stdin !== undefined && stdin.length > 0) await proc.write(stdin);
    proc.closeStdin();
    return proc.done;
  }

  #absolute(path: string): string {
    return posix.resolve(this.workdir, path);
  }

  /** Runs one file program; `maxOutputBytes` bounds what is kept of its stdout. */
  #fileOp(script: string, args: string[], signal: AbortSignal, stdin?: Uint8Array, maxOutputBytes = 64 * 1024): Promise<ExecResult> {
    return this.exec({
      command: ["/bin/sh", "-c", script, "openma-file", ...args],
      cwd: "/",
      stdin,
      timeoutMs: FILE_OP_TIMEOUT_MS,
      signal,
      maxOutputBytes,
    });
  }

  async stat(input: { path: string; signal: AbortSignal }): Promise<StatResult> {
    const result = await this.#fileOp(STAT_PATH, [this.#absolute(input.path)], input.signal);
    if (result.type !== "exited") return { type: "error", message: failureOf(result) };
    if (result.exitCode === FILE_EXIT.notFound) return { type: "not_found" };
    if (result.exitCode !== 0) return { type: "error", message: failureOf(result) };
    const out = text(result.stdout);
    const newline = out.indexOf("\n");
    const fields = parseStatFields(newline < 0 ? out : out.slice(0, newline));
    if (!fields || newline < 0) return { type: "error", message: `stat: unexpected output ${JSON.stringify(out.slice(0, 200))}` };
    return { type: "found", ...fields, realPath: out.slice(newline + 1) };
  }

  async readFile(input: { path: string; maxBytes: number; signal: AbortSignal }): Promise<ReadFileResult> {
    const maxBytes = Math.max(0, Math.floor(input.maxBytes));
    // One byte over the limit tells a file that grew past it after the size check.
    const result = await this.#fileOp(READ_FILE, [this.#absolute(input.path), String(maxBytes)], input.signal, undefined, maxBytes + 1);
    if (result.type !== "exited") return { type: "error", message: failureOf(result) };
    switch (result.exitCode) {
      case 0:
        if (result.truncated || result.stdout.length > maxBytes) return { type: "too_large", size: result.stdout.length };
        return { type: "ok", content: result.stdout, size: result.stdout.length };
      case FILE_EXIT.notFound:
        return { type: "not_found" };
      case FILE_EXIT.notAFile:
        return { type: "not_a_file", kind: kindOf(text(result.stderr).trim()) };
      case FILE_EXIT.tooLarge:
        return { type: "too_large", size: Number(text(result.stderr).trim()) || maxBytes + 1 };
      default:
        return { type: "error", message: failureOf(result) };
    }
  }

  async writeFile(input: { path: string; content: Uint8Array; mode?: number; signal: AbortSignal }): Promise<WriteFileResult> {
    const mode = (input.mode ?? 0o600) & 0o7777;
    const result = await this.#fileOp(WRITE_FILE, [this.#absolute(input.path), mode.toString(8)], input.signal, input.content);
    if (result.type === "exited" && result.exitCode === 0) return { type: "ok", bytes: input.content.length };
    if (result.type === "exited" && result.exitCode === FILE_EXIT.isDirectory) {
      return { type: "error", message: `${JSON.stringify(input.path)} is a directory` };
    }
    return { type: "error", message: failureOf(result) };
  }

  async list(input: {
    path: string;
    recursive: boolean;
    maxEntries: number;
    skipDirNames?: readonly string[];
    signal: AbortSignal;
  }): Promise<ListResult> {
    const maxEntries = Math.max(0, Math.floor(input.maxEntries));
    const skip = (input.skipDirNames ?? []).filter((name) => name.length > 0 && !name.includes("/"));
    const args = [this.#absolute(input.path), input.recursive ? "1" : "0", String(maxEntries), ...skip];
    const result = await this.#fileOp(LIST_DIR, args, input.signal, undefined, (maxEntries + 1) * LIST_BYTES_PER_ENTRY);
    if (result.type !== "exited") return { type: "error", message: failureOf(result) };
    if (result.exitCode === FILE_EXIT.notFound) return { type: "not_found" };
    if (result.exitCode === FILE_EXIT.notAFile) return { type: "error", message: `${JSON.stringify(input.path)} is not a directory` };
    if (result.exitCode !== 0) return { type: "error", message: failureOf(result) };
    const entries: ListEntry[] = [];
    for (const line of text(result.stdout).split("\n")) {
      const bar = line.indexOf("|");
      if (bar < 0) continue;
      const fields = parseStatFields(line.slice(0, bar));
      // A name containing a newline splits into lines that do not parse; such entries are skipped.
      if (fields) entries.push({ path: line.slice(bar + 1), ...fields });
    }
    entries.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
    const truncated = entries.length > maxEntries;
    return { type: "ok", entries: truncated ? entries.slice(0, maxEntries) : entries, truncated };
  }
}

function failureOf(result: ExecResult): string {
  switch (result.type) {
    case "error":
      return result.message;
    case "timeout":
      return "timed out";
    case "aborted":
      return "aborted";
    case "exited": {
      const detail = text(result.stderr).trim().split("\n").slice(-3).join("; ");
      return detail || `exit code ${result.exitCode}`;
    }
  }
}
