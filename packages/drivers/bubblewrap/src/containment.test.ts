/**
 * Containment on a cgroup v1 host (issue 21), with the real bwrap and the
 * host's real v1 memory, pids and cpu controllers: one sandbox exhausting
 * its memory, its process budget or its CPU share is held by its own
 * cgroups, and the other sandboxes keep working. Every sandbox runs as a
 * host uid of its own. What is checked are the kernel's own counters and
 * exit statuses, never how long anything took. Fails, never skips, where
 * the host lacks the v1 hierarchies.
 */
import { existsSync, readFileSync } from "node:fs";
import { readFile, rm } from "node:fs/promises";
import { join } from "node:path";
import type { ManagedSandboxLease, ToolSandboxPort } from "@openma/contract";
import { eventually } from "@openma/driver-suite/eventually";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BubblewrapSandbox } from "./driver.ts";
import { DEFAULT_HOST_UID_RANGE } from "./host-uids.ts";
import { CgroupV1 } from "./limits.ts";
import { acquire, assertBwrapInstalled, never, scratch } from "./test-support.ts";

let root: string;
let driver: BubblewrapSandbox;

const MIB = 1024 ** 2;

async function run(tools: ToolSandboxPort, script: string): Promise<{ code: number; out: string }> {
  const result = await tools.exec({ command: ["sh", "-c", script], timeoutMs: 60_000, signal: never() });
  if (result.type !== "exited") throw new Error(`exec ended as ${result.type}`);
  return { code: result.exitCode, out: Buffer.from(result.stdout).toString("utf8") };
}

/** The runtime's record as any process sharing the state root reads it. */
function stateOf(lease: ManagedSandboxLease): { cgroupDirs: string[]; hostUser: { uid: number; gid: number } } {
  return JSON.parse(readFileSync(join(root, "state", lease.runtimeId, "state.json"), "utf8"));
}

function cgroupOf(lease: ManagedSandboxLease, controller: "memory" | "pids" | "cpu"): string {
  const dir = stateOf(lease).cgroupDirs.find((d) => d.includes(`/${controller}/`));
  if (!dir) throw new Error(`no ${controller} cgroup recorded`);
  return dir;
}

/** `key value` lines of a cgroup stat file. */
async function counters(file: string): Promise<Record<string, number>> {
  const text = await readFile(file, "utf8");
  return Object.fromEntries(
    text.split("\n").flatMap((line) => (line.includes(" ") ? [[line.split(" ")[0], Number(line.split(" ")[1])]] : [])),
  );
}

beforeAll(async () => {
  assertBwrapInstalled();
  if (!CgroupV1.present("/sys/fs/cgroup"))
    throw new Error("this test needs the cgroup v1 memory, pids and cpu hierarchies under /sys/fs/cgroup");
  root = await scratch("bwrap-containment");
  driver = new BubblewrapSandbox({ stateRoot: join(root, "state"), limits: { memoryBytes: 128 * MIB, pids: 64, cpus: 0.2 } });
});

afterAll(async () => {
  await driver?.shutdown();
  if (root) await rm(root, { recursive: true, force: true });
});

