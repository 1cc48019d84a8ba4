/**
 * Resource limits, enforced by the strongest mechanism the host offers:
 *
 * - cgroup v2, when the operator delegates a parent cgroup (`cgroupParent`,
 *   e.g. a systemd unit with `Delegate=yes`): one child cgroup per runtime
 *   with `memory.max` (and no swap), `pids.max` and `cpu.max`, covering every
 *   process of the runtime together; terminate also kills through it.
 * - otherwise rlimits, set with `prlimit` on every process the driver starts
 *   and inherited by their children. They are per process, not per sandbox:
 *   RLIMIT_DATA caps each process's data segment (not the sandbox's total
 *   memory), RLIMIT_NPROC counts every process of the host uid the sandbox
 *   runs as (so sandboxes sharing that uid share the budget, and it is not
 *   enforced at all for host root), and CPU time is not limited.
 *
 * `limitEnforcement` reports which applies, so a deployment can see exactly
 * what is and is not enforced.
 */
import { access, mkdir, readFile, rmdir, writeFile } from "node:fs/promises";
import { join } from "node:path";

export interface ResourceLimits {
  /** Whole sandbox (cgroup) or per process data segment (rlimit). */
  memoryBytes: number;
  /** Processes and threads: whole sandbox (cgroup) or per host uid (rlimit). */
  pids: number;
  /** CPUs' worth of time per period (cgroup only). */
  cpus: number;
  /** Open files per process (RLIMIT_NOFILE, both modes). */
  openFiles: number;
  /** Largest file a process may write (RLIMIT_FSIZE, both modes). */
  fileSizeBytes: number;
}

export const DEFAULT_LIMITS: ResourceLimits = {
  memoryBytes: 2 * 1024 ** 3,
  pids: 1024,
  cpus: 2,
  openFiles: 4096,
  fileSizeBytes: 8 * 1024 ** 3,
};

export interface LimitEnforcement {
  mechanism: "cgroup_v2" | "rlimit";
  memory: "cgroup_memory_max" | "rlimit_data_per_process";
  pids: "cgroup_pids_max" | "rlimit_nproc_per_host_uid" | "not_enforced_for_host_root";
  cpu: "cgroup_cpu_max" | "not_enforced";
  openFiles: "rlimit_nofile_per_process";
  fileSize: "rlimit_fsize_per_process";
}

export function limitEnforcement(cgroup: boolean, hostUid: number): LimitEnforcement {
  return {
    mechanism: cgroup ? "cgroup_v2" : "rlimit",
    memory: cgroup ? "cgroup_memory_max" : "rlimit_data_per_process",
    pids: cgroup ? "cgroup_pids_max" : hostUid === 0 ? "not_enforced_for_host_root" : "rlimit_nproc_per_host_uid",
    cpu: cgroup ? "cgroup_cpu_max" : "not_enforced",
    openFiles: "rlimit_nofile_per_process",
    fileSize: "rlimit_fsize_per_process",
  };
}

/** Problems with limits (empty when valid); bounded so every value fits the kernel interfaces. */
export function limitIssues(limits: ResourceLimits): string[] {
  const issues: string[] = [];
  const check = (field: keyof ResourceLimits, min: number, max: number) => {
    const value = limits[field];
    if (!Number.isFinite(value) || value < min || value > max) issues.push(`limits.${field}: must be between ${min} and ${max}`);
    else if (field !== "cpus" && !Number.isInteger(value)) issues.push(`limits.${field}: must be an integer`);
  };
  check("memoryBytes", 16 * 1024 ** 2, 2 ** 50);
  check("pids", 8, 4_194_304);
  check("cpus", 0.01, 4096);
  check("openFiles", 64, 1_048_576);
  check("fileSizeBytes", 1024 ** 2, 2 ** 50);
  return issues;
}

