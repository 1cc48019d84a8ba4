/**
 * One line of `/proc/<pid>/stat`, for the benches that measure processes' CPU
 * and find their children. Times are in seconds (the kernel counts clock
 * ticks of 1/100 s here).
 */
import { readFile } from "node:fs/promises";

const TICKS_PER_SECOND = 100;

export interface ProcStat {
  ppid: number;
  comm: string;
  /** utime + stime: CPU the process itself used. */
  cpuSeconds: number;
  /** cutime + cstime: CPU of its children it reaped. */
  childrenCpuSeconds: number;
}

/** Parses `pid (comm) state ppid ...`; comm may hold spaces and parentheses, so fields are read after its last `)`. */
export function parseProcStat(stat: string): ProcStat {
  const close = stat.lastIndexOf(")");
  // Counted from the state field as 0: ppid 1, utime 11, stime 12, cutime 13, cstime 14.
  const f = stat
    .slice(close + 2)
    .split(" ")
    .map(Number);
  return {
    ppid: f[1] ?? 0,
    comm: stat.slice(stat.indexOf("(") + 1, close),
    cpuSeconds: ((f[11] ?? 0) + (f[12] ?? 0)) / TICKS_PER_SECOND,
    childrenCpuSeconds: ((f[13] ?? 0) + (f[14] ?? 0)) / TICKS_PER_SECOND,
  };
}

/** The process's stat, or null once it is gone. */
export async function readProcStat(pid: number | string): Promise<ProcStat | null> {
  const stat = await readFile(`/proc/${pid}/stat`, "utf8").catch(() => "");
  return stat ? parseProcStat(stat) : null;
}