describe("bubblewrap on a cgroup v1 host", () => {
  it("declares cgroup v1 limits and a host uid per sandbox", () => {
    expect(driver.enforcement).toMatchObject({ mechanism: "cgroup_v1", memory: "cgroup_v1_memory_limit", pids: "cgroup_pids_max" });
    expect(driver.capabilities.facts?.has).toEqual(expect.arrayContaining(["resource_limits_cgroup_v1", "per_sandbox_host_uid"]));
  });

  it("gives every sandbox its own host uid and gives it back at terminate", async () => {
    const one = await acquire(driver, root);
    const two = await acquire(driver, root);
    const [a, b] = [stateOf(one.lease).hostUser.uid, stateOf(two.lease).hostUser.uid];
    expect(a).not.toBe(b);
    for (const uid of [a, b]) {
      expect(uid).toBeGreaterThanOrEqual(DEFAULT_HOST_UID_RANGE.first);
      expect(uid).toBeLessThan(DEFAULT_HOST_UID_RANGE.first + DEFAULT_HOST_UID_RANGE.count);
    }
    expect((await run(driver.toolSandbox(one.lease), "id -u")).out).toBe("1000\n"); // the sandbox's own view is unchanged
    for (const { scope, lease } of [one, two]) {
      const dirs = stateOf(lease).cgroupDirs;
      await driver.terminate({
        scope,
        fence: { scope, ownerId: "bwrap-test", generation: 1, expiresAt: Date.now() + 60_000 },
        lease,
        reason: "completed",
        signal: never(),
      });
      for (const dir of dirs) expect(existsSync(dir), dir).toBe(false);
    }
    for (const uid of [a, b]) expect(existsSync(join(root, "state", "uids", String(uid)))).toBe(false);
  });

  it("kills a sandbox whose processes together pass its memory limit; another sandbox keeps working", async () => {
    const hog = await acquire(driver, root);
    const bystander = await acquire(driver, root);
    // Three processes of 60 MiB each (touched, not just reserved): each is far below the 2 GiB a per-process rlimit
    // would allow, together past the sandbox's 128 MiB.
    const script = [
      "pids=''",
      'for i in 1 2 3; do python3 -c \'import time; x = b"x" * (60 << 20); time.sleep(3)\' & pids="$pids $!"; done',
      'for pid in $pids; do wait "$pid"; echo "exit $?"; done',
    ].join("\n");
    const { out } = await run(driver.toolSandbox(hog.lease), script);
    expect(out).toMatch(/exit 137/); // SIGKILL by the kernel's OOM killer, inside the sandbox's cgroup
    const memory = cgroupOf(hog.lease, "memory");
    expect((await counters(join(memory, "memory.oom_control"))).oom_kill).toBeGreaterThan(0);
    expect(Number(await readFile(join(memory, "memory.max_usage_in_bytes"), "utf8"))).toBeLessThanOrEqual(128 * MIB);
    expect((await run(driver.toolSandbox(bystander.lease), "echo alive")).out).toBe("alive\n");
  }, 120_000);

  it("holds a fork bomb to its sandbox's process budget; another sandbox still starts processes", async () => {
    const bomb = await acquire(driver, root);
    const bystander = await acquire(driver, root);
    const started = await driver.spawn(bomb.lease, { command: ["sh", "-c", "bomb() { bomb | bomb & }; bomb; sleep 600"] });
    if (!started.ok) throw new Error(started.message);
    const pids = cgroupOf(bomb.lease, "pids");
    // The budget is exhausted (the kernel refused forks: pids.events counts them) ...
    await eventually(
      async () => (((await counters(join(pids, "pids.events"))).max ?? 0) > 0 ? true : null),
      "the fork bomb to hit pids.max",
      30_000,
    );
    expect(Number(await readFile(join(pids, "pids.current"), "utf8"))).toBeLessThanOrEqual(64);
    // ... and the other sandbox (its own uid, its own budget) starts processes as usual.
    expect((await run(driver.toolSandbox(bystander.lease), "for i in 1 2 3 4 5 6 7 8; do sh -c true & done; wait; echo forked")).out).toBe(
      "forked\n",
    );
    const { scope, lease } = bomb;
    const end = await driver.terminate({
      scope,
      fence: { scope, ownerId: "bwrap-test", generation: 1, expiresAt: Date.now() + 60_000 },
      lease,
      reason: "failed",
      signal: never(),
    });
    expect(end.type).not.toBe("failed");
    expect(existsSync(pids)).toBe(false);
    started.process.kill();
  }, 120_000);

  it("holds a busy loop to its CPU share (the kernel throttles it)", async () => {
    const busy = await acquire(driver, root);
    const cpu = cgroupOf(busy.lease, "cpu");
    expect(await readFile(join(cpu, "cpu.cfs_quota_us"), "utf8")).toBe("20000\n");
    await run(driver.toolSandbox(busy.lease), "timeout 2 sh -c 'while :; do :; done'; true");
    const stat = await counters(join(cpu, "cpu.stat"));
    expect(stat.nr_throttled).toBeGreaterThan(0);
    expect(stat.throttled_time).toBeGreaterThan(0);
  }, 60_000);
});
