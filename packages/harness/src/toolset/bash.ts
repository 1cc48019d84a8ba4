/**
 * `bash`: commands run in a persistent `/bin/bash --noprofile --norc` of the
 * session's sandbox (`shell.ts`): the working directory, exported variables
 * and background jobs carry over between calls, stdout and stderr merged.
 * `restart` replaces the shell. A timed-out command is killed and the shell
 * stays (with its state); a shell that is gone is replaced by a fresh one
 * and the output says so.
 *
 * A sandbox without `spawnProcess` runs each command in a fresh shell
 * started in the workspace, and says so in the first output.
 */
import type { ToolSandboxPort } from "@openma/contract";
import {
  decoder,
  fail,
  type Input,
  keepTail,
  ok,
  optionalBoolean,
  optionalString,
  stripAnsi,
  ToolError,
  type ToolOutput,
} from "./common.ts";
import { SandboxShell, type ShellRun } from "./shell.ts";

export const BASH_OUTPUT_LIMIT = 100 * 1024;
export const BASH_DEFAULT_TIMEOUT_MS = 120_000;
const BASH_MAX_TIMEOUT_MS = 600_000;

function timeoutOf(input: Input): number {
  const v = input.timeout_ms;
  if (v === undefined || v === null) return BASH_DEFAULT_TIMEOUT_MS;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw new ToolError("bash: timeout_ms must be a non-negative integer");
  return Math.min(v, BASH_MAX_TIMEOUT_MS);
}

function shape(raw: Uint8Array | string, truncated: boolean): string {
  const text = stripAnsi(typeof raw === "string" ? raw : decoder.decode(raw)).replace(/\n+$/, "");
  const cut = keepTail(text, BASH_OUTPUT_LIMIT, "[output truncated]");
  // The sandbox may already have dropped the head to respect the same bound.
  return truncated && cut === text ? `[output truncated]\n${text}` : cut;
}

/** What the caller knows about the session: whether it ran `bash` before (maybe in another process or sandbox). */
export interface BashContext {
  priorBashCalls: boolean;
}

interface ShellSlot {
  shell: SandboxShell | null;
  /** Why the last shell of this sandbox is gone, for the next call's notice. */
  gone: string | null;
  /** Calls on one shell run one at a time. */
  queue: Promise<unknown>;
}

/** One slot per sandbox port: a replaced sandbox is a new port, hence a new shell. */
const slots = new WeakMap<ToolSandboxPort, ShellSlot>();

const EXIT_NOTICE =
  "[bash: the command ran `exit`, so the shell was restarted in place: the working directory, exported variables and " +
  "background processes are kept; other variables and functions are not]";

const FRESH_SHELL = "it starts in the workspace directory, without earlier variables or background jobs";

function slotOf(port: ToolSandboxPort, context: BashContext): ShellSlot {
  let slot = slots.get(port);
  if (!slot) {
    const gone = context.priorBashCalls ? "the previous shell is gone (the sandbox was replaced or the server restarted)" : null;
    slot = { shell: null, gone, queue: Promise.resolve() };
    slots.set(port, slot);
  }
  return slot;
}

function serialized<T>(slot: ShellSlot, work: () => Promise<T>): Promise<T> {
  const next = slot.queue.then(work, work);
  slot.queue = next.catch(() => {});
  return next;
}

function describeRun(run: ShellRun, timeoutMs: number, notice: string): ToolOutput {
  const prefix = notice ? `${notice}\n` : "";
  const output = shape(run.output, run.truncated);
  switch (run.type) {
    case "aborted":
      return fail(`${prefix}bash: aborted (the shell was stopped; the next call starts a new one)`);
    case "timeout": {
      const what = run.shellReplaced
        ? "the command did not stop, so the shell was killed; the next call starts a new one"
        : "the command was killed; the shell, its working directory and variables are kept";
      return fail(`${prefix}bash: command timed out after ${timeoutMs} ms (${what})${output ? `\n${output}` : ""}`);
    }
    case "shell_ended":
      return fail(`${prefix}${output ? `${output}\n` : ""}bash: the shell ended (${run.detail}); the next call starts a new one`);
    case "exited": {
      const replaced = run.exitBuiltin ? `\n${EXIT_NOTICE}` : "";
      if (run.exitCode === 0) return ok(`${prefix}${output}${replaced}`.replace(/^\n/, ""));
      return fail(`${prefix}${output || `exit ${run.exitCode}`}${replaced}`);
    }
  }
}

