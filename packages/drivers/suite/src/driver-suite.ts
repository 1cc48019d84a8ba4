/**
 * The shared driver suite: one set of vitest cases every sandbox driver runs
 * against a real backend, so "the driver conforms" means the same thing for
 * bubblewrap, Docker or anything added later.
 *
 *   describeDriver("bubblewrap", async () => ({ ...a DriverUnderTest }));
 *   describeDriver("subprocess", factory, { skips: { acquire: "tools-only driver: ..." } });
 *
 * A driver that cannot do something declares a skip with a reason a user
 * would accept; the case is then registered as skipped with the reason in
 * its name (so it is printed in every run, never silently absent), and an
 * unknown case name or a throwaway reason fails at registration.
 *
 * Test-only code: imports vitest, so it lives outside the package index.
 */

import type { FenceIdentity } from "@openma/contract/fence";
import type { SessionOutputBinding } from "@openma/contract/outputs";
import type { ManagedRuntimePlan } from "@openma/contract/plan";
import { type ManagedSandboxLease, type ManagedSandboxPort, sandboxLeaseIssues } from "@openma/contract/sandbox";
import type { RuntimeResourceScope } from "@openma/contract/scope";
import type { ExecResult, OutputStream, ToolSandboxPort } from "@openma/contract/tool-sandbox";
import type { WorkspaceBinding } from "@openma/contract/workspace";
import { runSandboxTool } from "@openma/harness";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually } from "./eventually.ts";
import type { HostProcessView } from "./host-processes.ts";

export { type HostProcessView, hostProcesses } from "./host-processes.ts";

export const DRIVER_SUITE_CASES = [
  "acquire",
  "exec: streaming and exit codes",
  "exec: stdin",
  "exec: timeout",
  "exec: abort kills the process tree",
  "files: read and write",
  "bindings: /workspace and /mnt/session/outputs",
  "terminate: idempotent",
  "reap: from a serialized lease",
  "inspect: after terminate",
  "exec: no secrets in argv",
  "bash: persistent shell",
] as const;

export type DriverSuiteCase = (typeof DRIVER_SUITE_CASES)[number];

export interface DriverUnderTest {
  /** The lifecycle port; null for a tools-only driver (whose lifecycle cases must then be skipped). */
  sandbox: ManagedSandboxPort | null;
  /** Fresh bindings for one runtime, with `seed` (relative path → text) already in the workspace. */
  bindings(seed: Readonly<Record<string, string>>): Promise<{ workspace: WorkspaceBinding; outputs: SessionOutputBinding | null }>;
  /** The tool port of a runtime; `lease` is null for a tools-only driver, `sessionId` tells runtimes apart. */
  tools(lease: ManagedSandboxLease | null, sessionId: string): Promise<ToolSandboxPort>;
  /** A file of a binding as the host sees it, or null when absent. */
  readBinding(binding: WorkspaceBinding | SessionOutputBinding, relativePath: string): Promise<string | null>;
  /** Another instance built the way a separate process would (same configuration, no shared memory). */
  reopen(): Promise<ManagedSandboxPort>;
  /** Every process on the host with argv and environment (root sees all). */
  hostProcesses(): Promise<HostProcessView[]>;
  close(): Promise<void>;
}

export interface DriverSuiteOptions {
  /** Case → why this driver cannot run it (at least 20 characters). */
  skips?: Partial<Record<DriverSuiteCase, string>>;
}

const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");
const never = () => new AbortController().signal;

function output(result: ExecResult): { stdout: string; stderr: string } {
  if (result.type === "error") throw new Error(`exec failed to start: ${result.message}`);
  return { stdout: text(result.stdout), stderr: text(result.stderr) };
}

function validateSkips(skips: Partial<Record<string, string>>): void {
  for (const [name, reason] of Object.entries(skips)) {
    if (!(DRIVER_SUITE_CASES as readonly string[]).includes(name))
      throw new Error(`describeDriver: unknown case in skips: ${JSON.stringify(name)}`);
    if (typeof reason !== "string" || reason.trim().length < 20) {
      throw new Error(`describeDriver: the skip of ${JSON.stringify(name)} needs a reason a user would accept (20+ characters)`);
    }
  }
}

