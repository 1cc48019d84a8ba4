/**
 * Processes in a running sandbox.
 *
 * Why not plain `nsenter` into every namespace of the init: processes
 * entered that way would not carry the sandbox's seccomp filter or dropped
 * capability bounding set (those are per-process and only inherited), and
 * entering the init's user namespace grants full capabilities inside it.
 * Instead each exec is a fresh bwrap that *joins* the runtime:
 *
 *   [sh: enter the runtime's resource cgroup] → [prlimit] → nsenter --net --pid --ipc (the
 *   init's namespaces, opened by fd so a recycled pid cannot redirect them)
 *   → unshare --mount-proc (a private mount namespace whose /proc is the
 *   sandbox's: bwrap looks up its child in /proc by a pid of that namespace)
 *   → [setpriv: drop to the sandbox's host uid] → bwrap --userns <init's user
 *   namespace> --unshare-pid (a child pid namespace of the sandbox's) with
 *   the same mounts, seccomp filter and no capabilities → a tiny sh that
 *   closes the namespace fds and execs the command.
 *
 * The exec's own pid namespace is what makes "kill the whole tree" exact:
 * a kill SIGKILLs the launch chain's process group and every process whose
 * pid namespace is the exec's (bwrap reports it on --info-fd), including
 * daemons that called setsid. It is nested in the sandbox's pid namespace,
 * so terminating the sandbox kills every exec too. Uts is not joined (bwrap
 * cannot set up inside a joined uts namespace): each exec gets the same
 * hostname. Cgroup is not joined either: each exec unshares its own view.
 */

import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { readdir, readlink } from "node:fs/promises";
import type { Readable, Writable } from "node:stream";
import type { ExecInput, ExecResult } from "@openma/contract";
import { TailBuffer } from "@openma/driver-kit";
import { limitArgv, type ResourceLimits } from "./limits.ts";
import { isSameLiveProcess } from "./proc.ts";

export interface Tools {
  bwrap: string;
  nsenter: string;
  unshare: string;
  /** Absent: rlimits are not applied (declared by the driver). */
  prlimit: string | null;
  setpriv: string | null;
}

/** Everything needed to start a process in one running sandbox. */
export interface ExecContext {
  tools: Tools;
  initPid: number;
  initStart: number;
  hostname: string;
  sandboxUser: { uid: number; gid: number };
  /** Host identity to drop to before bwrap (when the driver runs as root), or null. */
  hostUser: { uid: number; gid: number } | null;
  layoutArgs: readonly string[];
  env: Readonly<Record<string, string>>;
  seccompFile: string | null;
  cgroupDirs: readonly string[];
  limits: ResourceLimits;
}

export type ProcessEnd = { type: "exited"; exitCode: number; signal: string | null } | { type: "error"; message: string };

/** A running process with duplex stdio; `kill` ends it and everything it started. */
export interface SandboxProcess {
  readonly stdin: Writable;
  readonly stdout: Readable;
  readonly stderr: Readable;
  /** Settles once the process is gone and its output is drained. */
  readonly done: Promise<ProcessEnd>;
  kill(): void;
}

/** Joined by fd; cgroup is not joined but unshared per exec (same view, and fds above 9 are out of reach of sh). */
const NAMESPACES = ["user", "net", "pid", "ipc"] as const;

/**
 * Runs inside the sandbox: closes the fds bwrap was given (dash can only
 * name fds 0-9, hence the tight numbering), reports "started" on fd 9, execs.
 */
const LAUNCH_SCRIPT = [
  "exec 3<&- 4<&- 5<&- 6<&- 7<&- 8>&-",
  'command -v "$1" >/dev/null 2>&1 || { echo "$1: command not found" >&2; exec 9>&-; exit 127; }',
  "printf s >&9",
  "exec 9>&-",
  'exec "$@"',
].join("\n");

export function envIssues(env: Readonly<Record<string, string>>): string[] {
  const issues: string[] = [];
  for (const [key, value] of Object.entries(env)) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) issues.push(`env: invalid variable name ${JSON.stringify(key)}`);
    else if (typeof value !== "string" || value.includes("\0")) issues.push(`env.${key}: must be a string without NUL`);
  }
  return issues;
}

