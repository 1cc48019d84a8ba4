/**
 * Test fixtures for the bubblewrap driver: temporary binding directories
 * (traversable by the sandbox's unprivileged host uid), acquire inputs, and
 * the DriverUnderTest the shared suite drives. Tests fail, never skip, when
 * bwrap is missing.
 */
import { existsSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type {
  FenceIdentity,
  ManagedRuntimePlan,
  ManagedSandboxLease,
  RuntimeResourceScope,
  SessionOutputBinding,
  WorkspaceBinding,
} from "@openma/contract";
import { type DriverUnderTest, hostProcesses } from "@openma/driver-suite";
import { type BubblewrapOptions, BubblewrapSandbox, PROVISION_HINT } from "./driver.ts";

export function assertBwrapInstalled(): void {
  if (!["/usr/bin/bwrap", "/bin/bwrap", "/usr/local/bin/bwrap"].some((path) => existsSync(path))) {
    throw new Error(`bubblewrap (bwrap) is not installed on this host: ${PROVISION_HINT}`);
  }
}

export const never = () => new AbortController().signal;

/** A scratch directory every sandbox host uid can traverse (mkdtemp makes 0700 ones). */
export async function scratch(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), `openma-${prefix}-`));
  await chmod(dir, 0o755);
  return dir;
}

let bindingCounter = 0;

export async function makeBindings(
  root: string,
  seed: Readonly<Record<string, string>> = {},
): Promise<{ workspace: WorkspaceBinding; outputs: SessionOutputBinding }> {
  const id = `b${++bindingCounter}`;
  const ws = join(root, id, "workspace");
  const out = join(root, id, "outputs");
  await mkdir(ws, { recursive: true });
  await mkdir(out, { recursive: true });
  await chmod(join(root, id), 0o755);
  for (const [path, text] of Object.entries(seed)) {
    await mkdir(dirname(join(ws, path)), { recursive: true });
    await writeFile(join(ws, path), text);
  }
  return {
    workspace: { bindingId: `ws-${id}`, strategy: "ephemeral", mountPath: "/workspace", metadata: { hostPath: ws } },
    outputs: { bindingId: `out-${id}`, strategy: "final_collect", mountPath: "/mnt/session/outputs", metadata: { hostPath: out } },
  };
}

export function fenceFor(scope: RuntimeResourceScope): FenceIdentity {
  return { scope, ownerId: "bwrap-test", generation: 1, expiresAt: Date.now() + 3_600_000 };
}

export const PLAN: ManagedRuntimePlan = {
  provider: "bubblewrap",
  driver: { type: "ama_worker", process: { command: "true" } },
  workspace: { requirement: "ephemeral", strategy: "ephemeral", durability: "none" },
  outputs: { requirement: "best_effort", strategy: "final_collect", durability: "durable" },
  runtimeCheckpoint: null,
};

let sessionCounter = 0;

/** Acquires one runtime; throws (so the test fails) when the driver refuses. */
export async function acquire(
  driver: BubblewrapSandbox,
  root: string,
  seed: Readonly<Record<string, string>> = {},
): Promise<{ scope: RuntimeResourceScope; lease: ManagedSandboxLease; bindings: Awaited<ReturnType<typeof makeBindings>> }> {
  const scope = { environmentId: "env_bwrap_test", sessionId: `sess_${++sessionCounter}_${Date.now()}` };
  const bindings = await makeBindings(root, seed);
  const result = await driver.acquire({
    scope,
    fence: fenceFor(scope),
    plan: PLAN,
    workspace: bindings.workspace,
    outputs: bindings.outputs,
    idempotencyKey: "acquire",
    signal: never(),
  });
  if (result.type !== "acquired") throw new Error(`acquire failed: ${result.reason}`);
  return { scope, lease: result.lease, bindings };
}

/** The shared suite's view of a bubblewrap driver with `options`, rooted in a fresh scratch directory. */
export async function bubblewrapUnderTest(options: BubblewrapOptions = {}): Promise<DriverUnderTest> {
  assertBwrapInstalled();
  const root = await scratch("bwrap-suite");
  const config = { stateRoot: join(root, "state"), ...options };
  const driver = new BubblewrapSandbox(config);
  const reopened: BubblewrapSandbox[] = [];
  return {
    sandbox: driver,
    bindings: (seed) => makeBindings(root, seed),
    tools: async (lease) => driver.toolSandbox(lease as ManagedSandboxLease),
    readBinding: async (binding, relativePath) => {
      const base = binding.metadata?.hostPath;
      if (typeof base !== "string") return null;
      return readFile(join(base, relativePath), "utf8").catch(() => null);
    },
    reopen: async () => {
      const other = new BubblewrapSandbox(config);
      reopened.push(other);
      return other;
    },
    hostProcesses,
    close: async () => {
      for (const other of reopened) await other.shutdown();
      await driver.shutdown();
      await rm(root, { recursive: true, force: true });
    },
  };
}
