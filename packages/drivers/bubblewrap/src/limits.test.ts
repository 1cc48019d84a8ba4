import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { CgroupParent, cpuMax, DEFAULT_LIMITS, limitEnforcement, limitIssues, prlimitArgs } from "./limits.ts";

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
    expect(limitEnforcement(true, 65534)).toMatchObject({ mechanism: "cgroup_v2", memory: "cgroup_memory_max", pids: "cgroup_pids_max" });
    expect(limitEnforcement(false, 65534)).toMatchObject({ mechanism: "rlimit", pids: "rlimit_nproc_per_host_uid", cpu: "not_enforced" });
    expect(limitEnforcement(false, 0).pids).toBe("not_enforced_for_host_root");
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
      expect(child).toBe(join(dir, "openma-bwrap-0123"));
      expect(await readFile(join(child, "memory.max"), "utf8")).toBe(String(512 * 1024 ** 2));
      expect(await readFile(join(child, "memory.swap.max"), "utf8")).toBe("0");
      expect(await readFile(join(child, "pids.max"), "utf8")).toBe("64");
      expect(await readFile(join(child, "cpu.max"), "utf8")).toBe("50000 100000");
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
