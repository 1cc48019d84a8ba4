/**
 * Suspend and resume on the cloud drivers, where the conformance table
 * says `suspendResume: supported`, against each vendor's stand-in (real
 * local containers: a pause really freezes processes, a stop really ends
 * them). A runtime writes a file and starts a long-running process; it is
 * suspended; a later acquire with the same key resumes it.
 *
 * - E2B: pause keeps memory, so the file and the running process are both
 *   there after `connect` resumes it.
 * - Daytona: stop keeps the filesystem and ends every process; start brings
 *   the files back, not the process.
 * - Blaxel: archive keeps the filesystem and ends every process (the
 *   sandbox is shut down); unarchive brings the files back, not the process.
 * - Vercel: stop snapshots a persistent sandbox's filesystem and ends its
 *   session; the next acquire restores the snapshot into a new session, the
 *   files back, not the process.
 * - Modal: no pause; suspend syncs /workspace to its Volume v2 subpath and
 *   ends the compute; the next acquire creates a new sandbox over the same
 *   subpath, with the files and without the process.
 * - Sprites: the platform sleeps on its own (the driver's suspend asks
 *   nothing); warm keeps the process frozen and a request wakes it, cold
 *   keeps only the filesystem.
 *
 * Whether the process still exists is read from the host's /proc (the
 * stand-in's containers share the kernel), never from the driver.
 */
import type { FenceIdentity, ManagedSandboxLease, RuntimeResourceScope } from "@openma/contract";
import type { CloudStandIn } from "@openma/standin-kit";
import type { ModalStandIn } from "@openma/standin-modal";
import type { SpritesStandIn } from "@openma/standin-sprites";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { processesMentioning } from "../runtime/support.ts";
import { startVendorStandIn, type Vendor, vendorDriver } from "../support/cloud.ts";

const never = () => new AbortController().signal;

interface Started {
  scope: RuntimeResourceScope;
  fence: FenceIdentity;
  lease: ManagedSandboxLease;
  marker: string;
}

async function startWithProcess(vendor: Vendor, standIn: CloudStandIn): Promise<Started> {
  const driver = vendorDriver(vendor, standIn);
  const id = Math.random().toString(36).slice(2, 10);
  const scope = { environmentId: `env_${id}`, sessionId: `sesn_${id}` };
  const fence = { scope, ownerId: `owner_${id}`, generation: 1, expiresAt: Date.now() + 3_600_000 };
  const acquired = await driver.acquire({
    scope,
    fence,
    workspace: { bindingId: `ws-${id}`, strategy: "ephemeral", mountPath: "/workspace" },
    outputs: null,
    idempotencyKey: "suspend-resume",
    signal: never(),
  });
  if (acquired.type !== "acquired") throw new Error(acquired.reason);
  const tools = driver.toolSandbox(acquired.lease);
  const wrote = await tools.exec({ command: ["sh", "-c", "echo kept > /workspace/kept.txt"], timeoutMs: 60_000, signal: never() });
  expect(wrote.type === "exited" && wrote.exitCode).toBe(0);
  const marker = `sleep ${2_000_000 + Math.floor(Math.random() * 7_000_000)}`;
  let running!: () => void;
  const started = new Promise<void>((resolve) => {
    running = resolve;
  });
  // Not awaited and never aborted: only the provider's lifecycle can end it.
  void tools.exec({
    command: ["sh", "-c", `echo started; exec ${marker}`],
    timeoutMs: 3_600_000,
    signal: never(),
    onOutput: (_stream, chunk) => Buffer.from(chunk).toString().includes("started") && running(),
  });
  await started;
  expect(await processesMentioning(marker)).not.toEqual([]);
  return { scope, fence, lease: acquired.lease, marker };
}

/** A second instance (as after a host restart) acquires with the same key: it finds and resumes the runtime. */
async function resumeAndRead(vendor: Vendor, standIn: CloudStandIn, run: Started): Promise<string> {
  const driver = vendorDriver(vendor, standIn);
  const again = await driver.acquire({
    scope: run.scope,
    fence: run.fence,
    workspace: { bindingId: "ws-again", strategy: "ephemeral", mountPath: "/workspace" },
    outputs: null,
    idempotencyKey: "suspend-resume",
    signal: never(),
  });
  expect(again.type === "acquired" && again.lease.runtimeId).toBe(run.lease.runtimeId);
  expect(standIn.state(run.lease.runtimeId)).toBe("running");
  const read = await driver.toolSandbox(run.lease).readFile({ path: "/workspace/kept.txt", maxBytes: 1024, signal: never() });
  return read.type === "ok" ? Buffer.from(read.content).toString("utf8") : `(${read.type})`;
}

async function terminate(vendor: Vendor, standIn: CloudStandIn, run: Started): Promise<void> {
  const driver = vendorDriver(vendor, standIn);
  expect(await driver.terminate({ scope: run.scope, fence: run.fence, lease: run.lease, reason: "completed", signal: never() })).toEqual({
    type: "terminated",
  });
  expect(standIn.state(run.lease.runtimeId)).toBe("gone");
  expect(await processesMentioning(run.marker)).toEqual([]);
}

