/**
 * The persistent shell of the `bash` tool: one `bash` process per sandbox,
 * started through `ToolSandboxPort.spawnProcess`, fed one command at a time
 * (see `shell-script.ts` for the protocol).
 *
 * The shell lives in this server process. When it is gone (the sandbox was
 * replaced, the server restarted, the command ran `exit`, a timeout could
 * not be enforced inside the sandbox), the next call gets a fresh shell and
 * its output says so, so the model never assumes state that is not there.
 */
import { randomBytes } from "node:crypto";
import type { SandboxProcess, ToolSandboxPort } from "@openma/contract";
import { commandLine, endMarker, LAUNCH, READY_MARKER, SHELL_INIT, timeoutMarker } from "./shell-script.ts";

/** How long after its timeout a command may take to stop before the shell is replaced instead. */
export const SHELL_BACKSTOP_MS = 10_000;
/** Bound on the shell reporting ready after it is started. */
const START_TIMEOUT_MS = 30_000;

export type ShellRun =
  /** `exitBuiltin`: the command ran `exit`; the shell was replaced in place (see `shell-init.bash`). */
  | { type: "exited"; exitCode: number; output: string; truncated: boolean; exitBuiltin: boolean }
  /** `shellReplaced`: the command did not stop inside the sandbox, so the whole shell was killed. */
  | { type: "timeout"; output: string; truncated: boolean; shellReplaced: boolean }
  | { type: "aborted"; output: string; truncated: boolean }
  /** The shell itself ended during the command (`exit`, killed, the sandbox went away). */
  | { type: "shell_ended"; output: string; truncated: boolean; detail: string };

type Waiter = { resolve: (run: ShellRun) => void; nonce: string; timedOut: boolean };

/**
 * A running shell. Output is kept as text (the tool returns text), bounded:
 * past `2 * limit` characters the head is dropped and `truncated` is set.
 */
export class SandboxShell {
  #buffer = "";
  #truncated = false;
  #waiter: Waiter | null = null;
  #ended: string | null = null;
  #ready: (() => void) | null = null;
  /** The bash in place after an `exit` has not been given the program yet. */
  #needsInit = false;
  readonly #decoder = new TextDecoder("utf-8");

  private constructor(private readonly limit: number) {}

  #process: SandboxProcess | null = null;

  /** Starts a shell in the sandbox; a string is why it could not start. */
  static async start(port: ToolSandboxPort, limit: number, signal: AbortSignal): Promise<SandboxShell | string> {
    if (!port.spawnProcess) return "this sandbox cannot keep a process running";
    const shell = new SandboxShell(limit);
    const ready = new Promise<void>((resolve) => {
      shell.#ready = resolve;
    });
    const started = await port.spawnProcess({
      command: ["/bin/sh", "-c", LAUNCH],
      cwd: port.workdir,
      onOutput: (_stream, chunk) => shell.#onOutput(chunk),
    });
    if (started.type === "error") return started.message;
    shell.#process = started.process;
    void started.process.done.then((end) => {
      shell.#onEnd(end.type === "exited" ? `exit ${end.exitCode}${end.signal ? ` (${end.signal})` : ""}` : end.type);
    });
    try {
      await started.process.write(SHELL_INIT);
    } catch (err) {
      await shell.kill();
      return `the shell did not accept input: ${err instanceof Error ? err.message : String(err)}`;
    }
    let timer: NodeJS.Timeout | undefined;
    const outcome = await new Promise<"ready" | "ended" | "timeout" | "aborted">((resolve) => {
      void ready.then(() => resolve("ready"));
      void started.process.done.then(() => resolve("ended"));
      timer = setTimeout(() => resolve("timeout"), START_TIMEOUT_MS);
      signal.addEventListener("abort", () => resolve("aborted"), { once: true });
    });
    clearTimeout(timer);
    if (outcome === "ready") return shell;
    await shell.kill();
    if (outcome === "ended") return `the shell exited at start: ${shell.#buffer.trim() || shell.#ended}`;
    return outcome === "aborted" ? "aborted" : "the shell did not start in time";
  }

  get alive(): boolean {
    return this.#ended === null;
  }