/** `prlimit` arguments that apply the rlimits to the command that follows (hard = soft, so a process cannot raise them). */
export function prlimitArgs(limits: ResourceLimits, cgroup: boolean): string[] {
  const both = (name: string, value: number) => `--${name}=${value}:${value}`;
  const args = [both("nofile", limits.openFiles), both("fsize", limits.fileSizeBytes)];
  // Under a cgroup the sandbox-wide limits are stronger; per-process ones would only get in the way.
  if (!cgroup) args.push(both("data", limits.memoryBytes), both("nproc", limits.pids));
  return args;
}

/** cgroup v2 `cpu.max`: quota and period in microseconds. */
export function cpuMax(cpus: number, periodUs = 100_000): string {
  return `${Math.max(1000, Math.round(cpus * periodUs))} ${periodUs}`;
}

const REQUIRED_CONTROLLERS = ["memory", "pids", "cpu"];

/** A delegated cgroup v2 parent under which each runtime gets its own child. */
export class CgroupParent {
  constructor(readonly path: string) {}

  /** Null when usable; otherwise why not. Enables the controllers for children when they are not yet. */
  async probe(): Promise<string | null> {
    let controllers: string[];
    try {
      controllers = (await readFile(join(this.path, "cgroup.controllers"), "utf8")).trim().split(/\s+/);
    } catch {
      return `${this.path} is not a cgroup v2 directory`;
    }
    const missing = REQUIRED_CONTROLLERS.filter((name) => !controllers.includes(name));
    if (missing.length > 0) return `cgroup ${this.path} lacks controllers: ${missing.join(", ")}`;
    const enabled = (await readFile(join(this.path, "cgroup.subtree_control"), "utf8")).trim().split(/\s+/);
    const toEnable = REQUIRED_CONTROLLERS.filter((name) => !enabled.includes(name));
    if (toEnable.length === 0) return null;
    try {
      await writeFile(join(this.path, "cgroup.subtree_control"), toEnable.map((name) => `+${name}`).join(" "));
      return null;
    } catch (err) {
      // EBUSY: the parent itself holds processes (cgroup v2 forbids controllers on such a node).
      return `cannot enable ${toEnable.join(", ")} for children of ${this.path}: ${(err as Error).message}`;
    }
  }

  dirFor(runtimeId: string): string {
    return join(this.path, `openma-${runtimeId}`);
  }

  async create(runtimeId: string, limits: ResourceLimits): Promise<string> {
    const dir = this.dirFor(runtimeId);
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, "memory.max"), String(limits.memoryBytes));
    // Swap would let the sandbox exceed memory.max through the back door.
    await writeFile(join(dir, "memory.swap.max"), "0").catch(() => {});
    await writeFile(join(dir, "pids.max"), String(limits.pids));
    await writeFile(join(dir, "cpu.max"), cpuMax(limits.cpus));
    return dir;
  }

  /** Kills every process in the runtime's cgroup (cgroup.kill where the kernel has it, else one by one). */
  static async kill(dir: string): Promise<void> {
    const killFile = join(dir, "cgroup.kill");
    const hasKill = await access(killFile).then(
      () => true,
      () => false,
    );
    if (hasKill) {
      await writeFile(killFile, "1").catch(() => {});
      return;
    }
    for (let round = 0; round < 10; round++) {
      const pids = await readPids(dir);
      if (pids.length === 0) return;
      for (const pid of pids) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // already gone
        }
      }
    }
  }

  /** Removes the cgroup once it is empty; true when it is gone. */
  static async remove(dir: string): Promise<boolean> {
    for (let attempt = 0; attempt < 50; attempt++) {
      try {
        await rmdir(dir);
        return true;
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === "ENOENT") return true;
        if (code !== "EBUSY") return false;
        // Killed processes leave the cgroup only once the kernel has reaped them.
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    }
    return false;
  }
}

async function readPids(dir: string): Promise<number[]> {
  try {
    return (await readFile(join(dir, "cgroup.procs"), "utf8"))
      .split("\n")
      .filter((line) => line.trim() !== "")
      .map(Number);
  } catch {
    return [];
  }
}
