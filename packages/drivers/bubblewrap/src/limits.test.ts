import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  CgroupParent,
  CgroupV1,
  cpuMax,
  DEFAULT_LIMITS,
  limitArgv,
  limitEnforcement,
  limitIssues,
  ownV1Paths,
  prlimitArgs,
} from "./limits.ts";

describe("limits", () => {
  it("turns limits into prlimit arguments (hard = soft), per-process ones only without a cgroup", () => {
    expect(prlimitArgs(DEFAULT_LIMITS, false)).toEqual([
      "--nofile=4096:4096",
      `--fsize=${8 * 1024 ** 3}:${8 * 1024 ** 3}`,
      `--data=${2 * 1024 ** 3}:${2 * 1024 ** 3}`,
      "--nproc=1024:1024",
    ]);
    expect(prlimitArgs(DEFAULT_LIMITS, true)).toEqual(["--nofile=4096:4096", `--fsize=${8 * 1024 ** 3}:${8 * 1024 ** 3}`]);
  });

  it("expresses CPUs as a cgroup v2 quota", () => {
    expect(cpuMax(1.5)).toBe("150000 100000");
    expect(cpuMax(0.001)).toBe("1000 100000");
  });

  it("names every out-of-range limit", () => {
    expect(limitIssues(DEFAULT_LIMITS)).toEqual([]);
    expect(limitIssues({ ...DEFAULT_LIMITS, pids: 0, memoryBytes: 1.5, cpus: Number.NaN })).toEqual([
      "limits.memoryBytes: must be between 16777216 and 1125899906842624",
      "limits.pids: must be between 8 and 4194304",
      "limits.cpus: must be between 0.01 and 4096",
    ]);
  });

  it("declares what each mechanism enforces", () => {
    expect(limitEnforcement("cgroup_v2", 65534)).toMatchObject({
      mechanism: "cgroup_v2",
      memory: "cgroup_memory_max",
      pids: "cgroup_pids_max",
    });
    expect(limitEnforcement("cgroup_v1", 65534)).toMatchObject({
      mechanism: "cgroup_v1",
      memory: "cgroup_v1_memory_limit",
      pids: "cgroup_pids_max",
      cpu: "cgroup_v1_cfs_quota",
    });
    expect(limitEnforcement(null, 65534)).toMatchObject({ mechanism: "rlimit", pids: "rlimit_nproc_per_host_uid", cpu: "not_enforced" });
    expect(limitEnforcement(null, 0).pids).toBe("not_enforced_for_host_root");
  });

  it("joins every cgroup of the runtime before prlimit, and stops rather than run outside one", () => {
    expect(limitArgv(["/cg/memory/x", "/cg/pids/x"], "/usr/bin/prlimit", DEFAULT_LIMITS)).toEqual([
      "/bin/sh",
      "-c",
      'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"',
      "sh",
      "/cg/memory/x/cgroup.procs",
      "/cg/pids/x/cgroup.procs",
      "--",
      "/usr/bin/prlimit",
      "--nofile=4096:4096",
      `--fsize=${8 * 1024 ** 3}:${8 * 1024 ** 3}`,
      "--",
    ]);
    expect(limitArgv([], null, DEFAULT_LIMITS)).toEqual([]);
  });
});