/** What a case gets: the driver, a way to start a runtime, and a fence for a scope. */
interface SuiteContext {
  dut: DriverUnderTest;
  start(seed?: Record<string, string>): Promise<Run>;
  fenceFor(scope: RuntimeResourceScope): FenceIdentity;
}

interface Run {
  scope: RuntimeResourceScope;
  /** Null for a tools-only driver. */
  lease: ManagedSandboxLease | null;
  tools: ToolSandboxPort;
  bindings: { workspace: WorkspaceBinding; outputs: SessionOutputBinding | null } | null;
  plan: ManagedRuntimePlan | null;
}

const CASES: Record<DriverSuiteCase, (ctx: SuiteContext) => Promise<void>> = {
  acquire: async ({ dut, start, fenceFor }) => {
    const sandbox = dut.sandbox as ManagedSandboxPort;
    const run = await start();
    const lease = run.lease as ManagedSandboxLease;
    expect(sandboxLeaseIssues(lease)).toEqual([]);
    expect(lease.provider).toBe(sandbox.capabilities.provider);
    expect(JSON.parse(JSON.stringify(lease))).toEqual(lease);
    expect(await sandbox.heartbeat({ scope: run.scope, fence: fenceFor(run.scope), lease, signal: never() })).toEqual({ type: "alive" });
    expect(await sandbox.inspect({ lease, signal: never() })).toEqual({ state: "running" });
    // The same idempotency key finds the same runtime instead of starting a second one.
    const again = await sandbox.acquire({
      scope: run.scope,
      fence: fenceFor(run.scope),
      plan: run.plan as ManagedRuntimePlan,
      workspace: run.bindings?.workspace as WorkspaceBinding,
      outputs: run.bindings?.outputs ?? null,
      idempotencyKey: "suite-acquire",
      signal: never(),
    });
    expect(again.type === "acquired" && again.lease.runtimeId).toBe(lease.runtimeId);
  },

  "exec: streaming and exit codes": async ({ start }) => {
    const { tools } = await start();
    const seen: Array<[OutputStream, string]> = [];
    const done = await tools.exec({
      command: ["sh", "-c", "printf out1; printf err1 >&2; exit 3"],
      timeoutMs: 30_000,
      signal: never(),
      onOutput: (stream, chunk) => seen.push([stream, text(chunk)]),
    });
    expect(done.type === "exited" && done.exitCode).toBe(3);
    expect(output(done)).toEqual({ stdout: "out1", stderr: "err1" });
    expect(
      seen
        .filter(([s]) => s === "stdout")
        .map(([, t]) => t)
        .join(""),
    ).toBe("out1");
    expect(
      seen
        .filter(([s]) => s === "stderr")
        .map(([, t]) => t)
        .join(""),
    ).toBe("err1");
    const ok = await tools.exec({ command: ["true"], timeoutMs: 30_000, signal: never() });
    expect(ok.type === "exited" && ok.exitCode).toBe(0);
    // Output arrives while the process runs: the first line ends a process that would otherwise run for minutes.
    const live = new AbortController();
    const streamed = await tools.exec({
      command: ["sh", "-c", "echo first; exec sleep 300"],
      timeoutMs: 60_000,
      signal: live.signal,
      onOutput: (stream, chunk) => {
        if (stream === "stdout" && text(chunk).includes("first")) live.abort();
      },
    });
    expect(streamed.type).toBe("aborted");
    expect(output(streamed).stdout).toBe("first\n");
  },

  "exec: stdin": async ({ start }) => {
    const { tools } = await start();
    const echoed = await tools.exec({ command: ["cat"], stdin: "hello\nworld\n", timeoutMs: 30_000, signal: never() });
    expect(output(echoed).stdout).toBe("hello\nworld\n");
    const big = new Uint8Array(256 * 1024).fill(97);
    const counted = await tools.exec({ command: ["wc", "-c"], stdin: big, timeoutMs: 30_000, signal: never() });
    expect(output(counted).stdout.trim()).toBe(String(big.length));
    const none = await tools.exec({ command: ["cat"], timeoutMs: 30_000, signal: never() });
    expect(none.type === "exited" && none.exitCode).toBe(0);
  },

  "exec: timeout": async ({ start }) => {
    const { tools } = await start();
    const started = Date.now();
    const result = await tools.exec({ command: ["sleep", "300"], timeoutMs: 300, signal: never() });
    expect(result.type).toBe("timeout");
    expect(Date.now() - started).toBeLessThan(30_000);
  },

  "exec: abort kills the process tree": async ({ dut, start }) => {
    const { tools } = await start();
    const marker = `OPENMA_SUITE_TREE_${Math.random().toString(36).slice(2)}`;
    const count = async () => (await dut.hostProcesses()).filter((p) => p.environ.includes(marker)).length;
    const abort = new AbortController();
    let alive = 0;
    const result = await tools.exec({
      // Two grandchildren, one of which leaves the session: a group kill alone would miss it.
      command: ["sh", "-c", "sleep 300 & (setsid sleep 300 &) ; echo ready; wait"],
      env: { OPENMA_SUITE_MARKER: marker },
      timeoutMs: 60_000,
      signal: abort.signal,
      onOutput: (stream, chunk) => {
        if (stream === "stdout" && text(chunk).includes("ready")) {
          void count().then((n) => {
            alive = n;
            abort.abort();
          });
        }
      },
    });
    expect(result.type).toBe("aborted");
    expect(alive).toBeGreaterThanOrEqual(3); // sh and both sleeps were visible: the probe works
    await eventually(async () => (await count()) === 0, "every process of the aborted exec to be gone", 5000);
  },

  "files: read and write": async ({ start }) => {
    const { tools } = await start();
    const dir = tools.workdir;
    expect(await tools.writeFile({ path: `${dir}/nested/a.txt`, content: Buffer.from("hello"), signal: never() })).toEqual({
      type: "ok",
      bytes: 5,
    });
    expect(output(await tools.exec({ command: ["cat", "nested/a.txt"], timeoutMs: 30_000, signal: never() })).stdout).toBe("hello");
    await tools.exec({ command: ["sh", "-c", "printf written > b.txt"], timeoutMs: 30_000, signal: never() });
    const read = await tools.readFile({ path: `${dir}/b.txt`, maxBytes: 1024, signal: never() });
    expect(read.type === "ok" && text(read.content)).toBe("written");
    expect(await tools.readFile({ path: `${dir}/missing.txt`, maxBytes: 1024, signal: never() })).toEqual({ type: "not_found" });
    expect(await tools.readFile({ path: `${dir}/b.txt`, maxBytes: 3, signal: never() })).toEqual({ type: "too_large", size: 7 });
    const stat = await tools.stat({ path: `${dir}/nested/a.txt`, signal: never() });
    expect(stat.type === "found" && [stat.kind, stat.size]).toEqual(["file", 5]);
    const listed = await tools.list({ path: dir, recursive: true, maxEntries: 100, signal: never() });
    expect(listed.type === "ok" && listed.entries.map((e) => e.path)).toEqual(
      expect.arrayContaining([`${dir}/b.txt`, `${dir}/nested/a.txt`]),
    );
  },

  "bindings: /workspace and /mnt/session/outputs": async ({ dut, start }) => {
    const { tools, bindings } = await start({ "seed.txt": "seeded" });
    expect(tools.workdir).toBe("/workspace");
    expect(output(await tools.exec({ command: ["cat", "/workspace/seed.txt"], timeoutMs: 30_000, signal: never() })).stdout).toBe("seeded");
    const wrote = await tools.exec({
      command: ["sh", "-c", "echo ws > /workspace/w.txt && echo out > /mnt/session/outputs/o.txt"],
      timeoutMs: 30_000,
      signal: never(),
    });
    expect(wrote.type === "exited" && wrote.exitCode).toBe(0);
    expect(await dut.readBinding(bindings?.workspace as WorkspaceBinding, "w.txt")).toBe("ws\n");
    expect(await dut.readBinding(bindings?.outputs as SessionOutputBinding, "o.txt")).toBe("out\n");
  },

  "terminate: idempotent": async ({ dut, start, fenceFor }) => {
    const sandbox = dut.sandbox as ManagedSandboxPort;
    const { scope, lease, tools } = await start();
    const input = { scope, fence: fenceFor(scope), lease: lease as ManagedSandboxLease, reason: "completed" as const, signal: never() };
    expect(await sandbox.terminate(input)).toEqual({ type: "terminated" });
    expect(await sandbox.terminate(input)).toEqual({ type: "terminated" });
    expect((await sandbox.heartbeat(input)).type).toBe("lost");
    const after = await tools.exec({ command: ["true"], timeoutMs: 30_000, signal: never() });
    expect(after.type).not.toBe("exited");
  },

  "reap: from a serialized lease": async ({ dut, start, fenceFor }) => {
    const sandbox = dut.sandbox as ManagedSandboxPort;
    const { scope, lease } = await start();
    const serialized = JSON.parse(JSON.stringify(lease)) as ManagedSandboxLease;
    const other = await dut.reopen();
    const input = { scope, lease: serialized, reason: "host_recovery" as const, signal: never() };
    expect(await other.reap(input)).toEqual({ type: "reaped" });
    expect((await sandbox.heartbeat({ scope, fence: fenceFor(scope), lease: lease as ManagedSandboxLease, signal: never() })).type).toBe(
      "lost",
    );
    expect(await other.reap(input)).toEqual({ type: "not_found" });
  },

  "inspect: after terminate": async ({ dut, start, fenceFor }) => {
    const sandbox = dut.sandbox as ManagedSandboxPort;
    const { scope, lease } = await start();
    await sandbox.terminate({ scope, fence: fenceFor(scope), lease: lease as ManagedSandboxLease, reason: "completed", signal: never() });
    const seen = await sandbox.inspect({ lease: lease as ManagedSandboxLease, signal: never() });
    expect(["stopped", "unknown"]).toContain(seen.state);
  },

  "exec: no secrets in argv": async ({ dut, start }) => {
    const { tools, lease } = await start();
    const secret = `sk-suite-${Math.random().toString(36).slice(2)}${Math.random().toString(36).slice(2)}`;
    const abort = new AbortController();
    let inArgv = -1;
    let inEnviron = -1;
    const result = await tools.exec({
      command: ["sh", "-c", 'printf "%s" "$SUITE_SECRET" | wc -c; exec sleep 300'],
      env: { SUITE_SECRET: secret },
      timeoutMs: 60_000,
      signal: abort.signal,
      onOutput: (stream, chunk) => {
        if (stream !== "stdout" || !/\d/.test(text(chunk))) return;
        // One snapshot can fall in the shell's exec of sleep, when its environ reads empty: look again
        // (a bounded number of times) until the running process is seen. Every snapshot counts for argv.
        void (async () => {
          for (let look = 0; look < 20 && inEnviron <= 0; look++) {
            const all = await dut.hostProcesses();
            inArgv = Math.max(inArgv, all.filter((p) => p.argv.includes(secret)).length);
            inEnviron = all.filter((p) => p.environ.includes(secret)).length;
          }
        })().finally(() => abort.abort());
      },
    });
    expect(output(result).stdout.trim()).toBe(String(secret.length)); // the value did reach the process
    expect(inEnviron).toBeGreaterThan(0); // the probe saw the running process
    expect(inArgv).toBe(0);
    expect(JSON.stringify(lease)).not.toContain(secret);
  },

  "bash: persistent shell": async ({ start }) => checkPersistentShell((await start()).tools),
};

