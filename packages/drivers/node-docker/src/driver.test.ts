/**
 * ManagedSandboxPort lifecycle on a real dockerd: deterministic names and
 * ownership labels, closed network, limits, bind mounts, heartbeat,
 * idempotent terminate, reap from a serialized lease, and no leftovers.
 */
import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { type ManagedSandboxLease, type SandboxAcquireResult, WORKSPACE_MOUNT_PATH, type WorkspaceBinding } from "@openma/contract";
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import { LABELS, NODE_DOCKER_PROVIDER, type NodeDockerSandbox } from "./driver.ts";
import {
  type DockerTestEnv,
  type HostBindings,
  hostBindings,
  never,
  once,
  removeHostBindings,
  removeRunContainers,
  requireDocker,
  testFence,
  testScope,
} from "./testing.ts";

let env: DockerTestEnv;
let driver: NodeDockerSandbox;
let bindings: HostBindings;

function acquired(result: SandboxAcquireResult): ManagedSandboxLease {
  if (result.type !== "acquired") throw new Error(`acquire failed: ${result.reason}`);
  return result.lease;
}

/** A container over the given bindings, under a fresh scope. */
async function start(idempotencyKey: string, own: { workspace: HostBindings["workspace"]; outputs: HostBindings["outputs"] | null }) {
  const scope = testScope();
  const fence = testFence(scope);
  const lease = acquired(await driver.acquire({ scope, fence, ...own, idempotencyKey, signal: never }));
  return { scope, fence, lease };
}

const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");

async function sh(lease: ManagedSandboxLease, script: string): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const result = await driver.toolSandbox(lease).exec({ command: ["sh", "-c", script], timeoutMs: 20_000, signal: never });
  if (result.type !== "exited") throw new Error(`exec did not exit: ${result.type}`);
  return { exitCode: result.exitCode, stdout: text(result.stdout), stderr: text(result.stderr) };
}

beforeEach(
  once(async () => {
    env = await requireDocker();
    driver = env.driver({ limits: { cpus: 0.5, memoryBytes: 256 * 1024 * 1024, pids: 64 } });
    bindings = await hostBindings();
  }),
);

afterAll(async () => {
  if (env) await removeRunContainers(env);
  if (bindings) await removeHostBindings(bindings);
});

