/**
 * One command in a remote sandbox, the way every OpenMA driver promises it:
 * output streamed and captured (capped from the front), a timeout, an abort
 * signal, and a kill that reaches the whole process tree.
 *
 * The command runs under the exec wrapper of `sh-programs.ts`: it records
 * its process group in a pid file and marks every descendant's environment,
 * so the kill (a second command running KILL_TREE) finds even processes
 * that called `setsid`, whatever the provider's own kill reaches. Variables
 * travel like secrets, through a 0600 file the wrapper sources and deletes,
 * never in argv or in the provider's request (E2B's JSON body, Sprites' URL
 * query). A provider that cannot close stdin gets it framed in-band
 * (FRAMED_STDIN), so `cat` still sees end-of-file.
 */
import { randomBytes } from "node:crypto";
import type { ExecResult, OutputStream } from "@openma/contract";
import { EXEC_WRAPPER, FRAMED_STDIN, KILL_TREE, WRAPPER_FAILURE, WRITE_SECRET_FILE } from "../sh-programs.ts";
import { TailBuffer } from "../tail-buffer.ts";
import type { RemoteCommand, RemoteEnd, RemoteSandboxApi } from "./api.ts";
import { withDeadline } from "./deadline.ts";

export const DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024;
/** setTimeout's ceiling; a longer timeout would fire immediately. */
const MAX_TIMER_MS = 2_147_483_647;
const KILL_ATTEMPTS = 12;
const HELPER_TIMEOUT_MS = 60_000;
/** Framed stdin chunks: one provider request each, well under any request limit once in base64. */
const FRAME_BYTES = 48 * 1024;
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export interface RemoteProcessInput {
  command: readonly string[];
  /** Absolute; the wrapper fails the command when it cannot change there. */
  cwd: string;
  env?: Readonly<Record<string, string>>;
  /** Absent: no timeout (a long-running harness process). */
  timeoutMs?: number;
  signal: AbortSignal;
  onOutput?: (stream: OutputStream, chunk: Uint8Array) => void;
  maxOutputBytes?: number;
}

export interface RemoteProcess {
  write(chunk: Uint8Array | string): Promise<void>;
  closeStdin(): void;
  /** SIGKILL to the tree; `done` then settles as `aborted` unless it had already ended. */
  kill(): Promise<void>;
  readonly done: Promise<ExecResult>;
  /** Why the command never started (bad input, the provider refused it), or null once it runs. */
  readonly failedToStart: string | null;
}

/** Where the wrapper keeps its files inside the sandbox. */
export interface RunPaths {
  pidFile: string;
  envFile: string;
  fifo: string;
}

function runPaths(runDir: string): RunPaths {
  const key = randomBytes(12).toString("hex");
  return { pidFile: `${runDir}/exec/${key}.pid`, envFile: `${runDir}/secrets/${key}.env`, fifo: `${runDir}/stdin/${key}.fifo` };
}

function inputIssue(input: RemoteProcessInput): string | null {
  const [file] = input.command;
  if (!file) return "exec: command is empty";
  if (file.startsWith("-")) return `exec: command ${JSON.stringify(file)} may not start with "-"`;
  if (!input.cwd.startsWith("/")) return "exec: cwd must be an absolute path";
  const texts = [...input.command, input.cwd];
  for (const [name, value] of Object.entries(input.env ?? {})) {
    if (!ENV_NAME.test(name)) return `exec: invalid environment variable name ${JSON.stringify(name)}`;
    texts.push(value);
  }
  if (texts.some((text) => text.includes("\0"))) return "exec: arguments and environment values may not contain NUL bytes";
  return null;
}

/** `export NAME='value'` lines; single quotes keep every byte literal. */
function envFileText(values: Readonly<Record<string, string>>): string {
  return Object.entries(values)
    .map(([name, value]) => `export ${name}='${value.replaceAll("'", "'\\''")}'\n`)
    .join("");
}

const describe = (err: unknown) => (err instanceof Error ? err.message : String(err));

/**
 * A started provider command with its stdin discipline: in-band frames for
 * a provider without end-of-input, plain bytes otherwise. Writes are
 * serialized so chunks arrive in order.
 */
class Stdin {
  #chain: Promise<void> = Promise.resolve();
  #closed = false;

  constructor(
    private readonly command: RemoteCommand,
    private readonly framed: boolean,
  ) {}

