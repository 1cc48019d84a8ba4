/**
 * Host-side process facts from /proc. A pid alone is not an identity (the
 * kernel reuses pids), so every check pairs it with the process start time
 * (field 22 of /proc/<pid>/stat, in clock ticks since boot): a signal is only
 * ever sent to the exact process we started.
 */
import { readFile } from "node:fs/promises";

export interface ProcessStat {
  pid: number;
  /** Executable name, truncated by the kernel to 15 bytes. */
  comm: string;
  /** One-letter state; `Z` (zombie) and `X` (dead) count as gone. */
  state: string;
  ppid: number;
  startTime: number;
}

/** Parses /proc/<pid>/stat; `comm` may contain spaces and parentheses, so split at the last `)`. */
export function parseStat(pid: number, text: string): ProcessStat | null {
  const open = text.indexOf("(");
  const close = text.lastIndexOf(")");
  if (open < 0 || close < open) return null;
  const rest = text
    .slice(close + 2)
    .trim()
    .split(" ");
  // rest[0] is field 3 (state); field 22 (starttime) is rest[19].
  const state = rest[0];
  const ppid = Number(rest[1]);
  const startTime = Number(rest[19]);
  if (!state || !Number.isInteger(ppid) || !Number.isInteger(startTime)) return null;
  return { pid, comm: text.slice(open + 1, close), state, ppid, startTime };
}

export async function readStat(pid: number): Promise<ProcessStat | null> {
  if (!Number.isInteger(pid) || pid <= 0) return null;
  try {
    return parseStat(pid, await readFile(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return null;
  }
}

/** True while `pid` is the process that started at `startTime` and has not exited. */
export async function isSameLiveProcess(pid: number, startTime: number): Promise<boolean> {
  const stat = await readStat(pid);
  return stat !== null && stat.startTime === startTime && stat.state !== "Z" && stat.state !== "X";
}

/** SIGKILLs `pid` only if it is still the process that started at `startTime`; false when it was already gone. */
export async function killExact(pid: number, startTime: number): Promise<boolean> {
  if (!(await isSameLiveProcess(pid, startTime))) return false;
  try {
    process.kill(pid, "SIGKILL");
    return true;
  } catch {
    return false; // ESRCH: it exited between the check and the signal
  }
}

/**
 * Polls until the process is gone or `timeoutMs` passes. A SIGKILLed process
 * needs the kernel to tear down its memory before it disappears, which is
 * not instantaneous for a large process.
 */
export async function waitGone(pid: number, startTime: number, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 2; ; delay = Math.min(delay * 2, 50)) {
    if (!(await isSameLiveProcess(pid, startTime))) return true;
    if (Date.now() >= deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, delay));
  }
}
