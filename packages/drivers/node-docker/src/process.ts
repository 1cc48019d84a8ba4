/**
 * Processes inside a container through the Engine exec API: duplex
 * stdin/stdout/stderr over one hijacked connection (demultiplexed), the exit
 * code from exec inspect, and a hard kill of the whole process tree on
 * timeout, abort or request.
 *
 * The Engine has no "kill this exec" call, so every command runs under a
 * small wrapper (`EXEC_WRAPPER`) that records its process group in a pid
 * file on the container's tmpfs; a kill is a second exec that SIGKILLs that
 * group.
 *
 * Secret environment values never travel in argv or in the exec's `Env`
 * (both visible to `docker inspect` and `/proc/<pid>/cmdline`): they are
 * streamed over stdin into a 0600 file on the tmpfs, which the wrapper
 * sources and deletes before starting the command.
 */
import { randomBytes } from "node:crypto";
import type { Duplex } from "node:stream";
import type { ExecResult, OutputStream } from "@openma/contract";
import { TailBuffer } from "@openma/driver-kit";
import { EXEC_WRAPPER, KILL_TREE, WRAPPER_FAILURE, WRITE_SECRET_FILE } from "@openma/driver-kit/sh-programs";
import type Docker from "dockerode";
import { describeError } from "./engine.ts";
import { PID_DIR, SECRET_DIR } from "./scripts.ts";
import { Demuxer, HeadBuffer } from "./streams.ts";

export const DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024;
/** setTimeout's ceiling; a longer timeout would fire immediately. */
const MAX_TIMER_MS = 2_147_483_647;
const KILL_ATTEMPTS = 20;

export interface ContainerProcessInput {
  /** argv; `command[0]` is looked up on the container's PATH. */
  command: readonly string[];
  /** Absolute; the image's working directory when absent. */
  cwd?: string;
  /** Ordinary variables: passed as the exec's environment. */
  env?: Readonly<Record<string, string>>;
  /** Secret variables: delivered through a tmpfs file, never argv or `Env`. */
  secretEnv?: Readonly<Record<string, string>>;
  /** Absent: no timeout (a long-running harness process). */
  timeoutMs?: number;
  signal: AbortSignal;
  onOutput?: (stream: OutputStream, chunk: Uint8Array) => void;
  /** Per-stream capture bound: only the last bytes are kept (default 1 MiB). */
  maxOutputBytes?: number;
}

