/**
 * ToolSandboxPort and SandboxProcessPort over a RemoteSandboxApi. Commands
 * run under the kit's wrapper (`process.ts`); stat and listings are the
 * shared shell programs; file contents go through the provider's own file
 * API (binary-safe, where command output often is not: E2B and Daytona
 * deliver it as text), with the shell only checking size and kind first
 * and moving a written file into place.
 */
import { randomBytes } from "node:crypto";
import { posix } from "node:path";
import type {
  ExecInput,
  ExecResult,
  ListResult,
  ReadFileResult,
  SandboxProcess,
  SandboxProcessEnd,
  SandboxSpawnInput,
  SandboxSpawnResult,
  StatResult,
  ToolSandboxPort,
  WriteFileResult,
} from "@openma/contract";
import { FILE_EXIT, PLACE_FILE } from "../sh-programs.ts";
import { failureOf, ShellFiles } from "../shell-files.ts";
import type { RemoteSandboxApi } from "./api.ts";
import { withDeadline } from "./deadline.ts";
import { type RemoteProcess, type RemoteProcessInput, spawnRemote } from "./process.ts";

/** File programs are tiny; this only bounds a wedged provider. */
const FILE_OP_TIMEOUT_MS = 60_000;

export const DEFAULT_RUN_DIR = "/tmp/.openma";

export interface RemoteToolSandboxOptions {
  workdir?: string;
  /** Where the wrapper keeps pid, secret and relay files inside the sandbox (default /tmp/.openma). */
  runDir?: string;
  /** Variables every process gets, delivered like secrets (never argv, never the provider's request). */
  env?: Readonly<Record<string, string>>;
  /** Bound on starting a command and on each file transfer (default 120 s). */
  callTimeoutMs?: number;
  /**
   * False for a provider that cannot stream stdin into a running command
   * (Vercel): the port then has no long-lived process, and the harness's
   * `bash` runs each command in a fresh shell instead of waiting on one
   * that never gets its input.
   */
  streamingStdin?: boolean;
}

const describe = (err: unknown) => (err instanceof Error ? err.message : String(err));

export class RemoteToolSandbox implements ToolSandboxPort {
  readonly workdir: string;
  readonly #runDir: string;
  readonly #env: Readonly<Record<string, string>>;
  readonly #files: ShellFiles;
  readonly #callTimeoutMs: number;
  /** The port's long-lived process (the persistent shell of `bash`); absent without streaming stdin. */
  readonly spawnProcess?: (input: SandboxSpawnInput) => Promise<SandboxSpawnResult>;