describe("cgroup v1", () => {
  it("finds this process's path in each hierarchy, combined controllers included", () => {
    const own = ownV1Paths("12:pids:/svc\n4:memory:/process_api/abc\n3:cpu,cpuacct:/x/y\n1:name=systemd:/\n0::/\n");
    expect(own).toMatchObject({ pids: "/svc", memory: "/process_api/abc", cpu: "/x/y", cpuacct: "/x/y" });
  });

  it("creates one cgroup per hierarchy under the server's own, with the limits", async () => {
    const root = join(tmpdir(), `openma-cgv1-${process.pid}`);
    try {
      for (const name of ["memory", "pids", "cpu"]) {
        await mkdir(join(root, name), { recursive: true });
        await writeFile(join(root, name, "cgroup.procs"), "");
      }
      expect(CgroupV1.present(root)).toBe(true);
      expect(CgroupV1.present(join(root, "none"))).toBe(false);
      // Usable only where this process's own cgroup can take children (a container sees them read-only).
      expect(CgroupV1.detect(root, "4:memory:/not-here\n")).toBeNull();
      expect(CgroupV1.detect(root, "")).toBeInstanceOf(CgroupV1);
      await writeFile(join(root, "cpu", "cgroup.controllers"), "cpu"); // a v2 directory is not a v1 hierarchy
      expect(CgroupV1.present(root)).toBe(false);
      const v1 = new CgroupV1(root, { memory: "/srv" });
      expect(await v1.probe()).toBeNull();
      const dirs = await v1.create("bwrap-01", { ...DEFAULT_LIMITS, memoryBytes: 64 * 1024 ** 2, pids: 32, cpus: 0.25 });
      expect(dirs).toEqual([
        join(root, "memory/srv/openma/bwrap-01"),
        join(root, "pids/openma/bwrap-01"),
        join(root, "cpu/openma/bwrap-01"),
      ]);
      const [memory, pids, cpu] = dirs as [string, string, string];
      expect(await readFile(join(memory, "memory.limit_in_bytes"), "utf8")).toBe(String(64 * 1024 ** 2));
      expect(await readFile(join(memory, "memory.memsw.limit_in_bytes"), "utf8")).toBe(String(64 * 1024 ** 2));
      expect(await readFile(join(pids, "pids.max"), "utf8")).toBe("32");
      expect(await readFile(join(cpu, "cpu.cfs_quota_us"), "utf8")).toBe("25000");
      expect(await readFile(join(cpu, "cpu.cfs_period_us"), "utf8")).toBe("100000");
      // A hierarchy it cannot write to is named.
      await writeFile(join(root, "blocked"), "");
      expect(await new CgroupV1(join(root, "blocked"), {}).probe()).toMatch(/^cannot create /);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});

describe("cgroup parent", () => {
  it("refuses a directory that is not a cgroup v2 parent with the needed controllers", async () => {
    const dir = join(tmpdir(), `openma-cg-${process.pid}-${Date.now()}`);
    await mkdir(dir, { recursive: true });
    try {
      expect(await new CgroupParent(dir).probe()).toMatch(/not a cgroup v2 directory/);
      await writeFile(join(dir, "cgroup.controllers"), "cpu io\n");
      expect(await new CgroupParent(dir).probe()).toBe(`cgroup ${dir} lacks controllers: memory, pids`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("enables the controllers for children and writes a runtime's limits (on a stand-in directory)", async () => {
    // No delegated cgroup v2 on every test host: the file protocol is what can be checked everywhere.
    const dir = join(tmpdir(), `openma-cg-${process.pid}-${Date.now()}-b`);
    await mkdir(dir, { recursive: true });
    try {
      await writeFile(join(dir, "cgroup.controllers"), "cpu memory pids\n");
      await writeFile(join(dir, "cgroup.subtree_control"), "cpu\n");
      const parent = new CgroupParent(dir);
      expect(await parent.probe()).toBeNull();
      expect(await readFile(join(dir, "cgroup.subtree_control"), "utf8")).toBe("+memory +pids");
      const child = await parent.create("bwrap-0123", { ...DEFAULT_LIMITS, memoryBytes: 512 * 1024 ** 2, pids: 64, cpus: 0.5 });
      expect(child).toEqual([join(dir, "openma-bwrap-0123")]);
      const [one] = child as [string];
      expect(await readFile(join(one, "memory.max"), "utf8")).toBe(String(512 * 1024 ** 2));
      expect(await readFile(join(one, "memory.swap.max"), "utf8")).toBe("0");
      expect(await readFile(join(one, "pids.max"), "utf8")).toBe("64");
      expect(await readFile(join(one, "cpu.max"), "utf8")).toBe("50000 100000");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