async function runInShell(
  port: ToolSandboxPort,
  slot: ShellSlot,
  command: string | undefined,
  restart: boolean,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<ToolOutput> {
  if (restart && slot.shell) {
    await slot.shell.kill();
    slot.shell = null;
    slot.gone = null;
  }
  let notice = "";
  if (!slot.shell?.alive) {
    const previous = slot.shell ? `the previous shell ended` : slot.gone;
    slot.shell = null;
    const started = await SandboxShell.start(port, BASH_OUTPUT_LIMIT, signal);
    if (typeof started === "string") return fail(`bash: could not start a shell: ${started}`);
    slot.shell = started;
    slot.gone = null;
    if (restart) notice = "[bash: the shell was restarted]";
    else if (previous) notice = `[bash: a new shell was started: ${previous}; ${FRESH_SHELL}]`;
  } else if (restart) notice = "[bash: the shell was restarted]";
  if (!command) return ok(notice.replace(/^\[bash: (.*)\]$/, "$1"));
  const run = await slot.shell.run(command, timeoutMs, signal);
  return describeRun(run, timeoutMs, notice);
}

/** The fallback for sandboxes without long-lived processes: a fresh shell per call. */
async function runOnce(port: ToolSandboxPort, command: string, timeoutMs: number, signal: AbortSignal): Promise<ToolOutput> {
  const result = await port.exec({
    // `exec 2>&1` first, so both streams reach the model in the order they were written.
    command: ["/bin/bash", "--noprofile", "--norc", "-c", `exec 2>&1\n${command}`],
    timeoutMs,
    signal,
    maxOutputBytes: BASH_OUTPUT_LIMIT,
  });
  switch (result.type) {
    case "error":
      return fail(`bash: ${result.message}`);
    case "aborted":
      return fail("bash: aborted");
    case "timeout": {
      const output = shape(result.stdout, result.truncated);
      return fail(`bash: command timed out after ${timeoutMs} ms${output ? `\n${output}` : ""}`);
    }
    case "exited": {
      const output = shape(result.stdout, result.truncated);
      if (result.exitCode === 0) return ok(output);
      const status = result.signal ? `killed by ${result.signal}` : `exit ${result.exitCode}`;
      return fail(output || status);
    }
  }
}

export async function runBash(
  port: ToolSandboxPort,
  input: Input,
  signal: AbortSignal,
  context: BashContext = { priorBashCalls: false },
): Promise<ToolOutput> {
  const command = optionalString("bash", input, "command");
  const restart = optionalBoolean("bash", input, "restart");
  if (!command && !restart) throw new ToolError("bash: command is required");
  if (command?.includes("\0")) throw new ToolError("bash: command must not contain NUL characters");
  const timeoutMs = timeoutOf(input);
  // The SDK worker's semantics: 0 is an immediate timeout (decided here, not raced against a fast command).
  if (command && timeoutMs === 0) return fail("bash: command timed out after 0 ms");
  if (!port.spawnProcess) {
    if (!command) return ok("bash session restarted");
    const out = await runOnce(port, command, timeoutMs, signal);
    if (context.priorBashCalls) return out;
    return {
      ...out,
      text: `[bash: this sandbox keeps no shell between calls: each command starts in a fresh shell in the workspace]\n${out.text}`,
    };
  }
  const slot = slotOf(port, context);
  return serialized(slot, () => runInShell(port, slot, command, restart, timeoutMs, signal));
}
