/**
 * ToolSandboxPort over one container: the default harness's tools (bash,
 * read, write, edit, glob, grep) run inside it through the exec API.
 *
 * File operations are short POSIX shell programs (`@openma/driver-kit/sh-programs`) run
 * through the same wrapper as any command, so they honour abort signals and
 * never depend on anything but the image's `/bin/sh` and core utilities.
 * Paths are resolved against `workdir`; there is no extra confinement here
 * because the container is the isolation boundary (the harness still
 * confines tool paths to the workspace before calling).
 */
import { posix } from "node:path";
import type {
  ExecInput,
  ExecResult,
  ListResult,
  ReadFileResult,
  SandboxProcessEnd,
  SandboxSpawnInput,
  SandboxSpawnResult,
  StatResult,
  ToolSandboxPort,
  WriteFileResult,
} from "@openma/contract";
import { ShellFiles } from "@openma/driver-kit/shell-files";
import type Docker from "dockerode";
import { type ContainerProcess, type ContainerProcessInput, spawnInContainer } from "./process.ts";

/** Long-lived processes are chatty: keep only a small tail, the caller consumes output live. */
const PROCESS_TAIL_BYTES = 64 * 1024;

/** File programs are tiny; this only bounds a wedged engine or filesystem. */
const FILE_OP_TIMEOUT_MS = 60_000;

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

  /** `spawn` shaped as the contract's long-lived process (the persistent shell, the in-sandbox harness lanes). */
  async spawnProcess(input: SandboxSpawnInput): Promise<SandboxSpawnResult> {
    const child = await this.spawn({
      command: input.command,
      cwd: input.cwd,
      env: input.env,
      signal: new AbortController().signal,
      onOutput: input.onOutput,
      maxOutputBytes: PROCESS_TAIL_BYTES,
    });
    const done: Promise<SandboxProcessEnd> = child.done.then((result) => {
      if (result.type === "exited") return { type: "exited", exitCode: result.exitCode, signal: result.signal };
      if (result.type === "error") return { type: "error", message: result.message };
      return { type: "killed" };
    });
    // A refusal settles at once: report it as a spawn error, not as a process that ran.
    const early = await Promise.race([done, Promise.resolve(null)]);
    if (early?.type === "error") return { type: "error", message: early.message };
    return {
      type: "started",
      process: { write: (c) => child.write(c), closeStdin: () => child.closeStdin(), kill: () => child.kill(), done },
    };
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

  /** Each file program runs through the same wrapper as any command, from `/`. */
  readonly #files = new ShellFiles((script, args, signal, stdin, maxOutputBytes = 64 * 1024) =>
    this.exec({
      command: ["/bin/sh", "-c", script, "openma-file", ...args],
      cwd: "/",
      stdin,
      timeoutMs: FILE_OP_TIMEOUT_MS,
      signal,
      maxOutputBytes,
    }),
  );

  stat(input: { path: string; signal: AbortSignal }): Promise<StatResult> {
    return this.#files.stat(this.#absolute(input.path), input.signal);
  }

  readFile(input: { path: string; maxBytes: number; signal: AbortSignal }): Promise<ReadFileResult> {
    return this.#files.readFile(this.#absolute(input.path), input.maxBytes, input.signal);
  }

  writeFile(input: { path: string; content: Uint8Array; mode?: number; signal: AbortSignal }): Promise<WriteFileResult> {
    return this.#files.writeFile(this.#absolute(input.path), input.content, input.mode, input.signal);
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