  write(bytes: Uint8Array): Promise<void> {
    if (this.#closed) return Promise.reject(new Error("stdin is closed"));
    const pieces: Uint8Array[] = [];
    if (!this.framed) pieces.push(bytes);
    else
      for (let at = 0; at < bytes.length; at += FRAME_BYTES) {
        pieces.push(Buffer.from(`${Buffer.from(bytes.subarray(at, at + FRAME_BYTES)).toString("base64")}\n`));
      }
    const next = this.#chain.then(async () => {
      for (const piece of pieces) await this.command.write(piece);
    });
    this.#chain = next.catch(() => {});
    return next;
  }

  close(): Promise<void> {
    if (this.#closed) return this.#chain;
    this.#closed = true;
    const next = this.#chain.then(() => (this.framed ? this.command.write(Buffer.from(".\n")) : this.command.closeStdin()));
    this.#chain = next.catch(() => {});
    return next;
  }
}

/**
 * Starts a provider command, with the relay in front when stdin must be
 * framed, within `timeoutMs`; a command the provider starts after that is
 * killed at once.
 */
async function launch(
  api: RemoteSandboxApi,
  argv: readonly string[],
  fifo: string,
  onOutput: (stream: OutputStream, chunk: Uint8Array) => void,
  signal: AbortSignal,
  timeoutMs: number,
): Promise<{ command: RemoteCommand; stdin: Stdin }> {
  const wrapped = api.stdinEof ? argv : ["/bin/sh", "-c", FRAMED_STDIN, "openma-stdin", fifo, ...argv];
  const command = await withDeadline(
    "starting the command",
    timeoutMs,
    signal,
    (bound) => api.start({ argv: wrapped, onOutput, signal: bound }),
    (late) => {
      void late.kill().catch(() => {});
    },
  );
  return { command, stdin: new Stdin(command, !api.stdinEof) };
}

/** Runs a helper program to completion (secret delivery, the tree kill): its exit code, or why it was lost. */
export async function runHelper(
  api: RemoteSandboxApi,
  runDir: string,
  argv: readonly string[],
  stdin?: Uint8Array,
  timeoutMs = HELPER_TIMEOUT_MS,
): Promise<RemoteEnd & { stderr: string }> {
  const stderr = new TailBuffer(16 * 1024);
  const { command, stdin: input } = await launch(
    api,
    argv,
    runPaths(runDir).fifo,
    (stream, chunk) => {
      if (stream === "stderr") stderr.push(Buffer.from(chunk));
    },
    new AbortController().signal,
    timeoutMs,
  );
  if (stdin !== undefined && stdin.length > 0) await input.write(stdin).catch(() => {});
  await input.close().catch(() => {});
  const end = await Promise.race([
    command.done,
    new Promise<RemoteEnd>((resolve) =>
      setTimeout(() => resolve({ type: "lost", message: `no end within ${timeoutMs} ms` }), timeoutMs).unref(),
    ),
  ]);
  if (end.type === "lost") void command.kill().catch(() => {});
  return { ...end, stderr: stderr.text() };
}

/** Starts `input.command` under the wrapper. A refusal or a start failure is a settled `error` result, never a throw. */
export async function spawnRemote(
  api: RemoteSandboxApi,
  runDir: string,
  input: RemoteProcessInput,
  startTimeoutMs = HELPER_TIMEOUT_MS,
): Promise<RemoteProcess> {
  const issue = inputIssue(input);
  if (issue !== null) return settled({ type: "error", message: issue });
  if (input.signal.aborted) return settled({ type: "aborted", ...NO_OUTPUT });
  const paths = runPaths(runDir);
  const env = input.env ?? {};
  const hasEnv = Object.keys(env).length > 0;
  let process: Running | null = null;
  try {
    if (hasEnv) {
      const wrote = await runHelper(
        api,
        runDir,
        ["/bin/sh", "-c", WRITE_SECRET_FILE, "openma-secret", paths.envFile],
        Buffer.from(envFileText(env)),
      );
      if (wrote.type !== "exited" || wrote.exitCode !== 0) {
        const why = wrote.type === "lost" ? wrote.message : wrote.stderr.trim() || `exit code ${wrote.exitCode}`;
        return settled({ type: "error", message: `exec: could not deliver the environment: ${why}` });
      }
    }
    const argv = ["/bin/sh", "-c", EXEC_WRAPPER, "openma-exec", paths.pidFile, hasEnv ? paths.envFile : "", input.cwd, ...input.command];
    process = new Running(api, runDir, paths, hasEnv, input, startTimeoutMs);
    await process.start(argv);
    return process;
  } catch (err) {
    // Output can arrive before the start is confirmed (stdout and the start marker travel apart), and a
    // caller may abort on it: the aborted result still carries what was seen.
    if (input.signal.aborted) return settled({ type: "aborted", ...(process?.output() ?? NO_OUTPUT) });
    return settled({ type: "error", message: `exec: ${describe(err)}` });
  }
}

const NO_OUTPUT = { stdout: new Uint8Array(), stderr: new Uint8Array(), truncated: false };