/** A running process: write its stdin as you go, read its output through `onOutput`. */
export interface ContainerProcess {
  write(chunk: Uint8Array | string): Promise<void>;
  /** Half-closes the connection: the process reads end-of-file. */
  closeStdin(): void;
  /** SIGKILL to the process and everything it started; `done` then resolves as `aborted` (unless it already ended). */
  kill(): Promise<void>;
  readonly done: Promise<ExecResult>;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

function inputIssue(input: ContainerProcessInput): string | null {
  const [file] = input.command;
  if (!file) return "exec: command is empty";
  if (file.startsWith("-")) return `exec: command ${JSON.stringify(file)} may not start with "-"`;
  if (input.cwd !== undefined && !input.cwd.startsWith("/")) return "exec: cwd must be an absolute path";
  const texts = [...input.command, input.cwd ?? ""];
  for (const [name, value] of [...Object.entries(input.env ?? {}), ...Object.entries(input.secretEnv ?? {})]) {
    if (!ENV_NAME.test(name)) return `exec: invalid environment variable name ${JSON.stringify(name)}`;
    texts.push(value);
  }
  if (texts.some((text) => text.includes("\0"))) return "exec: arguments and environment values may not contain NUL bytes";
  return null;
}

/** `export NAME='value'` lines; single quotes keep every byte literal (a `'` becomes `'\''`). */
function secretEnvFile(values: Readonly<Record<string, string>>): string {
  return Object.entries(values)
    .map(([name, value]) => `export ${name}='${value.replaceAll("'", "'\\''")}'\n`)
    .join("");
}

async function openExec(container: Docker.Container, cmd: string[], env?: string[]): Promise<{ exec: Docker.Exec; stream: Duplex }> {
  const exec = await container.exec({ Cmd: cmd, Env: env, AttachStdin: true, AttachStdout: true, AttachStderr: true, Tty: false });
  const stream = (await exec.start({ hijack: true, stdin: true })) as Duplex;
  return { exec, stream };
}

/** Exit code from exec inspect; the Engine may still be recording it when the stream closes. */
async function exitCodeOf(exec: Docker.Exec): Promise<number> {
  for (let attempt = 0; ; attempt++) {
    const info = await exec.inspect();
    if (!info.Running && info.ExitCode !== null) return info.ExitCode;
    if (attempt >= 50) return -1;
    await new Promise((resolve) => setTimeout(resolve, Math.min(5 * (attempt + 1), 50)));
  }
}

export interface HelperResult {
  exitCode: number;
  stdout: Buffer;
  /** More stdout than `maxStdout` arrived (the rest was dropped). */
  stdoutOverflow: boolean;
  stderr: string;
}

/**
 * Runs a short program to completion without the wrapper (the kill helper
 * itself, secret delivery, file operations). Engine failures throw.
 */
export async function runHelper(
  container: Docker.Container,
  cmd: string[],
  options: { stdin?: Uint8Array; maxStdout?: number } = {},
): Promise<HelperResult> {
  const { exec, stream } = await openExec(container, cmd);
  const stdout = new HeadBuffer(options.maxStdout ?? DEFAULT_MAX_OUTPUT_BYTES);
  const stderr = new TailBuffer(64 * 1024);
  const demux = new Demuxer((which, chunk) => (which === "stdout" ? stdout.push(chunk) : stderr.push(chunk)));
  await new Promise<void>((resolve, reject) => {
    let settled = false;
    const settle = (err?: Error) => {
      if (settled) return;
      settled = true;
      if (err) reject(err);
      else resolve();
    };
    stream.on("data", (chunk: Buffer) => demux.push(chunk));
    stream.once("end", () => settle());
    stream.once("close", () => settle());
    stream.once("error", (err) => settle(err));
    stream.end(options.stdin ? Buffer.from(options.stdin) : undefined);
  });
  return { exitCode: await exitCodeOf(exec), stdout: stdout.bytes(), stdoutOverflow: stdout.overflowed, stderr: stderr.text() };
}

/**
 * Starts `input.command` in the container. A refusal (bad input, container
 * not running, secret delivery failed) is a resolved `{type: "error"}`
 * result, never a throw.
 */
export async function spawnInContainer(container: Docker.Container, input: ContainerProcessInput): Promise<ContainerProcess> {
  const issue = inputIssue(input);
  if (issue !== null) return settledProcess({ type: "error", message: issue });
  if (input.signal.aborted)
    return settledProcess({ type: "aborted", stdout: new Uint8Array(), stderr: new Uint8Array(), truncated: false });
  const key = randomBytes(12).toString("hex");
  const pidFile = `${PID_DIR}/${key}.pid`;
  let envFile = "";
  try {
    if (input.secretEnv && Object.keys(input.secretEnv).length > 0) {
      envFile = `${SECRET_DIR}/${key}.env`;
      const wrote = await runHelper(container, ["/bin/sh", "-c", WRITE_SECRET_FILE, "openma-secret", envFile], {
        stdin: Buffer.from(secretEnvFile(input.secretEnv)),
      });
      if (wrote.exitCode !== 0)
        return settledProcess({ type: "error", message: `exec: could not deliver secrets: ${wrote.stderr.trim()}` });
    }
    const env = Object.entries(input.env ?? {}).map(([name, value]) => `${name}=${value}`);
    const cmd = ["/bin/sh", "-c", EXEC_WRAPPER, "openma-exec", pidFile, envFile, input.cwd ?? "", ...input.command];
    const { exec, stream } = await openExec(container, cmd, env);
    return new RunningProcess(container, exec, stream, pidFile, envFile, input);
  } catch (err) {
    // The wrapper never ran, so nothing else will delete a delivered secret file.
    if (envFile) await runHelper(container, ["/bin/rm", "-f", "--", envFile]).catch(() => {});
    return settledProcess({ type: "error", message: `exec: ${describeError(err)}` });
  }
}

function settledProcess(result: ExecResult): ContainerProcess {
  return {
    write: async () => {},
    closeStdin: () => {},
    kill: async () => {},
    done: Promise.resolve(result),
  };
}

class RunningProcess implements ContainerProcess {
  readonly done: Promise<ExecResult>;
  readonly #stdout: TailBuffer;
  readonly #stderr: TailBuffer;
  #ending: "timeout" | "aborted" | null = null;
  #closed = false;
  #killing: Promise<void> | null = null;
  #resolve!: (result: ExecResult) => void;
  #streamError: Error | null = null;
  readonly #timer: NodeJS.Timeout | null;
  readonly #onAbort = () => this.#stop("aborted");