describe("node-docker ManagedSandboxPort", () => {
  it("declares no suspend and refuses to suspend", async () => {
    expect(driver.capabilities.provider).toBe(NODE_DOCKER_PROVIDER);
    expect(driver.capabilities.lifecycle.suspendResume).toBe("unsupported");
    expect(driver.capabilities.facts.lacks).toContain("provider_suspend_resume");
    const scope = testScope();
    const suspended = await driver.suspend({
      scope,
      fence: testFence(scope),
      lease: { provider: NODE_DOCKER_PROVIDER, runtimeId: "x" },
      signal: never,
    });
    expect(suspended.type).toBe("failed");
  });

  it("acquires a labelled, deterministic, closed and limited container with the bindings mounted", async () => {
    const scope = testScope();
    const fence = testFence(scope, 7);
    const input = { scope, fence, workspace: bindings.workspace, outputs: bindings.outputs, idempotencyKey: "k1", signal: never };
    const lease = acquired(await driver.acquire(input));
    expect(lease.provider).toBe(NODE_DOCKER_PROVIDER);
    expect(lease.runtimeId).toMatch(/^openma-[0-9a-f]{20}-g7-[0-9a-f]{10}$/);

    // Same acquire again: the same container, not a second one.
    const again = acquired(await driver.acquire(input));
    expect(again).toEqual(lease);

    const info = await env.docker.getContainer(lease.runtimeId).inspect();
    expect(info.Config.Labels).toMatchObject({
      [LABELS.managed]: "true",
      [LABELS.driver]: NODE_DOCKER_PROVIDER,
      [LABELS.session]: scope.sessionId,
      [LABELS.environment]: scope.environmentId,
      [LABELS.generation]: "7",
      [LABELS.owner]: fence.ownerId,
    });
    expect(info.HostConfig.NetworkMode).toBe("none");
    expect(info.HostConfig.Init).toBe(true);
    expect(info.HostConfig.NanoCpus).toBe(500_000_000);
    expect(info.HostConfig.Memory).toBe(256 * 1024 * 1024);
    expect(info.HostConfig.PidsLimit).toBe(64);
    expect(info.HostConfig.CapDrop).toEqual(["ALL"]);
    expect(info.HostConfig.CapAdd ?? []).toEqual([]);
    expect(info.HostConfig.ReadonlyRootfs).toBe(true);
    expect(info.HostConfig.SecurityOpt).toContain("no-new-privileges");
    expect(info.Config.User).toBe("1000:1000");
    const mounts = Object.fromEntries(info.Mounts.map((m) => [m.Destination, m.Source]));
    expect(mounts["/workspace"]).toBe(bindings.workspaceDir);
    expect(mounts["/mnt/session/outputs"]).toBe(bindings.outputsDir);

    // The kernel enforces the limits (cgroup v1 or v2 file names).
    const limits = await sh(
      lease,
      "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max; " +
        "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max; " +
        "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cut -d' ' -f1 /sys/fs/cgroup/cpu.max",
    );
    expect(limits.stdout.split("\n").slice(0, 3)).toEqual([String(256 * 1024 * 1024), "64", "50000"]);

    // pid 1 is the init process that reaps orphans.
    expect((await sh(lease, "cat /proc/1/cmdline | tr '\\0' ' '")).stdout).toMatch(/^\/sbin\/docker-init /);

    // Both bindings are the host directories, in both directions.
    await writeFile(join(bindings.workspaceDir, "from-host.txt"), "host says hi");
    const roundTrip = await sh(
      lease,
      "cat /workspace/from-host.txt; echo deliverable > /mnt/session/outputs/report.txt; echo ws > /workspace/made.txt",
    );
    expect(roundTrip.stdout).toBe("host says hi");
    expect(await readFile(join(bindings.outputsDir, "report.txt"), "utf8")).toBe("deliverable\n");
    expect(await readFile(join(bindings.workspaceDir, "made.txt"), "utf8")).toBe("ws\n");

    expect(await driver.terminate({ scope, fence, lease, reason: "completed", signal: never })).toEqual({ type: "terminated" });
  });

  it("runs the agent unprivileged: uid 1000, no capabilities, read-only root, writable workspace, outputs, /tmp and home", async () => {
    const { scope, fence, lease } = await start("unpriv", bindings);
    const who = await sh(lease, "id -u; id -g; echo $HOME; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs):' /proc/self/status");
    expect(who.stdout.split("\n").slice(0, 3)).toEqual(["1000", "1000", "/home/agent"]);
    expect(who.stdout).toMatch(/CapEff:\s+0{16}\n/);
    expect(who.stdout).toMatch(/CapPrm:\s+0{16}\n/);
    expect(who.stdout).toMatch(/CapBnd:\s+0{16}\n/);
    expect(who.stdout).toMatch(/NoNewPrivs:\s+1/);

    // Nothing outside the writable places can be written, not even where the image has directories.
    for (const path of ["/evil", "/etc/evil", "/bin/evil", "/root/evil", "/run/evil", "/workspace/../evil"]) {
      const write = await sh(lease, `echo x > ${path}`);
      expect(write.exitCode, path).not.toBe(0);
      expect(write.stderr, path).toMatch(/Read-only file system|Permission denied/);
    }
    const writable = await sh(
      lease,
      "for d in /workspace /mnt/session/outputs /tmp $HOME; do echo ok > $d/probe && cat $d/probe || exit 1; done; mkdir -p /workspace/sub/dir && touch /workspace/sub/dir/f",
    );
    expect(writable).toMatchObject({ exitCode: 0, stdout: "ok\nok\nok\nok\n" });
    // Programs the agent writes run from each of them (the Engine's tmpfs default would be noexec).
    const runs = await sh(
      lease,
      "for d in /workspace /tmp $HOME; do printf '#!/bin/sh\\necho ran\\n' > $d/p.sh && chmod +x $d/p.sh && $d/p.sh || exit 1; done",
    );
    expect(runs).toMatchObject({ exitCode: 0, stdout: "ran\nran\nran\n" });
    // The host sees the agent's files owned by the sandbox uid.
    const { stat } = await import("node:fs/promises");
    expect((await stat(join(bindings.workspaceDir, "sub", "dir", "f"))).uid).toBe(1000);
    expect((await stat(join(bindings.outputsDir, "probe"))).uid).toBe(1000);
    expect(await driver.terminate({ scope, fence, lease, reason: "completed", signal: never })).toEqual({ type: "terminated" });
  });

  it("hands a workspace the host wrote as root to the sandbox uid before it starts", async () => {
    const own = await hostBindings();
    try {
      const { mkdir, stat } = await import("node:fs/promises");
      await mkdir(join(own.workspaceDir, "restored"));
      await writeFile(join(own.workspaceDir, "restored", "file.txt"), "from a checkpoint\n");
      const { scope, fence, lease } = await start("handover", own);
      expect((await stat(join(own.workspaceDir, "restored", "file.txt"))).uid).toBe(1000);
      const edit = await sh(lease, "echo edited >> /workspace/restored/file.txt && cat /workspace/restored/file.txt");
      expect(edit).toMatchObject({ exitCode: 0, stdout: "from a checkpoint\nedited\n" });
      await driver.terminate({ scope, fence, lease, reason: "completed", signal: never });
    } finally {
      await removeHostBindings(own);
    }
  });

  it("an ephemeral workspace without a host directory is a tmpfs the sandbox uid can write", async () => {
    const workspace: WorkspaceBinding = { bindingId: "wsb_eph", strategy: "ephemeral", mountPath: WORKSPACE_MOUNT_PATH, metadata: {} };
    const { scope, fence, lease } = await start("eph", { workspace, outputs: null });
    expect(await sh(lease, "echo hi > /workspace/x && cat /workspace/x")).toMatchObject({ exitCode: 0, stdout: "hi\n" });
    await driver.terminate({ scope, fence, lease, reason: "completed", signal: never });
  });

  it("refuses a user that is not a numeric uid:gid", () => {
    expect(() => env.driver({ user: "agent" })).toThrow(/numeric uid:gid/);
    expect(() => env.driver({ user: "1000:-1" })).toThrow(/numeric uid:gid/);
    expect(env.driver({ user: "0:0" }).user).toEqual({ uid: 0, gid: 0 });
  });

  it("concurrent acquires with one key share a container; a dead one is replaced on retry", async () => {
    const scope = testScope();
    const fence = testFence(scope, 2);
    const input = { scope, fence, workspace: bindings.workspace, outputs: null, idempotencyKey: "race", signal: never };
    const [a, b] = await Promise.all([driver.acquire(input), driver.acquire(input)]);
    expect(acquired(b)).toEqual(acquired(a));
    expect(await driver.listManaged({ [LABELS.session]: scope.sessionId })).toHaveLength(1);

    const first = acquired(a);
    await env.docker.getContainer(first.runtimeId).kill({ signal: "SIGKILL" });
    const replaced = acquired(await driver.acquire(input));
    expect(replaced.runtimeId).toBe(first.runtimeId);
    expect(replaced.metadata?.containerId).not.toBe(first.metadata?.containerId);
    expect(await driver.heartbeat({ scope, fence, lease: replaced, signal: never })).toEqual({ type: "alive" });
    // The stale lease no longer names a live container of ours.
    expect((await driver.heartbeat({ scope, fence, lease: first, signal: never })).type).toBe("lost");
    expect(await driver.terminate({ scope, fence, lease: replaced, reason: "completed", signal: never })).toEqual({ type: "terminated" });
    expect(await driver.listManaged({ [LABELS.session]: scope.sessionId })).toEqual([]);
  });

  it("has no network egress: only loopback exists and connections fail", async () => {
    const scope = testScope();
    const lease = acquired(
      await driver.acquire({
        scope,
        fence: testFence(scope),
        workspace: bindings.workspace,
        outputs: null,
        idempotencyKey: "net",
        signal: never,
      }),
    );
    const interfaces = await sh(lease, "ls /sys/class/net");
    expect(interfaces.stdout.trim().split(/\s+/)).toEqual(["lo"]);
    const egress = await sh(
      lease,
      "wget -q -T 3 -O - http://1.1.1.1/ 2>&1; echo exit=$?; nc -w 3 10.0.0.1 80 </dev/null 2>&1; echo exit=$?",
    );
    expect(egress.stdout).toMatch(/exit=[1-9]/);
    expect(egress.stdout).not.toContain("exit=0");
    await driver.terminate({ scope, fence: testFence(scope), lease, reason: "completed", signal: never });
  });

  it("heartbeats alive, then lost once the container dies outside our control", async () => {
    const scope = testScope();
    const fence = testFence(scope);
    const lease = acquired(
      await driver.acquire({ scope, fence, workspace: bindings.workspace, outputs: null, idempotencyKey: "hb", signal: never }),
    );
    expect(await driver.heartbeat({ scope, fence, lease, signal: never })).toEqual({ type: "alive" });
    expect(await driver.inspect({ lease, signal: never })).toEqual({ state: "running" });
    await env.docker.getContainer(lease.runtimeId).kill({ signal: "SIGKILL" });
    const beat = await driver.heartbeat({ scope, fence, lease, signal: never });
    expect(beat.type).toBe("lost");
    expect(await driver.inspect({ lease, signal: never })).toEqual({ state: "stopped" });
    await driver.terminate({ scope, fence, lease, reason: "failed", signal: never });
    expect(await driver.heartbeat({ scope, fence, lease, signal: never })).toMatchObject({ type: "lost" });
  });

  it("terminates idempotently and reaps from a serialized lease in a fresh driver", async () => {
    const scope = testScope();
    const fence = testFence(scope, 3);
    const lease = acquired(
      await driver.acquire({
        scope,
        fence,
        workspace: bindings.workspace,
        outputs: bindings.outputs,
        idempotencyKey: "reap",
        signal: never,
      }),
    );
    const serialized = JSON.parse(JSON.stringify(lease)) as ManagedSandboxLease;
    const reaper = env.driver();
    expect(await reaper.reap({ scope, lease: serialized, reason: "terminate_failed", signal: never })).toEqual({ type: "reaped" });
    expect(await reaper.reap({ scope, lease: serialized, reason: "terminate_failed", signal: never })).toEqual({ type: "not_found" });
    expect(await driver.terminate({ scope, fence, lease, reason: "completed", signal: never })).toEqual({ type: "terminated" });
    await expect(env.docker.getContainer(lease.runtimeId).inspect()).rejects.toMatchObject({ statusCode: 404 });
  });

  it("never kills a container it does not own, and reports that as a failure value", async () => {
    const scope = testScope();
    const name = `openma-foreign-${env.runId}`;
    const foreign = await env.docker.createContainer({ name, Image: env.images.busybox.image, Cmd: ["true"], Labels: env.labels });
    const lease: ManagedSandboxLease = { provider: NODE_DOCKER_PROVIDER, runtimeId: name };
    const reaped = await driver.reap({ scope, lease, reason: "host_recovery", signal: never });
    expect(reaped.type).toBe("failed");
    expect((await foreign.inspect()).Id).toBe(foreign.id);
    const wrongProvider = await driver.terminate({
      scope,
      fence: testFence(scope),
      lease: { provider: "other", runtimeId: name },
      reason: "failed",
      signal: never,
    });
    expect(wrongProvider.type).toBe("failed");
    await foreign.remove({ force: true });
  });

  it("refuses nonsensical limits at construction", () => {
    expect(() => env.driver({ limits: { cpus: 0 } })).toThrow(/cpus/);
    expect(() => env.driver({ limits: { memoryBytes: 1024 } })).toThrow(/memoryBytes/);
    expect(() => env.driver({ limits: { pids: 1.5 } })).toThrow(/pids/);
  });

  it("answers unavailable (not a crash) for a missing image or an unusable binding", async () => {
    const scope = testScope();
    const fence = testFence(scope);
    const missing = await env
      .driver({ image: "openma/does-not-exist:never" })
      .acquire({ scope, fence, workspace: bindings.workspace, outputs: null, idempotencyKey: "img", signal: never });
    expect(missing).toMatchObject({ type: "unavailable", retryable: false });
    if (missing.type === "unavailable") expect(missing.reason).toContain("npm run provision");

    const relative = await driver.acquire({
      scope,
      fence,
      workspace: { ...bindings.workspace, metadata: { hostPath: "relative/dir" } },
      outputs: null,
      idempotencyKey: "rel",
      signal: never,
    });
    expect(relative).toMatchObject({ type: "unavailable", retryable: false });

    const unbound = await driver.acquire({
      scope,
      fence,
      workspace: { ...bindings.workspace, metadata: {} },
      outputs: null,
      idempotencyKey: "unbound",
      signal: never,
    });
    expect(unbound).toMatchObject({ type: "unavailable", retryable: false });

    const gone = await driver.acquire({
      scope,
      fence,
      workspace: { ...bindings.workspace, metadata: { hostPath: join(bindings.root, "missing") } },
      outputs: null,
      idempotencyKey: "gone",
      signal: never,
    });
    expect(gone).toMatchObject({ type: "unavailable", retryable: false });
  });

  it("leaves no container of this run behind", async () => {
    expect(await driver.listManaged(env.labels)).toEqual([]);
    const all = await env.docker.listContainers({ all: true, filters: { label: [`openma.test-run=${env.runId}`] } });
    expect(all).toEqual([]);
  });
});