function settled(result: ExecResult): RemoteProcess {
  const failedToStart = result.type === "error" ? result.message : null;
  return { write: async () => {}, closeStdin: () => {}, kill: async () => {}, done: Promise.resolve(result), failedToStart };
}

class Running implements RemoteProcess {
  readonly done: Promise<ExecResult>;
  readonly failedToStart = null;
  readonly #stdout: TailBuffer;
  readonly #stderr: TailBuffer;
  #command: RemoteCommand | null = null;
  #stdin: Stdin | null = null;
  #ending: "timeout" | "aborted" | null = null;
  #finished = false;
  #killing: Promise<void> | null = null;
  #resolve!: (result: ExecResult) => void;
  #timer: NodeJS.Timeout | null = null;
  readonly #onAbort = () => this.#stop("aborted");

  constructor(
    private readonly api: RemoteSandboxApi,
    private readonly runDir: string,
    private readonly paths: RunPaths,
    private readonly hasEnv: boolean,
    private readonly input: RemoteProcessInput,
    private readonly startTimeoutMs: number,
  ) {
    const limit = input.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
    this.#stdout = new TailBuffer(limit);
    this.#stderr = new TailBuffer(limit);
    this.done = new Promise((resolve) => {
      this.#resolve = resolve;
    });
  }

  async start(argv: readonly string[]): Promise<void> {
    const { command, stdin } = await launch(
      this.api,
      argv,
      this.paths.fifo,
      (stream, chunk) => {
        (stream === "stdout" ? this.#stdout : this.#stderr).push(Buffer.from(chunk));
        this.input.onOutput?.(stream, chunk);
      },
      this.input.signal,
      this.startTimeoutMs,
    );
    this.#command = command;
    this.#stdin = stdin;
    void command.done.then((end) => this.#finish(end));
    if (this.input.timeoutMs !== undefined) {
      this.#timer = setTimeout(() => this.#stop("timeout"), Math.min(Math.max(0, this.input.timeoutMs), MAX_TIMER_MS));
    }
    this.input.signal.addEventListener("abort", this.#onAbort, { once: true });
    if (this.input.signal.aborted) this.#stop("aborted");
  }

  write(chunk: Uint8Array | string): Promise<void> {
    if (this.#finished || this.#stdin === null) return Promise.reject(new Error("the process has ended"));
    return this.#stdin.write(typeof chunk === "string" ? Buffer.from(chunk) : chunk);
  }

  closeStdin(): void {
    void this.#stdin?.close().catch(() => {});
  }

  kill(): Promise<void> {
    this.#ending ??= "aborted";
    this.#killing ??= this.#killTree();
    return this.#killing;
  }

  #stop(why: "timeout" | "aborted"): void {
    if (this.#finished) return;
    this.#ending ??= why;
    void this.kill();
  }

  /**
   * KILL_TREE from the pid file, plus the provider's own kill. The pid file
   * may not exist yet (the wrapper is still starting): retry with a short
   * backoff until the command's stream ends.
   */
  async #killTree(): Promise<void> {
    void this.#command?.kill().catch(() => {});
    const envFile = this.hasEnv ? this.paths.envFile : "";
    for (let attempt = 0; attempt < KILL_ATTEMPTS && !this.#finished; attempt++) {
      try {
        const killed = await runHelper(
          this.api,
          this.runDir,
          ["/bin/sh", "-c", KILL_TREE, "openma-kill", this.paths.pidFile, envFile],
          undefined,
          this.startTimeoutMs,
        );
        if (killed.type === "exited" && killed.exitCode === 0) return;
      } catch {
        // The sandbox may be gone: then the command's stream ends on its own.
      }
      await new Promise((resolve) => setTimeout(resolve, Math.min(20 * 2 ** attempt, 500)));
    }
  }

  #finish(end: RemoteEnd): void {
    if (this.#finished) return;
    this.#finished = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.input.signal.removeEventListener("abort", this.#onAbort);
    this.#resolve(this.#result(end));
  }

  /** What the process printed so far. */
  output(): { stdout: Uint8Array; stderr: Uint8Array; truncated: boolean } {
    return { stdout: this.#stdout.bytes(), stderr: this.#stderr.bytes(), truncated: this.#stdout.truncated || this.#stderr.truncated };
  }

  #result(end: RemoteEnd): ExecResult {
    const out = this.output();
    if (this.#ending) return { type: this.#ending, ...out };
    if (end.type === "lost") return { type: "error", message: `exec: lost the process (${end.message})` };
    if (end.exitCode === 127) {
      const failure = this.#stderr
        .text()
        .split("\n")
        .find((line) => line.startsWith(WRAPPER_FAILURE));
      if (failure) return { type: "error", message: failure.slice(WRAPPER_FAILURE.length) };
    }
    return { type: "exited", exitCode: end.exitCode, signal: null, ...out };
  }
}