function execArgv(ctx: ExecContext, command: readonly string[], cwd: string): string[] {
  const argv = limitArgv(ctx.cgroupDirs, ctx.tools.prlimit, ctx.limits);
  argv.push(ctx.tools.nsenter, "--net=/proc/self/fd/5", "--pid=/proc/self/fd/6", "--ipc=/proc/self/fd/7", "--");
  // bwrap reads /proc/<child> by the pid its clone returned, which is a pid of the sandbox's namespace: give it that namespace's /proc.
  argv.push(ctx.tools.unshare, "--mount-proc", "--");
  if (ctx.hostUser !== null && ctx.tools.setpriv !== null) {
    argv.push(ctx.tools.setpriv, `--reuid=${ctx.hostUser.uid}`, `--regid=${ctx.hostUser.gid}`, "--clear-groups", "--");
  }
  argv.push(ctx.tools.bwrap, "--userns", "3", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try", "--hostname", ctx.hostname);
  argv.push("--die-with-parent", "--new-session", "--cap-drop", "ALL", "--info-fd", "8");
  argv.push("--uid", String(ctx.sandboxUser.uid), "--gid", String(ctx.sandboxUser.gid));
  if (ctx.seccompFile !== null) argv.push("--seccomp", "4");
  argv.push(...ctx.layoutArgs, "--chdir", cwd, "--", "/bin/sh", "-c", LAUNCH_SCRIPT, "sh", ...command);
  return argv;
}

/**
 * Starts `command` in the sandbox. The environment is exactly `ctx.env` plus
 * `env` (the host's is never inherited) and travels in the process
 * environment, never in argv, so values do not show in `ps`.
 */
export async function spawnInSandbox(
  ctx: ExecContext,
  input: { command: readonly string[]; cwd: string; env?: Readonly<Record<string, string>> },
): Promise<{ ok: true; process: SandboxProcess } | { ok: false; message: string }> {
  if (input.command.length === 0 || !input.command[0]) return { ok: false, message: "exec: command is empty" };
  if (input.command.some((arg) => arg.includes("\0"))) return { ok: false, message: "exec: arguments must not contain NUL" };
  if (!input.cwd.startsWith("/")) return { ok: false, message: `exec: cwd ${JSON.stringify(input.cwd)} must be absolute` };
  const env = { ...ctx.env, ...(input.env ?? {}) };
  const issues = envIssues(env);
  if (issues.length > 0) return { ok: false, message: `exec: ${issues.join("; ")}` };

  const fds: number[] = [];
  try {
    for (const ns of NAMESPACES) fds.push(openSync(`/proc/${ctx.initPid}/ns/${ns}`, "r"));
    if (ctx.seccompFile !== null) fds.splice(1, 0, openSync(ctx.seccompFile, "r"));
    else fds.splice(1, 0, openSync("/dev/null", "r"));
  } catch {
    for (const fd of fds) closeSync(fd);
    return { ok: false, message: "the sandbox is not running" };
  }
  // Opened first, checked second: if the pid was recycled in between, the fds may name someone else's namespaces.
  if (!(await isSameLiveProcess(ctx.initPid, ctx.initStart))) {
    for (const fd of fds) closeSync(fd);
    return { ok: false, message: "the sandbox is not running" };
  }
  const [file, ...args] = execArgv(ctx, input.command, input.cwd);
  let child: ChildProcess;
  try {
    // detached: its own process group, so a kill reaches the launch chain before bwrap has set up the exec namespace.
    child = spawn(file as string, args, { env, stdio: ["pipe", "pipe", "pipe", ...fds, "pipe", "pipe"], detached: true });
  } catch (err) {
    return { ok: false, message: err instanceof Error ? err.message : String(err) };
  } finally {
    for (const fd of fds) closeSync(fd);
  }
  return { ok: true, process: wrap(child) };
}

/** SIGKILLs every host process whose pid namespace is `inode`: the whole exec, however its processes were started. */
async function killNamespace(inode: number): Promise<void> {
  const target = `pid:[${inode}]`;
  for (const name of await readdir("/proc").catch(() => [] as string[])) {
    if (!/^\d+$/.test(name)) continue;
    const ns = await readlink(`/proc/${name}/ns/pid`).catch(() => null);
    if (ns !== target) continue;
    try {
      process.kill(Number(name), "SIGKILL");
    } catch {
      // already gone
    }
  }
}

function wrap(child: ChildProcess): SandboxProcess {
  const stdio = child.stdio as unknown as Readable[];
  let started = false;
  let killed = false;
  let namespace: number | null = null;
  let stderrHead = "";
  const status = stdio[9] as Readable;
  status.on("data", () => {
    started = true;
  });
  status.on("error", () => {});
  // bwrap's --info-fd: the exec's pid namespace, written as soon as it exists.
  let info = "";
  const infoStream = stdio[8] as Readable;
  infoStream.on("data", (chunk: Buffer) => {
    info += chunk.toString("utf8");
  });
  infoStream.on("error", () => {});
  infoStream.on("end", () => {
    const inode = Number((/"pid-namespace":\s*(\d+)/.exec(info) ?? [])[1]);
    if (Number.isInteger(inode) && inode > 0) namespace = inode;
    if (killed && namespace !== null) void killNamespace(namespace);
  });
  const stderr = child.stderr as Readable;
  stderr.on("data", (chunk: Buffer) => {
    if (!started && stderrHead.length < 2048) stderrHead += chunk.toString("utf8");
  });
  child.stdin?.on("error", () => {}); // the process may exit without reading its input
  const done = new Promise<ProcessEnd>((resolve) => {
    child.once("error", (err) => resolve({ type: "error", message: err.message }));
    // After a kill, a straggler holding the pipes must not keep this pending: the exit of the launcher is enough.
    child.once("exit", (code, signal) => {
      if (killed) resolve({ type: "exited", exitCode: code ?? -1, signal });
    });
    child.once("close", (code, signal) => {
      if (!started && signal === null) {
        // Nothing ran: bwrap or the launcher refused (bad cwd, missing command).
        const reason = stderrHead.trim().replace(/^bwrap: /, "") || `exit code ${code}`;
        resolve({ type: "error", message: reason });
        return;
      }
      resolve({ type: "exited", exitCode: code ?? -1, signal });
    });
  });
  return {
    stdin: child.stdin as Writable,
    stdout: child.stdout as Readable,
    stderr,
    done,
    kill: () => {
      killed = true;
      try {
        if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
      } catch {
        // the group is already gone
      }
      if (namespace !== null) void killNamespace(namespace);
    },
  };
}

const DEFAULT_MAX_OUTPUT = 1024 * 1024;

/** `ToolSandboxPort.exec` on top of `spawnInSandbox`: stdin up front, streamed and captured output, timeout and abort. */
export async function execInSandbox(ctx: ExecContext, workdir: string, input: ExecInput): Promise<ExecResult> {
  const empty = () => ({ stdout: new Uint8Array(), stderr: new Uint8Array(), truncated: false });
  if (input.signal.aborted) return { type: "aborted", ...empty() };
  const started = await spawnInSandbox(ctx, { command: input.command, cwd: input.cwd ?? workdir, env: input.env });
  if (!started.ok) return { type: "error", message: started.message };
  const proc = started.process;
  const limit = input.maxOutputBytes ?? DEFAULT_MAX_OUTPUT;
  const stdout = new TailBuffer(limit);
  const stderr = new TailBuffer(limit);
  let ending: "timeout" | "aborted" | null = null;
  const stop = (why: "timeout" | "aborted") => {
    ending ??= why;
    proc.kill();
  };
  const timer = setTimeout(() => stop("timeout"), Math.max(0, input.timeoutMs));
  const onAbort = () => stop("aborted");
  input.signal.addEventListener("abort", onAbort, { once: true });
  proc.stdout.on("data", (chunk: Buffer) => {
    stdout.push(chunk);
    input.onOutput?.("stdout", chunk);
  });
  proc.stderr.on("data", (chunk: Buffer) => {
    stderr.push(chunk);
    input.onOutput?.("stderr", chunk);
  });
  proc.stdin.end(input.stdin ?? undefined);
  const end = await proc.done;
  clearTimeout(timer);
  input.signal.removeEventListener("abort", onAbort);
  const out = { stdout: stdout.bytes(), stderr: stderr.bytes(), truncated: stdout.truncated || stderr.truncated };
  if (ending) return { type: ending, ...out };
  if (end.type === "error") return { type: "error", message: end.message };
  return { type: "exited", exitCode: end.exitCode, signal: end.signal, ...out };
}