describe.each(["e2b", "daytona", "blaxel", "vercel", "superserve", "boxrun"] as const)("suspend and resume on %s", (vendor) => {
  let standIn: CloudStandIn;
  beforeAll(async () => {
    standIn = await startVendorStandIn(vendor);
  });
  afterAll(async () => {
    await standIn?.close();
  });

  // E2B's and Superserve's pause keep memory.
  const keepsProcesses = vendor === "e2b" || vendor === "superserve";
  it(`keeps the files${keepsProcesses ? " and the running process" : ", not the processes,"} across a suspend`, async () => {
    const run = await startWithProcess(vendor, standIn);
    const driver = vendorDriver(vendor, standIn);
    const suspended = await driver.suspend({ scope: run.scope, fence: run.fence, lease: run.lease, signal: never() });
    expect(suspended).toEqual({ type: "suspended", lease: run.lease });
    expect(standIn.state(run.lease.runtimeId)).toBe("suspended");
    expect(await driver.inspect({ lease: run.lease, signal: never() })).toEqual({ state: "suspended" });
    // Heartbeats tell the host a suspended runtime is not serving.
    expect((await driver.heartbeat({ scope: run.scope, fence: run.fence, lease: run.lease, signal: never() })).type).toBe("lost");

    expect(await resumeAndRead(vendor, standIn, run)).toBe("kept\n");
    if (keepsProcesses) expect(await processesMentioning(run.marker)).not.toEqual([]);
    else expect(await processesMentioning(run.marker)).toEqual([]);
    await terminate(vendor, standIn, run);
    expect(standIn.live()).toBe(0);
  });
});

describe("compute recreated over the volume on modal", () => {
  let standIn: ModalStandIn;
  beforeAll(async () => {
    standIn = (await startVendorStandIn("modal")) as ModalStandIn;
  });
  afterAll(async () => {
    await standIn?.close();
  });

  it("keeps the files, not the processes, in a new sandbox over the same volume subpath", async () => {
    const run = await startWithProcess("modal", standIn);
    const driver = vendorDriver("modal", standIn);
    expect(await driver.suspend({ scope: run.scope, fence: run.fence, lease: run.lease, signal: never() })).toEqual({
      type: "suspended",
      lease: run.lease,
    });
    // The workspace was synced in the sandbox before its compute ended.
    const ended = standIn.table.get(run.lease.runtimeId);
    expect([...(ended?.execs.values() ?? [])].map((e) => e.command.join(" "))).toContain("sync /workspace");
    expect(ended?.result).toMatchObject({ status: 3 });
    expect(standIn.state(run.lease.runtimeId)).toBe("gone");
    expect(standIn.live()).toBe(0);
    expect(await processesMentioning(run.marker)).toEqual([]);
    expect(await driver.inspect({ lease: run.lease, signal: never() })).toEqual({ state: "stopped" });
    expect((await driver.heartbeat({ scope: run.scope, fence: run.fence, lease: run.lease, signal: never() })).type).toBe("lost");

    // A second instance acquires with the same key: new compute, the same subpath.
    const again = await vendorDriver("modal", standIn).acquire({
      scope: run.scope,
      fence: run.fence,
      workspace: { bindingId: "ws-again", strategy: "ephemeral", mountPath: "/workspace" },
      outputs: null,
      idempotencyKey: "suspend-resume",
      signal: never(),
    });
    if (again.type !== "acquired") throw new Error(again.reason);
    expect(again.lease.runtimeId).not.toBe(run.lease.runtimeId);
    expect(standIn.state(again.lease.runtimeId)).toBe("running");
    const read = await driver.toolSandbox(again.lease).readFile({ path: "/workspace/kept.txt", maxBytes: 1024, signal: never() });
    expect(read.type === "ok" && Buffer.from(read.content).toString("utf8")).toBe("kept\n");
    expect(await processesMentioning(run.marker)).toEqual([]);
    await terminate("modal", standIn, { ...run, lease: again.lease });
    expect(standIn.live()).toBe(0);
  });
});

describe("automatic sleep and wake on sprites", () => {
  let standIn: SpritesStandIn;
  beforeAll(async () => {
    standIn = (await startVendorStandIn("sprites")) as SpritesStandIn;
  });
  afterAll(async () => {
    await standIn?.close();
  });

  it("wakes a warm Sprite with its process frozen, a cold one with its files only", async () => {
    const run = await startWithProcess("sprites", standIn);
    const driver = vendorDriver("sprites", standIn);
    // The driver's suspend asks the platform nothing: a Sprite sleeps on its own once idle.
    expect(await driver.suspend({ scope: run.scope, fence: run.fence, lease: run.lease, signal: never() })).toEqual({
      type: "suspended",
      lease: run.lease,
    });
    const sprite = standIn.table.get(run.lease.runtimeId);
    if (!sprite) throw new Error("the stand-in lost the Sprite");

    await standIn.table.hibernate(sprite, "warm");
    expect(standIn.state(run.lease.runtimeId)).toBe("suspended");
    // Sleeping is not lost: the next request wakes it.
    expect((await driver.heartbeat({ scope: run.scope, fence: run.fence, lease: run.lease, signal: never() })).type).toBe("alive");
    expect(await driver.inspect({ lease: run.lease, signal: never() })).toEqual({ state: "suspended" });
    expect(await resumeAndRead("sprites", standIn, run)).toBe("kept\n");
    expect(await processesMentioning(run.marker)).not.toEqual([]);

    await standIn.table.hibernate(sprite, "cold");
    expect(await processesMentioning(run.marker)).toEqual([]);
    expect(await resumeAndRead("sprites", standIn, run)).toBe("kept\n");
    await terminate("sprites", standIn, run);
    expect(standIn.live()).toBe(0);
  });
});