  #onOutput(chunk: Uint8Array): void {
    this.#buffer += this.#decoder.decode(chunk, { stream: true });
    const at = this.#buffer.indexOf(READY_MARKER);
    if (this.#ready) {
      if (at < 0) return;
      this.#buffer = this.#buffer.slice(at + READY_MARKER.length);
      this.#ready();
      this.#ready = null;
    } else if (at >= 0) {
      // The program was sent again after an `exit`: its ready line is not output.
      this.#buffer = this.#buffer.slice(0, at) + this.#buffer.slice(at + READY_MARKER.length);
    }
    const waiter = this.#waiter;
    if (waiter && this.#settle(waiter)) return;
    // Keep a tail long enough to hold any marker that is still arriving.
    const keep = 2 * this.limit + 256;
    if (this.#buffer.length > keep) {
      this.#buffer = this.#buffer.slice(this.#buffer.length - keep);
      this.#truncated = true;
    }
  }

  /** Resolves the waiter when its end marker is in; true when it did. */
  #settle(waiter: Waiter): boolean {
    const timeout = timeoutMarker(waiter.nonce);
    const t = this.#buffer.indexOf(timeout);
    if (t >= 0) {
      waiter.timedOut = true;
      this.#buffer = this.#buffer.slice(0, t) + this.#buffer.slice(t + timeout.length);
    }
    const end = endMarker(waiter.nonce);
    const e = this.#buffer.indexOf(end);
    if (e >= 0) {
      const newline = this.#buffer.indexOf("\n", e + end.length);
      if (newline < 0) return false; // the status has not fully arrived yet
      const [status, how] = this.#buffer.slice(e + end.length, newline).split(" ");
      const exitCode = Number(status);
      const exitBuiltin = how === "exit";
      if (exitBuiltin) this.#needsInit = true;
      const output = this.#buffer.slice(0, e);
      const truncated = this.#truncated;
      this.#buffer = this.#buffer.slice(newline + 1);
      this.#truncated = false;
      this.#waiter = null;
      waiter.resolve(
        waiter.timedOut
          ? { type: "timeout", output, truncated, shellReplaced: false }
          : { type: "exited", exitCode, output, truncated, exitBuiltin },
      );
      return true;
    }
    return false;
  }

  #onEnd(detail: string): void {
    this.#ended = detail;
    const waiter = this.#waiter;
    if (!waiter) return;
    this.#waiter = null;
    const out = { output: this.#buffer.replace(/\n$/, ""), truncated: this.#truncated };
    waiter.resolve(waiter.timedOut ? { type: "timeout", ...out, shellReplaced: true } : { type: "shell_ended", ...out, detail });
  }

  /**
   * Runs one command (the caller serializes calls). Output that background
   * jobs wrote since the previous command comes first, as on a terminal.
   */
  async run(command: string, timeoutMs: number, signal: AbortSignal): Promise<ShellRun> {
    if (this.#ended !== null || this.#process === null)
      return { type: "shell_ended", output: "", truncated: false, detail: this.#ended ?? "not started" };
    const nonce = randomBytes(12).toString("hex");
    const result = new Promise<ShellRun>((resolve) => {
      this.#waiter = { resolve, nonce, timedOut: false };
    });
    const process = this.#process;
    const program = this.#needsInit ? SHELL_INIT : "";
    this.#needsInit = false;
    try {
      await process.write(program + commandLine(command, timeoutMs, nonce));
    } catch {
      // The shell is gone: `done` settles and `#onEnd` answers the waiter.
    }
    // Backstop: the watchdog inside the sandbox should have ended the command by now.
    const backstop = setTimeout(() => {
      if (this.#waiter?.nonce !== nonce) return;
      this.#waiter.timedOut = true;
      void this.kill();
    }, timeoutMs + SHELL_BACKSTOP_MS);
    const onAbort = () => {
      const waiter = this.#waiter;
      if (waiter?.nonce !== nonce) return;
      this.#waiter = null;
      waiter.resolve({ type: "aborted", output: this.#buffer, truncated: this.#truncated });
      void this.kill();
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    try {
      return await result;
    } finally {
      clearTimeout(backstop);
      signal.removeEventListener("abort", onAbort);
    }
  }

  /** Kills the shell and everything it started; resolves once it is gone. */
  async kill(): Promise<void> {
    const process = this.#process;
    if (!process) return;
    await process.kill().catch(() => {});
    await process.done;
  }
}
