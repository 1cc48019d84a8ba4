/**
 * What the bubblewrap driver promises beyond the shared suite, checked from
 * both sides: inside the sandbox (what a process can see and do) and on the
 * host (/proc, file ownership). Runs against the real bwrap; fails, never
 * skips, when it is missing.
 */
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, readdirSync, readFileSync, realpathSync, statSync, writeFileSync } from "node:fs";
import { readlink, rm, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { ManagedSandboxLease, ToolSandboxPort } from "@openma/contract";
import { eventually } from "@openma/driver-suite/eventually";
import { hostProcesses } from "@openma/driver-suite/host-processes";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BubblewrapSandbox } from "./driver.ts";
import { readStat } from "./proc.ts";
import { acquire, assertBwrapInstalled, fenceFor, never, PLAN, scratch } from "./test-support.ts";

const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");

async function run(tools: ToolSandboxPort, script: string): Promise<{ code: number; out: string; err: string }> {
  const result = await tools.exec({ command: ["sh", "-c", script], timeoutMs: 30_000, signal: never() });
  if (result.type !== "exited") throw new Error(`exec ended as ${result.type}: ${"message" in result ? result.message : ""}`);
  return { code: result.exitCode, out: text(result.stdout), err: text(result.stderr) };
}

/** Polls until `probe` yields a value (processes start asynchronously; a probe racing them may throw); fails after 10 s. */
function until<T>(probe: () => Promise<T | null>, what: string): Promise<T> {
  return eventually(() => probe().catch(() => null), what, 10_000);
}

async function withMarker(marker: string): Promise<number[]> {
  return (await hostProcesses()).filter((p) => p.environ.includes(marker)).map((p) => p.pid);
}

let root: string;
let driver: BubblewrapSandbox;

/** The host uid the default driver's sandbox runs as, from its runtime record (each sandbox has its own). */
function hostUidOf(lease: ManagedSandboxLease, stateRoot = join(root, "state")): number {
  const state = JSON.parse(readFileSync(join(stateRoot, lease.runtimeId, "state.json"), "utf8")) as { hostUser: { uid: number } };
  return state.hostUser.uid;
}
const drivers: BubblewrapSandbox[] = [];

function track(d: BubblewrapSandbox): BubblewrapSandbox {
  drivers.push(d);
  return d;
}

beforeAll(async () => {
  assertBwrapInstalled();
  root = await scratch("bwrap-isolation");
  driver = track(new BubblewrapSandbox({ stateRoot: join(root, "state") }));
});

afterAll(async () => {
  for (const d of drivers) await d.shutdown();
  if (root) await rm(root, { recursive: true, force: true });
});

describe("namespaces", () => {
  it("gives every exec its own pid 1, the sandbox hostname, only loopback, and uid 1000 (the sandbox's own on the host)", async () => {
    const { lease } = await acquire(driver, root);
    const tools = driver.toolSandbox(lease);
    const { out } = await run(
      tools,
      "echo $$; cat /proc/1/comm; hostname; id -u; id -g; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '",
    );
    expect(out.split("\n").filter(Boolean)).toEqual(["2", "bwrap", "sandbox", "1000", "1000", "lo"]);

    const marker = `OPENMA_NS_${Math.random().toString(36).slice(2)}`;
    const proc = await driver.spawn(lease, { command: ["sleep", "300"], env: { OPENMA_MARK: marker } });
    if (!proc.ok) throw new Error(proc.message);
    try {
      const sleeper = await until(async () => {
        for (const pid of await withMarker(marker)) {
          if (readFileSync(`/proc/${pid}/comm`, "utf8").trim() === "sleep") return pid;
        }
        return null;
      }, "the sandboxed sleep to start");
      const uid = hostUidOf(lease);
      expect(readFileSync(`/proc/${sleeper}/status`, "utf8")).toMatch(new RegExp(`^Uid:\\s+${uid}\\s+${uid}`, "m"));
      for (const ns of ["user", "pid", "net", "ipc", "uts", "mnt"]) {
        expect(await readlink(`/proc/${sleeper}/ns/${ns}`), ns).not.toBe(await readlink(`/proc/self/ns/${ns}`));
      }
      // Execs share the sandbox's network namespace (one loopback for all of them) and sit inside its pid namespace.
      const init = Number(lease.metadata?.pid);
      expect(await readlink(`/proc/${sleeper}/ns/net`)).toBe(await readlink(`/proc/${init}/ns/net`));
      const nspid =
        readFileSync(`/proc/${sleeper}/status`, "utf8")
          .match(/^NSpid:\s+(.*)$/m)?.[1]
          ?.split(/\s+/) ?? [];
      expect(nspid.length).toBe(3); // host, sandbox, exec
    } finally {
      proc.process.kill();
      await proc.process.done;
    }
  });

  it("has no capabilities, sets no_new_privs and loads the seccomp filter", async () => {
    const { lease } = await acquire(driver, root);
    const { out } = await run(
      driver.toolSandbox(lease),
      "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t ' ' '",
    );
    expect(out).toContain("CapEff: 0000000000000000");
    expect(out).toContain("CapBnd: 0000000000000000");
    expect(out).toContain("NoNewPrivs: 1");
    expect(out).toContain("Seccomp: 2");
  });

  it("refuses new namespaces through seccomp (and only because of it)", async () => {
    const script = "unshare -U true 2>&1; echo rc=$?";
    const { lease } = await acquire(driver, root);
    const filtered = await run(driver.toolSandbox(lease), script);
    expect(filtered.out).toContain("Operation not permitted");
    expect(filtered.out).toContain("rc=1");
    // Control: the same command succeeds without the filter, so the assertion above can fail.
    const open = track(new BubblewrapSandbox({ stateRoot: join(root, "state-noseccomp"), seccomp: false }));
    const other = await acquire(open, root);
    expect((await run(open.toolSandbox(other.lease), script)).out).toContain("rc=0");
  });
});

