/**
 * Resource limits, enforced by the strongest mechanism the host offers:
 *
 * - cgroup v2, when the operator delegates a parent cgroup (`cgroupParent`,
 *   e.g. a systemd unit with `Delegate=yes`): one child cgroup per runtime
 *   with `memory.max` (and no swap), `pids.max` and `cpu.max`, covering every
 *   process of the runtime together; terminate also kills through it.
 * - cgroup v1, when the host mounts the v1 `memory`, `pids` and `cpu`
 *   hierarchies and the driver runs as root (as Docker does on the same
 *   host): one cgroup per runtime in each, nested under the server's own
 *   cgroup so the host's accounting of the server still covers its
 *   sandboxes, with `memory.limit_in_bytes` (and the same memory+swap
 *   limit), `pids.max` and a CFS quota.
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
import { accessSync, constants, existsSync, readFileSync } from "node:fs";
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

export type CgroupMechanism = "cgroup_v2" | "cgroup_v1";

export interface LimitEnforcement {
  mechanism: CgroupMechanism | "rlimit";
  memory: "cgroup_memory_max" | "cgroup_v1_memory_limit" | "rlimit_data_per_process";
  pids: "cgroup_pids_max" | "rlimit_nproc_per_host_uid" | "not_enforced_for_host_root";
  cpu: "cgroup_cpu_max" | "cgroup_v1_cfs_quota" | "not_enforced";
  openFiles: "rlimit_nofile_per_process";
  fileSize: "rlimit_fsize_per_process";
}

export function limitEnforcement(cgroup: CgroupMechanism | null, hostUid: number): LimitEnforcement {
  const files = "rlimit_nofile_per_process" as const;
  const sizes = "rlimit_fsize_per_process" as const;
  if (cgroup === "cgroup_v2")
    return {
      mechanism: cgroup,
      memory: "cgroup_memory_max",
      pids: "cgroup_pids_max",
      cpu: "cgroup_cpu_max",
      openFiles: files,
      fileSize: sizes,
    };
  if (cgroup === "cgroup_v1")
    return {
      mechanism: cgroup,
      memory: "cgroup_v1_memory_limit",
      pids: "cgroup_pids_max",
      cpu: "cgroup_v1_cfs_quota",
      openFiles: files,
      fileSize: sizes,
    };
  return {
    mechanism: "rlimit",
    memory: "rlimit_data_per_process",
    pids: hostUid === 0 ? "not_enforced_for_host_root" : "rlimit_nproc_per_host_uid",
    cpu: "not_enforced",
    openFiles: files,
    fileSize: sizes,
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

/**
 * The argv prefix that puts the command that follows under the runtime's
 * limits: a shell that moves itself into each of the runtime's cgroups (one
 * per v1 hierarchy, or the one v2 cgroup) before it execs, then prlimit.
 */
export function limitArgv(cgroupDirs: readonly string[], prlimit: string | null, limits: ResourceLimits): string[] {
  const argv: string[] = [];
  if (cgroupDirs.length > 0) {
    // Every procs file is named before "--"; a failed write stops the start (a sandbox never runs unlimited by accident).
    const join = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"';
    argv.push("/bin/sh", "-c", join, "sh", ...cgroupDirs.map((dir) => `${dir}/cgroup.procs`), "--");
  }
  if (prlimit !== null) argv.push(prlimit, ...prlimitArgs(limits, cgroupDirs.length > 0), "--");
  return argv;
}

/** cgroup v2 `cpu.max`: quota and period in microseconds. */
export function cpuMax(cpus: number, periodUs = 100_000): string {
  return `${Math.max(1000, Math.round(cpus * periodUs))} ${periodUs}`;
}

/** How a runtime gets its own cgroups: a delegated v2 parent or the host's v1 hierarchies. */
export interface SandboxCgroups {
  readonly mechanism: CgroupMechanism;
  /** Null when usable; otherwise why not (the driver then refuses to start sandboxes rather than run them unlimited). */
  probe(): Promise<string | null>;
  /** Creates the runtime's cgroups with the limits; returns their directories (each has `cgroup.procs`). */
  create(runtimeId: string, limits: ResourceLimits): Promise<string[]>;
}

const REQUIRED_CONTROLLERS = ["memory", "pids", "cpu"];

/** A delegated cgroup v2 parent under which each runtime gets its own child. */
export class CgroupParent implements SandboxCgroups {
  readonly mechanism = "cgroup_v2";
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

  async create(runtimeId: string, limits: ResourceLimits): Promise<string[]> {
    const dir = this.dirFor(runtimeId);
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, "memory.max"), String(limits.memoryBytes));
    // Swap would let the sandbox exceed memory.max through the back door.
    await writeFile(join(dir, "memory.swap.max"), "0").catch(() => {});
    await writeFile(join(dir, "pids.max"), String(limits.pids));
    await writeFile(join(dir, "cpu.max"), cpuMax(limits.cpus));
    return [dir];
  }
}