/**
 * The harness's `bash` on a driver's long-lived process: state survives
 * between calls, a timed-out `sleep 1000` is killed without wedging the next
 * call or losing a background job. Its watchdog runs inside the sandbox and
 * needs the sandbox's own /proc, `sleep` and `/bin/bash`.
 */
export async function checkPersistentShell(tools: ToolSandboxPort): Promise<void> {
  const bash = (input: Record<string, unknown>) => runSandboxTool(tools, "bash", input, never());
  expect(await bash({ command: "sleep 300 &" })).toEqual({ text: "(no output)", isError: false });
  expect(await bash({ command: "cd /tmp && export X=1" })).toEqual({ text: "(no output)", isError: false });
  expect(await bash({ command: "pwd; echo $X" })).toEqual({ text: "/tmp\n1", isError: false });
  const timedOut = await bash({ command: "sleep 1000", timeout_ms: 300 });
  expect(timedOut.isError).toBe(true);
  expect(timedOut.text).toMatch(/^bash: command timed out after 300 ms \(the command was killed; the shell/);
  expect(await bash({ command: "pwd; echo $X; jobs | grep -c 'sleep 300'" })).toEqual({ text: "/tmp\n1\n1", isError: false });
  expect(await bash({ restart: true, command: 'pwd; echo "x=$X"' })).toEqual({
    text: `[bash: the shell was restarted]\n${tools.workdir}\nx=`,
    isError: false,
  });
}

/** Starts runtimes for the cases and terminates every one of them at the end. */
class Runtimes {
  readonly #leases: Array<{ scope: RuntimeResourceScope; lease: ManagedSandboxLease }> = [];
  #counter = 0;
  constructor(private readonly owner: string) {}

  fenceFor(scope: RuntimeResourceScope): FenceIdentity {
    return { scope, ownerId: `suite-${this.owner}`, generation: 1, expiresAt: Date.now() + 3_600_000 };
  }

  async start(dut: DriverUnderTest, seed: Record<string, string> = {}): Promise<Run> {
    const scope = { environmentId: "env_driver_suite", sessionId: `sess_${++this.#counter}_${Date.now()}` };
    if (dut.sandbox === null) return { scope, lease: null, tools: await dut.tools(null, scope.sessionId), bindings: null, plan: null };
    const bindings = await dut.bindings(seed);
    const plan: ManagedRuntimePlan = {
      provider: dut.sandbox.capabilities.provider,
      driver: { type: "ama_worker", process: { command: "true" } },
      workspace: { requirement: "ephemeral", strategy: bindings.workspace.strategy, durability: "none" },
      outputs: bindings.outputs ? { requirement: "best_effort", strategy: bindings.outputs.strategy, durability: "durable" } : null,
      runtimeCheckpoint: null,
    };
    const acquired = await dut.sandbox.acquire({
      scope,
      fence: this.fenceFor(scope),
      plan,
      workspace: bindings.workspace,
      outputs: bindings.outputs,
      idempotencyKey: "suite-acquire",
      signal: never(),
    });
    if (acquired.type !== "acquired") throw new Error(`acquire failed: ${acquired.reason}`);
    this.#leases.push({ scope, lease: acquired.lease });
    return { scope, lease: acquired.lease, tools: await dut.tools(acquired.lease, scope.sessionId), bindings, plan };
  }

  async terminateAll(dut: DriverUnderTest): Promise<void> {
    for (const { scope, lease } of this.#leases.splice(0)) {
      await dut.sandbox
        ?.terminate({ scope, fence: this.fenceFor(scope), lease, reason: "completed", signal: never() })
        .catch(() => undefined);
    }
  }
}

export function describeDriver(name: string, factory: () => Promise<DriverUnderTest>, options: DriverSuiteOptions = {}): void {
  const skips = options.skips ?? {};
  validateSkips(skips);
  const skipped = Object.entries(skips);
  if (skipped.length > 0) {
    console.info(`driver suite "${name}" skips ${skipped.length} case(s):\n${skipped.map(([c, r]) => `  - ${c}: ${r}`).join("\n")}`);
  }
  describe(`driver suite: ${name}`, () => {
    let dut: DriverUnderTest | undefined;
    const runtimes = new Runtimes(name);
    const context = (): SuiteContext => {
      const current = dut as DriverUnderTest;
      return { dut: current, start: (seed) => runtimes.start(current, seed), fenceFor: (scope) => runtimes.fenceFor(scope) };
    };
    beforeAll(async () => {
      dut = await factory();
    });
    afterAll(async () => {
      if (!dut) return;
      await runtimes.terminateAll(dut);
      await dut.close();
    });
    for (const testCase of DRIVER_SUITE_CASES) {
      const reason = skips[testCase];
      const body = () => CASES[testCase](context());
      if (reason !== undefined) it.skip(`${testCase} (skipped: ${reason})`, body);
      else it(testCase, body);
    }
  });
}