describe("filesystem", () => {
  it("mounts the host /usr read-only and hides the host's /etc, /root and home directories", async () => {
    const { lease } = await acquire(driver, root);
    const tools = driver.toolSandbox(lease);
    const probe = await run(
      tools,
      "touch /usr/openma-probe 2>&1; test -e /etc/shadow; echo shadow=$?; test -e /root; echo root=$?; cat /etc/passwd",
    );
    expect(probe.out).toContain("Read-only file system");
    expect(probe.out).toContain("shadow=1");
    expect(probe.out).toContain("root=1");
    expect(probe.out).toContain("sandbox:x:1000:1000");
    expect(probe.out).not.toMatch(/^root:x:0:0:root:\/root:\/bin\/bash/m); // not the host's passwd
    expect(await tools.writeFile({ path: "/usr/openma-probe", content: Buffer.from("x"), signal: never() })).toMatchObject({
      type: "error",
    });
  });

  it("resolves host-side file access inside the sandbox: symlinks cannot reach host files", async () => {
    const { lease, bindings } = await acquire(driver, root);
    const tools = driver.toolSandbox(lease);
    await run(tools, "ln -s /etc/shadow s; ln -s ../../../../../../etc/hostname h; ln -s / rootlink; mkfifo fifo");
    expect(await tools.readFile({ path: "s", maxBytes: 4096, signal: never() })).toEqual({ type: "not_found" });
    const hostname = await tools.readFile({ path: "h", maxBytes: 4096, signal: never() });
    expect(hostname.type === "ok" && text(hostname.content)).toBe("sandbox\n"); // the sandbox's, not the host's
    expect(await tools.readFile({ path: "rootlink/etc/shadow", maxBytes: 4096, signal: never() })).toEqual({ type: "not_found" });
    const viaLink = await tools.stat({ path: "rootlink", signal: never() });
    expect(viaLink.type === "found" && [viaLink.kind, viaLink.realPath]).toEqual(["symlink", "/"]);
    expect(await tools.writeFile({ path: "rootlink/usr/x", content: Buffer.from("x"), signal: never() })).toMatchObject({ type: "error" });
    expect(await tools.readFile({ path: "fifo", maxBytes: 10, signal: never() })).toEqual({ type: "not_a_file", kind: "other" });
    // Files the host writes belong to the sandbox user.
    expect(await tools.writeFile({ path: "mine/owned.txt", content: Buffer.from("x"), signal: never() })).toEqual({ type: "ok", bytes: 1 });
    const hostPath = join(bindings.workspace.metadata?.hostPath as string, "mine/owned.txt");
    expect((await stat(hostPath)).uid).toBe(hostUidOf(lease));
    expect((await run(tools, "echo more >> mine/owned.txt && cat mine/owned.txt")).out).toBe("xmore\n");
  });

  it("runs on a rootfs directory instead of the host /usr", async () => {
    const rootfs = join(root, "tiny-rootfs");
    buildTinyRootfs(rootfs);
    const onRootfs = track(new BubblewrapSandbox({ stateRoot: join(root, "state-rootfs"), rootfs }));
    const { lease, bindings } = await acquire(onRootfs, root);
    const result = await run(
      onRootfs.toolSandbox(lease),
      "echo from-rootfs > /workspace/r.txt; test -e /usr/bin/node && echo host-usr || echo own-root",
    );
    expect(result.out).toBe("own-root\n");
    expect(readFileSync(join(bindings.workspace.metadata?.hostPath as string, "r.txt"), "utf8")).toBe("from-rootfs\n");
  });
});

