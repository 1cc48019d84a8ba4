/**
 * The shared driver suite on node-docker, against the real dockerd and the
 * busybox sandbox image (the smallest image the driver must work with).
 * Containers share the host kernel, so their processes are visible in the
 * host's /proc, which is how the suite's process probes see them. Fails,
 * never skips, when the engine or the images are missing.
 */
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { checkPersistentShell, type DriverUnderTest, describeDriver, hostProcesses } from "@openma/driver-suite";
import { afterAll, describe, expect, it } from "vitest";
import { connectDocker } from "./engine.ts";
import {
  type DockerTestEnv,
  hostBindings,
  never,
  removeHostBindings,
  removeRunContainers,
  requireDocker,
  TEST_LABEL,
  testFence,
  testScope,
} from "./testing.ts";

async function dockerUnderTest(env: DockerTestEnv): Promise<DriverUnderTest> {
  const driver = env.driver();
  const made: Array<Awaited<ReturnType<typeof hostBindings>>> = [];
  return {
    sandbox: driver,
    bindings: async (seed) => {
      const host = await hostBindings();
      made.push(host);
      for (const [path, content] of Object.entries(seed)) {
        await mkdir(dirname(join(host.workspaceDir, path)), { recursive: true });
        await writeFile(join(host.workspaceDir, path), content);
      }
      // Ephemeral, matching the suite's plan (the helper's default is checkpoint_restore).
      return { workspace: { ...host.workspace, strategy: "ephemeral" }, outputs: host.outputs };
    },
    tools: async (lease) => {
      if (lease === null) throw new Error("node-docker serves tools only for a lease");
      return driver.toolSandbox(lease);
    },
    readBinding: async (binding, relativePath) => {
      const base = binding.metadata?.hostPath;
      if (typeof base !== "string") return null;
      return readFile(join(base, relativePath), "utf8").catch(() => null);
    },
    // A separate process would open its own engine connection and know nothing but the configuration.
    reopen: async () => env.driver({ docker: connectDocker() }),
    hostProcesses,
    // No sweep here: the suite terminates its runtimes itself, and the leftovers check below verifies that it did.
    close: async () => {
      for (const host of made.splice(0)) await removeHostBindings(host);
    },
  };
}

let shared: Promise<DockerTestEnv> | null = null;
const environment = () => {
  shared ??= requireDocker();
  return shared;
};

describe("node-docker prerequisites", () => {
  it("dockerd answers and the sandbox images are loaded (otherwise: run `npm run provision`)", async () => {
    await expect(environment()).resolves.toMatchObject({ runId: expect.any(String) });
  });
});

// Every case of the shared suite: the default configuration (no network, dropped capabilities, limits).
describeDriver("node-docker", async () => dockerUnderTest(await environment()), {
  skips: { "bash: persistent shell": "the busybox image has no /bin/bash; the case runs on the base image below" },
});

describe("node-docker persistent shell", () => {
  it("runs the suite's persistent-shell case on the base image (the one with /bin/bash)", async () => {
    const env = await environment();
    const driver = env.driver({ image: env.images.base.image });
    const bindings = await hostBindings();
    const scope = testScope();
    const fence = testFence(scope);
    const acquired = await driver.acquire({
      scope,
      fence,
      workspace: bindings.workspace,
      outputs: null,
      idempotencyKey: "shell",
      signal: never,
    });
    if (acquired.type !== "acquired") throw new Error(`acquire failed: ${acquired.reason}`);
    try {
      await checkPersistentShell(driver.toolSandbox(acquired.lease));
    } finally {
      await driver.terminate({ scope, fence, lease: acquired.lease, reason: "completed", signal: never });
      await removeHostBindings(bindings);
    }
  });
});

describe("node-docker suite leftovers", () => {
  it("leaves no container of this run behind", async () => {
    const env = await environment();
    // The suite's own afterAll ran before this block: its terminations must have removed every container.
    const left = await env.docker.listContainers({ all: true, filters: { label: [`${TEST_LABEL}=${env.runId}`] } });
    expect(left.map((c) => c.Names)).toEqual([]);
  });
});

// The safety net when a case failed half-way; the check above is what asserts emptiness.
afterAll(async () => {
  const env = await shared?.catch(() => null);
  if (env) await removeRunContainers(env);
});