  constructor(
    private readonly api: RemoteSandboxApi,
    options: RemoteToolSandboxOptions = {},
  ) {
    this.workdir = options.workdir ?? "/workspace";
    this.#runDir = options.runDir ?? DEFAULT_RUN_DIR;
    this.#env = options.env ?? {};
    this.#callTimeoutMs = options.callTimeoutMs ?? 120_000;
    if (options.streamingStdin !== false) this.spawnProcess = (input) => spawnSandboxProcess(this, input);
    this.#files = new ShellFiles((script, args, signal, stdin, maxOutputBytes = 64 * 1024) =>
      this.exec({
        command: ["/bin/sh", "-c", script, "openma-file", ...args],
        cwd: "/",
        stdin,
        timeoutMs: FILE_OP_TIMEOUT_MS,
        signal,
        maxOutputBytes,
      }),
    );
  }

  /** A duplex process: stream stdin with `write`, read output through `onOutput`, await `done`. */
  spawn(input: Omit<RemoteProcessInput, "cwd"> & { cwd?: string }): Promise<RemoteProcess> {
    return spawnRemote(
      this.api,
      this.#runDir,
      { ...input, cwd: input.cwd ?? this.workdir, env: { ...this.#env, ...input.env } },
      this.#callTimeoutMs,
    );
  }

  async exec(input: ExecInput): Promise<ExecResult> {
    const { stdin, ...rest } = input;
    const proc = await this.spawn(rest);
    if (stdin !== undefined && stdin.length > 0) await proc.write(stdin).catch(() => {});
    proc.closeStdin();
    return proc.done;
  }

  #absolute(path: string): string {
    return posix.resolve(this.workdir, path);
  }

  stat(input: { path: string; signal: AbortSignal }): Promise<StatResult> {
    return this.#files.stat(this.#absolute(input.path), input.signal);
  }

  /** Kind and size from the shell (so a huge file is never downloaded), the bytes from the provider's file API. */
  async readFile(input: { path: string; maxBytes: number; signal: AbortSignal }): Promise<ReadFileResult> {
    const path = this.#absolute(input.path);
    const seen = await this.#files.stat(path, input.signal);
    if (seen.type !== "found") return seen;
    if (seen.kind === "symlink") {
      const target = await this.#files.stat(seen.realPath, input.signal);
      if (target.type !== "found") return target;
      if (target.kind !== "file") return { type: "not_a_file", kind: target.kind };
      if (target.size > input.maxBytes) return { type: "too_large", size: target.size };
    } else if (seen.kind !== "file") return { type: "not_a_file", kind: seen.kind };
    else if (seen.size > input.maxBytes) return { type: "too_large", size: seen.size };
    try {
      const content = await withDeadline("read", this.#callTimeoutMs, input.signal, (signal) => this.api.readFile(path, signal));
      if (content === null) return { type: "not_found" };
      // It grew between the size check and the read.
      if (content.length > input.maxBytes) return { type: "too_large", size: content.length };
      return { type: "ok", content, size: content.length };
    } catch (err) {
      return { type: "error", message: `read ${path}: ${describe(err)}` };
    }
  }

  /** Written next to the target through the provider's file API, then moved into place with its mode. */
  async writeFile(input: { path: string; content: Uint8Array; mode?: number; signal: AbortSignal }): Promise<WriteFileResult> {
    const path = this.#absolute(input.path);
    const dir = posix.dirname(path);
    const temp = `${dir === "/" ? "" : dir}/.${posix.basename(path)}.openma-${randomBytes(6).toString("hex")}.tmp`;
    try {
      await withDeadline("write", this.#callTimeoutMs, input.signal, (signal) => this.api.writeFile(temp, input.content, signal));
    } catch (err) {
      return { type: "error", message: `write ${path}: ${describe(err)}` };
    }
    const mode = ((input.mode ?? 0o600) & 0o7777).toString(8);
    const placed = await this.exec({
      command: ["/bin/sh", "-c", PLACE_FILE, "openma-file", temp, path, mode],
      cwd: "/",
      timeoutMs: FILE_OP_TIMEOUT_MS,
      signal: input.signal,
    });
    if (placed.type === "exited" && placed.exitCode === 0) return { type: "ok", bytes: input.content.length };
    if (placed.type === "exited" && placed.exitCode === FILE_EXIT.isDirectory)
      return { type: "error", message: `${JSON.stringify(input.path)} is a directory` };
    return { type: "error", message: failureOf(placed) };
  }

  list(input: {
    path: string;
    recursive: boolean;
    maxEntries: number;
    skipDirNames?: readonly string[];
    signal: AbortSignal;
  }): Promise<ListResult> {
    return this.#files.list({ ...input, path: this.#absolute(input.path) });
  }
}

/** A RemoteProcess as the SandboxProcessPort shapes it (the harness lanes' long-running child). */
export async function spawnSandboxProcess(tools: RemoteToolSandbox, input: SandboxSpawnInput): Promise<SandboxSpawnResult> {
  const stop = new AbortController();
  const proc = await tools.spawn({
    command: input.command,
    cwd: input.cwd,
    env: input.env,
    signal: stop.signal,
    onOutput: input.onOutput,
    maxOutputBytes: 64 * 1024,
  });
  const done: Promise<SandboxProcessEnd> = proc.done.then((result) => {
    if (result.type === "exited") return { type: "exited", exitCode: result.exitCode, signal: result.signal };
    if (result.type === "error") return { type: "error", message: result.message };
    return { type: "killed" };
  });
  // A process that could not start at all is a start error, not a process that ended.
  if (proc.failedToStart !== null) return { type: "error", message: proc.failedToStart };
  const process: SandboxProcess = {
    write: (chunk) => proc.write(chunk),
    closeStdin: () => proc.closeStdin(),
    kill: () => proc.kill(),
    done,
  };
  return { type: "started", process };
}
