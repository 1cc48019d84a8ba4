/**
 * The long-lived part of a sandbox: one bwrap that creates every namespace
 * (user, pid, ipc, uts, network, cgroup where the kernel allows) and runs a
 * shell that prints "ready" and then blocks reading its stdin. Its pid 1 is
 * the anchor every exec joins and the handle terminate kills.
 *
 * It ends when any of these happens: we SIGKILL its pid 1, the host process
 * dies (`--die-with-parent`), or the host closes its stdin.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import type { Readable } from "node:stream";
import type { Tools } from "./exec.ts";
import { limitArgv, type ResourceLimits } from "./limits.ts";
import { readStat } from "./proc.ts";

export interface InitSpec {
  tools: Tools;
  hostname: string;
  sandboxUser: { uid: number; gid: number };
  hostUser: { uid: number; gid: number } | null;
  layoutArgs: readonly string[];
  seccompFile: string | null;
  cgroupDirs: readonly string[];
  limits: ResourceLimits;
  cwd: string;
  timeoutMs: number;
  signal: AbortSignal;
}

export type InitResult =
  | { ok: true; child: ChildProcess; initPid: number; initStart: number; outerPid: number; outerStart: number }
  | { ok: false; reason: string; retryable: boolean };

const INIT_SCRIPT = "exec 3>&- 4<&-; echo ready; read -r _ || true";

function initArgv(spec: InitSpec): string[] {
  const argv = limitArgv(spec.cgroupDirs, spec.tools.prlimit, spec.limits);
  if (spec.hostUser !== null && spec.tools.setpriv !== null) {
    argv.push(spec.tools.setpriv, `--reuid=${spec.hostUser.uid}`, `--regid=${spec.hostUser.gid}`, "--clear-groups", "--");
  }
  argv.push(spec.tools.bwrap, "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try");
  argv.push("--hostname", spec.hostname, "--die-with-parent", "--new-session", "--cap-drop", "ALL");
  argv.push("--uid", String(spec.sandboxUser.uid), "--gid", String(spec.sandboxUser.gid), "--info-fd", "3");
  if (spec.seccompFile !== null) argv.push("--seccomp", "4");
  argv.push(...spec.layoutArgs, "--chdir", spec.cwd, "--", "/bin/sh", "-c", INIT_SCRIPT);
  return argv;
}

function readAll(stream: Readable): Promise<string> {
  return new Promise((resolve) => {
    let text = "";
    stream.on("data", (chunk: Buffer) => {
      if (text.length < 65536) text += chunk.toString("utf8");
    });
    stream.once("close", () => resolve(text));
    stream.once("error", () => resolve(text));
  });
}

export async function startInit(spec: InitSpec): Promise<InitResult> {
  const seccompFd = openSync(spec.seccompFile ?? "/dev/null", "r");
  const [file, ...args] = initArgv(spec);
  let child: ChildProcess;
  try {
    child = spawn(file as string, args, { stdio: ["pipe", "pipe", "pipe", "pipe", seccompFd], env: { PATH: "/usr/bin:/bin" } });
  } catch (err) {
    return { ok: false, reason: `cannot start bwrap: ${(err as Error).message}`, retryable: false };
  } finally {
    closeSync(seccompFd);
  }
  const info = readAll(child.stdio[3] as Readable);
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    if (stderr.length < 4096) stderr += chunk.toString("utf8");
  });
  child.stdin?.on("error", () => {});
  let timer: NodeJS.Timeout | undefined;
  let onAbort = () => {};
  const outcome = await new Promise<"ready" | "exited" | "timeout" | "aborted" | "error">((resolve) => {
    timer = setTimeout(() => resolve("timeout"), spec.timeoutMs);
    onAbort = () => resolve("aborted");
    if (spec.signal.aborted) resolve("aborted");
    spec.signal.addEventListener("abort", onAbort, { once: true });
    let out = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      out += chunk.toString("utf8");
      if (out.includes("ready\n")) resolve("ready");
    });
    child.once("exit", () => resolve("exited"));
    child.once("error", () => resolve("error"));
  });
  clearTimeout(timer);
  spec.signal.removeEventListener("abort", onAbort);
  if (outcome !== "ready") {
    child.kill("SIGKILL");
    await new Promise((resolve) => (child.exitCode !== null || child.signalCode !== null ? resolve(null) : child.once("close", resolve)));
    const detail = stderr.trim().replace(/^bwrap: /, "") || outcome;
    if (outcome === "timeout") return { ok: false, reason: `sandbox did not start within ${spec.timeoutMs} ms`, retryable: true };
    if (outcome === "aborted") return { ok: false, reason: "acquire was aborted", retryable: true };
    return { ok: false, reason: `bwrap failed to start the sandbox: ${detail}`, retryable: false };
  }
  // bwrap writes --info-fd before it runs the command and closes it, so it is complete by now.
  let initPid: number;
  try {
    initPid = Number((JSON.parse(await info) as { "child-pid"?: unknown })["child-pid"]);
  } catch {
    initPid = Number.NaN;
  }
  const [initStat, outerStat] = await Promise.all([readStat(initPid), readStat(child.pid ?? -1)]);
  if (initStat === null || outerStat === null) {
    child.kill("SIGKILL");
    return { ok: false, reason: "bwrap started but its processes could not be identified", retryable: true };
  }
  // Nothing else is read from these; keep them flowing so a chatty init cannot block on a full pipe.
  child.stdout?.resume();
  child.stderr?.resume();
  return { ok: true, child, initPid, initStart: initStat.startTime, outerPid: outerStat.pid, outerStart: outerStat.startTime };
}