/** The v1 hierarchies a runtime joins, each mounted at `<root>/<name>`. */
const V1_CONTROLLERS = ["memory", "pids", "cpu"] as const;

function readOwnCgroups(): string {
  try {
    return readFileSync("/proc/self/cgroup", "utf8");
  } catch {
    return "";
  }
}

/** The cgroup path of this process in each v1 hierarchy, from `/proc/self/cgroup` ("4:memory:/a/b"). */
export function ownV1Paths(procSelfCgroup: string): Record<string, string> {
  const paths: Record<string, string> = {};
  for (const line of procSelfCgroup.split("\n")) {
    const match = /^\d+:([^:]*):(\/.*)$/.exec(line.trim());
    if (!match) continue;
    for (const controller of (match[1] as string).split(",")) if (controller !== "") paths[controller] = match[2] as string;
  }
  return paths;
}

/**
 * cgroup v1: for each runtime, a cgroup in the memory, pids and cpu
 * hierarchies under `<own cgroup>/openma/`. v1 has no `cgroup.kill`: the
 * kill walks `cgroup.procs` (the pid namespace's init dying takes the rest).
 */
export class CgroupV1 implements SandboxCgroups {
  readonly mechanism = "cgroup_v1";
  readonly #parents: string[];

  constructor(
    readonly root: string,
    own: Record<string, string>,
  ) {
    this.#parents = V1_CONTROLLERS.map((name) => join(root, name, own[name] ?? "/", "openma"));
  }

  /**
   * True when the host mounts all three v1 hierarchies under `root`: each has `cgroup.procs` and, unlike a v2
   * directory, no `cgroup.controllers` (checked synchronously: capabilities are declared at construction).
   */
  static present(root: string): boolean {
    return V1_CONTROLLERS.every(
      (name) => existsSync(join(root, name, "cgroup.procs")) && !existsSync(join(root, name, "cgroup.controllers")),
    );
  }

  /**
   * The v1 hierarchies this process can give sandboxes cgroups in: present, and this process's own cgroup in
   * each writable (a container usually sees them read-only). Null otherwise: the driver then uses rlimits.
   * `procSelfCgroup` defaults to this process's own `/proc/self/cgroup` (without it, each hierarchy's root).
   */
  static detect(root: string, procSelfCgroup: string = readOwnCgroups()): CgroupV1 | null {
    if (!CgroupV1.present(root)) return null;
    const own = ownV1Paths(procSelfCgroup);
    for (const name of V1_CONTROLLERS) {
      try {
        accessSync(join(root, name, own[name] ?? "/"), constants.W_OK);
      } catch {
        return null;
      }
    }
    return new CgroupV1(root, own);
  }

  async probe(): Promise<string | null> {
    for (const parent of this.#parents) {
      try {
        await mkdir(parent, { recursive: true });
      } catch (err) {
        return `cannot create ${parent}: ${(err as Error).message}`;
      }
    }
    return null;
  }

  async create(runtimeId: string, limits: ResourceLimits): Promise<string[]> {
    const [memory, pids, cpu] = this.#parents.map((parent) => join(parent, runtimeId)) as [string, string, string];
    for (const dir of [memory, pids, cpu]) await mkdir(dir, { recursive: true });
    await writeFile(join(memory, "memory.limit_in_bytes"), String(limits.memoryBytes));
    // memory+swap at the same limit: swap cannot extend the sandbox's memory (absent when the kernel has no swap accounting).
    await writeFile(join(memory, "memory.memsw.limit_in_bytes"), String(limits.memoryBytes)).catch(() => {});
    await writeFile(join(pids, "pids.max"), String(limits.pids));
    const [quota, period] = cpuMax(limits.cpus).split(" ") as [string, string];
    await writeFile(join(cpu, "cpu.cfs_period_us"), period);
    await writeFile(join(cpu, "cpu.cfs_quota_us"), quota);
    return [memory, pids, cpu];
  }
}

/** Kills every process in the runtime's cgroups (cgroup.kill where the kernel has it, else one by one). */
export async function killCgroups(dirs: readonly string[]): Promise<void> {
  for (const dir of dirs) await killCgroup(dir);
}

/** Removes the runtime's cgroups once they are empty; true when all are gone. */
export async function removeCgroups(dirs: readonly string[]): Promise<boolean> {
  let gone = true;
  for (const dir of dirs) gone = (await removeCgroup(dir)) && gone;
  return gone;
}

async function killCgroup(dir: string): Promise<void> {
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

async function removeCgroup(dir: string): Promise<boolean> {
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