  constructor(
    private readonly container: Docker.Container,
    private readonly exec: Docker.Exec,
    private readonly stream: Duplex,
    private readonly pidFile: string,
    private readonly envFile: string,
    private readonly input: ContainerProcessInput,
  ) {
    const limit = input.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
    this.#stdout = new TailBuffer(limit);
    this.#stderr = new TailBuffer(limit);
    this.done = new Promise((resolve) => {
      this.#resolve = resolve;
    });
    const demux = new Demuxer((which, chunk) => {
      (which === "stdout" ? this.#stdout : this.#stderr).push(chunk);
      input.onOutput?.(which, chunk);
    });
    stream.on("data", (chunk: Buffer) => demux.push(chunk));
    stream.on("error", (err) => {
      // EPIPE after the process exited is expected when stdin is written late; keep the first error for the result.
      this.#streamError ??= err;
      this.#finish();
    });
    stream.once("end", () => this.#finish());
    stream.once("close", () => this.#finish());
    this.#timer =
      input.timeoutMs === undefined ? null : setTimeout(() => this.#stop("timeout"), Math.min(Math.max(0, input.timeoutMs), MAX_TIMER_MS));
    input.signal.addEventListener("abort", this.#onAbort, { once: true });
  }

  write(chunk: Uint8Array | string): Promise<void> {
    if (this.#closed || this.stream.writableEnded) return Promise.resolve();
    return new Promise((resolve) => {
      // A write the process no longer reads fails with EPIPE, or never drains once it exited:
      // either way the exit status tells the story, not the write.
      this.stream.write(typeof chunk === "string" ? chunk : Buffer.from(chunk), () => resolve());
      void this.done.then(() => resolve());
    });
  }

  closeStdin(): void {
    if (!this.stream.writableEnded) this.stream.end();
  }

  kill(): Promise<void> {
    this.#ending ??= "aborted";
    this.#killing ??= this.#killTree();
    return this.#killing;
  }

  #stop(why: "timeout" | "aborted"): void {
    if (this.#closed) return;
    this.#ending ??= why;
    void this.kill();
  }

  /**
   * SIGKILL to the wrapper's process group. The pid file may not exist yet
   * (the wrapper is still starting), so retry with a short backoff until
   * the stream closes; if it never does, drop the connection so the caller
   * is never left waiting.
   */
  async #killTree(): Promise<void> {
    for (let attempt = 0; attempt < KILL_ATTEMPTS && !this.#closed; attempt++) {
      try {
        const killed = await runHelper(this.container, ["/bin/sh", "-c", KILL_TREE, "openma-kill", this.pidFile, this.envFile]);
        if (killed.exitCode === 0) return;
      } catch {
        // The container itself may be gone: then the stream closes on its own.
      }
      await new Promise((resolve) => setTimeout(resolve, Math.min(10 * 2 ** attempt, 200)));
    }
    if (!this.#closed) this.stream.destroy();
  }

  #finish(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.input.signal.removeEventListener("abort", this.#onAbort);
    void this.#result().then(this.#resolve);
  }

  async #result(): Promise<ExecResult> {
    const out = { stdout: this.#stdout.bytes(), stderr: this.#stderr.bytes(), truncated: this.#stdout.truncated || this.#stderr.truncated };
    if (this.#ending) return { type: this.#ending, ...out };
    let exitCode: number;
    try {
      exitCode = await exitCodeOf(this.exec);
    } catch (err) {
      return { type: "error", message: `exec: lost the process (${describeError(this.#streamError ?? err)})` };
    }
    if (exitCode === 127) {
      const failure = this.#stderr
        .text()
        .split("\n")
        .find((line) => line.startsWith(WRAPPER_FAILURE));
      if (failure) return { type: "error", message: failure.slice(WRAPPER_FAILURE.length) };
    }
    return { type: "exited", exitCode, signal: null, ...out };
  }
}