/** A root filesystem with just dash (as /bin/sh) and the libraries it links. */
function buildTinyRootfs(dir: string): void {
  const dash = realpathSync("/bin/sh");
  mkdirSync(join(dir, "bin"), { recursive: true });
  copyFileSync(dash, join(dir, "bin", "sh"));
  for (const line of execFileSync("ldd", [dash], { encoding: "utf8" }).split("\n")) {
    const path = line.match(/(\/\S+)\s+\(0x/)?.[1];
    if (!path) continue;
    mkdirSync(join(dir, dirname(path)), { recursive: true });
    copyFileSync(realpathSync(path), join(dir, path));
  }
}

describe("processes", () => {
  it("terminate leaves no process of the sandbox behind, including daemons that left the session", async () => {
    const { scope, lease } = await acquire(driver, root);
    const marker = `OPENMA_TREE_${Math.random().toString(36).slice(2)}`;
    const daemon = await driver.spawn(lease, {
      command: ["sh", "-c", "(setsid sleep 300 &); sleep 300 & echo up; wait"],
      env: { OPENMA_MARK: marker },
    });
    if (!daemon.ok) throw new Error(daemon.message);
    await new Promise<void>((resolve) => daemon.process.stdout.once("data", () => resolve()));
    const before = await withMarker(marker);
    expect(before.length).toBeGreaterThanOrEqual(3);
    expect(await driver.terminate({ scope, fence: fenceFor(scope), lease, reason: "completed", signal: never() })).toEqual({
      type: "terminated",
    });
    await daemon.process.done;
    expect(await withMarker(marker)).toEqual([]);
    for (const pid of before) {
      const st = await readStat(pid);
      expect(st === null || st.state === "Z", `pid ${pid}`).toBe(true);
    }
    const init = await readStat(Number(lease.metadata?.pid));
    expect(init === null || init.state === "Z").toBe(true);
  });

  it("streams a duplex process both ways", async () => {
    const { lease } = await acquire(driver, root);
    const started = await driver.spawn(lease, { command: ["sh", "-c", "while read -r line; do echo got:$line; done; echo bye"] });
    if (!started.ok) throw new Error(started.message);
    const { process: proc } = started;
    const next = () => new Promise<string>((resolve) => proc.stdout.once("data", (chunk: Buffer) => resolve(chunk.toString())));
    let reply = next();
    proc.stdin.write("one\n");
    expect(await reply).toBe("got:one\n");
    reply = next();
    proc.stdin.write("two\n");
    expect(await reply).toBe("got:two\n");
    reply = next();
    proc.stdin.end();
    expect(await reply).toBe("bye\n");
    expect(await proc.done).toEqual({ type: "exited", exitCode: 0, signal: null });
  });

  it("applies rlimits to every process and reports what is enforced", async () => {
    const limited = track(
      new BubblewrapSandbox({
        stateRoot: join(root, "state-limits"),
        // A host uid of its own: RLIMIT_NPROC counts every process of that uid on the host.
        hostUser: { uid: 61_234, gid: 61_234 },
        // rlimits even where the host has cgroup v1 hierarchies (the driver would use those).
        cgroupV1Root: false,
        limits: { openFiles: 256, pids: 24 },
      }),
    );
    expect(limited.enforcement).toMatchObject({ mechanism: "rlimit", pids: "rlimit_nproc_per_host_uid", cpu: "not_enforced" });
    const { lease } = await acquire(limited, root);
    const tools = limited.toolSandbox(lease);
    expect((await run(tools, "ulimit -n")).out.trim()).toBe("256");
    const forks = await run(tools, "i=0; while [ $i -lt 60 ]; do sleep 5 & i=$((i+1)); done 2>&1; echo done");
    expect(forks.out).toMatch(/fork/i);
  });
});

describe("lifecycle edges", () => {
  it("reaps from the lease alone when the state root was wiped", async () => {
    const { scope, lease } = await acquire(driver, root);
    await rm(join(root, "state", lease.runtimeId), { recursive: true, force: true });
    const other = track(new BubblewrapSandbox({ stateRoot: join(root, "state") }));
    expect(await other.reap({ scope, lease, reason: "host_recovery", signal: never() })).toEqual({ type: "reaped" });
    expect(await other.reap({ scope, lease, reason: "host_recovery", signal: never() })).toEqual({ type: "not_found" });
  });

  it("reapLeftovers removes records of runtimes whose processes died", async () => {
    const { scope, lease } = await acquire(driver, root);
    process.kill(Number(lease.metadata?.pid), "SIGKILL");
    const beat = await until(async () => {
      const seen = await driver.heartbeat({ scope, fence: fenceFor(scope), lease, signal: never() });
      return seen.type === "lost" ? seen : null;
    }, "the heartbeat to report the killed runtime lost");
    expect(beat.reason).toContain("exited");
    const other = track(new BubblewrapSandbox({ stateRoot: join(root, "state") }));
    expect(await other.reapLeftovers()).toBeGreaterThanOrEqual(1);
    expect(() => statSync(join(root, "state", lease.runtimeId))).toThrow();
  });

  it("reapLeftovers keeps a start in progress in another process and removes what a dead process left half made", async () => {
    const stateRoot = join(root, "state-starts");
    const other = track(new BubblewrapSandbox({ stateRoot }));
    // A process that has exited: its pid and start time as a creator that is gone.
    const gone = execFileSync("sh", ["-c", "echo $$; cat /proc/$$/stat"], { encoding: "utf8" }).split("\n");
    const deadPid = Number(gone[0]);
    const deadStart = Number((gone[1] ?? "").slice((gone[1] ?? "").lastIndexOf(")") + 2).split(" ")[19]);
    const self = await readStat(process.pid);
    const made = (name: string, creator: { pid: number; start: number } | null) => {
      mkdirSync(join(stateRoot, name, "tmp"), { recursive: true });
      if (creator) writeFileSync(join(stateRoot, name, "creator.json"), JSON.stringify(creator));
    };
    const live = `bwrap-${"a".repeat(32)}`;
    const dead = `bwrap-${"b".repeat(32)}`;
    const legacy = `bwrap-${"c".repeat(32)}`;
    made(live, { pid: process.pid, start: self?.startTime ?? -1 });
    made(dead, { pid: deadPid, start: deadStart });
    made(legacy, null);
    made(`bwrap-${"d".repeat(32)}.making-${process.pid}`, null);
    made(`bwrap-${"e".repeat(32)}.making-${deadPid}`, null);
    await other.reapLeftovers();
    expect(readdirSync(stateRoot).sort()).toEqual([live, `bwrap-${"d".repeat(32)}.making-${process.pid}`]);
  });

  it("refuses unusable bindings and a missing bwrap with a reason, without starting anything", async () => {
    const scope = { environmentId: "env", sessionId: "refusals" };
    const base = { scope, fence: fenceFor(scope), plan: PLAN, outputs: null, idempotencyKey: "k", signal: never() };
    const noPath = await driver.acquire({ ...base, workspace: { bindingId: "w", strategy: "ephemeral", mountPath: "/workspace" } });
    expect(noPath).toMatchObject({ type: "unavailable", retryable: false });
    expect(noPath.type === "unavailable" && noPath.reason).toContain("workspace.metadata.hostPath");
    const missing = track(new BubblewrapSandbox({ stateRoot: join(root, "state-missing"), tools: { bwrap: "/nonexistent/bwrap" } }));
    const refused = await missing.acquire({
      ...base,
      workspace: { bindingId: "w", strategy: "ephemeral", mountPath: "/workspace", metadata: { hostPath: root } },
    });
    expect(refused.type === "unavailable" && refused.reason).toContain("npm run provision");
  });

  it("acquire is idempotent per key and a lease from another provider is refused", async () => {
    const { scope, lease, bindings } = await acquire(driver, root);
    const again = await driver.acquire({
      scope,
      fence: fenceFor(scope),
      plan: PLAN,
      workspace: bindings.workspace,
      outputs: bindings.outputs,
      idempotencyKey: "acquire",
      signal: never(),
    });
    expect(again).toEqual({ type: "acquired", lease });
    const foreign: ManagedSandboxLease = { provider: "node-docker", runtimeId: lease.runtimeId };
    expect(await driver.terminate({ scope, fence: fenceFor(scope), lease: foreign, reason: "completed", signal: never() })).toMatchObject({
      type: "failed",
    });
    expect(await driver.suspend()).toMatchObject({ type: "failed" });
  });
});
