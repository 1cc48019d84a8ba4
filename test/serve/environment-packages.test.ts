/**
 * An environment's `packages` in the serve lane on the real Docker Engine:
 * the first session's sandbox installs them (npm, from the registry) into a
 * layer committed per environment and packages hash, the second session of
 * the environment starts from that layer without installing anything
 * (asserted on the image and on the install steps that ran, not on time),
 * and an install that cannot succeed (pip: its index is unreachable here)
 * is a refusal carrying a terminal `session.error`, with no layer left.
 * On bubblewrap, npm and pip packages from a local registry stand-in go
 * into a per-environment prefix through the sandbox's egress gateway (only
 * the registry's host allowed), the second session reuses it without a
 * fetch, and apt is refused with the reason.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Logger } from "@openma/api";
import type { SandboxRequest, ToolSandboxPort } from "@openma/contract";
import { connectDocker, PACKAGES_ENVIRONMENT_LABEL } from "@openma/driver-node-docker";
import { type EgressAuditEvent, GatewayEgressPort } from "@openma/egress";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hostProbes, openBackend, type ServeSandboxes, sessionSandboxes } from "../../apps/openma/src/sandbox.ts";
import { NPM_PACKAGE, type PackageRegistry, PIP_PACKAGE, startPackageRegistry } from "../support/package-registry.ts";

/** Every progress report the resolver logs, in order. */
const progress: Record<string, unknown>[] = [];
const logger: Logger = {
  info(fields: unknown, message?: string) {
    if (message === "environment packages") progress.push(fields as Record<string, unknown>);
  },
  warn() {},
  error() {},
} as Logger;

const run = Math.random().toString(36).slice(2, 10);

function cloudEnvironment(id: string, packages: Record<string, string[]>) {
  return {
    type: "environment",
    id,
    name: id,
    config: {
      type: "cloud",
      networking: { type: "unrestricted" },
      packages: { type: "packages", apt: [], cargo: [], gem: [], go: [], npm: [], pip: [], ...packages },
    },
  };
}

const request = (sessionId: string, environment: ReturnType<typeof cloudEnvironment>): SandboxRequest => ({
  sessionId,
  environmentId: environment.id,
  environment,
  signal: AbortSignal.timeout(600_000),
});

async function sh(port: ToolSandboxPort, script: string): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  const result = await port.exec({ command: ["sh", "-c", script], timeoutMs: 60_000, signal: AbortSignal.timeout(90_000) });
  if (result.type !== "exited") throw new Error(`exec did not exit: ${result.type}`);
  const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");
  return { exitCode: result.exitCode, stdout: text(result.stdout), stderr: text(result.stderr) };
}

const docker = connectDocker();
const layersOf = async (environmentId: string) =>
  docker.listImages({ filters: { label: [`${PACKAGES_ENVIRONMENT_LABEL}=${environmentId}`] } });

describe("environment packages on Docker", () => {
  let dataDir: string;
  let sandboxes: ServeSandboxes;
  const npmEnv = cloudEnvironment(`env_npm_${run}`, { npm: ["semver@7.6.3"] });
  const pipEnv = cloudEnvironment(`env_pip_${run}`, { pip: ["requests==2.32.3"] });

  beforeAll(async () => {
    const probe = await hostProbes.docker();
    if (!probe.ok) throw new Error(`Docker is required for this test: ${probe.reason}`);
    dataDir = await mkdtemp(join(tmpdir(), "openma-packages-"));
    sandboxes = sessionSandboxes(await openBackend({ type: "docker", image: probe.image }), { dataDir, logger });
  });
  afterAll(async () => {
    await sandboxes?.close();
    for (const env of [npmEnv, pipEnv])
      for (const image of await layersOf(env.id))
        await docker
          .getImage(image.Id)
          .remove({ force: true })
          .catch(() => {});
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it("installs npm packages into a cached layer the second session reuses", async () => {
    const first = await sandboxes.resolve(request(`sesn_a_${run}`, npmEnv));
    if (first.type !== "ready") throw new Error(first.reason);
    // The package works for the unprivileged agent.
    expect(
      await sh(first.port, "id -u; semver -i minor 7.6.3; node -p \"require('/usr/local/lib/node_modules/semver/package.json').version\""),
    ).toEqual({
      exitCode: 0,
      stdout: "1000\n7.7.0\n7.6.3\n",
      stderr: "",
    });
    const layers = await layersOf(npmEnv.id);
    expect(layers).toHaveLength(1);
    const steps = progress.filter((p) => p.environmentId === npmEnv.id).map((p) => [p.type, p.manager ?? null]);
    expect(steps).toEqual([
      ["started", "npm"],
      ["finished", "npm"],
      ["ready", null],
    ]);

    progress.length = 0;
    const second = await sandboxes.resolve(request(`sesn_b_${run}`, npmEnv));
    if (second.type !== "ready") throw new Error(second.reason);
    expect(await sh(second.port, "semver -i patch 1.2.3")).toMatchObject({ exitCode: 0, stdout: "1.2.4\n" });
    // Nothing was installed: the one layer was found, the same image as before.
    expect(progress.map((p) => p.type)).toEqual(["cached"]);
    expect((await layersOf(npmEnv.id)).map((i) => i.Id)).toEqual(layers.map((i) => i.Id));
    await sandboxes.release(`sesn_a_${run}`);
    await sandboxes.release(`sesn_b_${run}`);
  }, 600_000);

  it("a failed install is a terminal session error naming the manager, and leaves no layer", async () => {
    const resolved = await sandboxes.resolve(request(`sesn_c_${run}`, pipEnv));
    expect(resolved).toMatchObject({
      type: "unavailable",
      reason: expect.stringContaining("pip exited with"),
      sessionError: {
        type: "unknown_error",
        message: expect.stringContaining("installing the environment's pip packages failed"),
        retry_status: { type: "terminal" },
      },
    });
    expect(await layersOf(pipEnv.id)).toEqual([]);
  }, 300_000);

  it("refuses package names that could be options, before anything runs", async () => {
    const hostile = cloudEnvironment(`env_bad_${run}`, { npm: ["--registry=http://127.0.0.1:1/"] });
    const resolved = await sandboxes.resolve(request(`sesn_d_${run}`, hostile));
    expect(resolved).toMatchObject({
      type: "unavailable",
      sessionError: { message: expect.stringContaining("is not a package name this server installs") },
    });
    expect(await layersOf(hostile.id)).toEqual([]);
  });
});

describe("environment packages on bubblewrap", () => {
  let registry: PackageRegistry;
  let dataDir: string;
  let sandboxes: ServeSandboxes;
  const audit: EgressAuditEvent[] = [];
  const env = cloudEnvironment(`env_bw_${run}`, { npm: [NPM_PACKAGE], pip: [PIP_PACKAGE] });

  beforeAll(async () => {
    const probe = await hostProbes.bubblewrap();
    if (!probe.ok) throw new Error(`bubblewrap is required for this test: ${probe.reason}`);
    registry = await startPackageRegistry();
    dataDir = await mkdtemp(join(tmpdir(), "openma-packages-bwrap-"));
    // Only the registry's host is allowed: the installs can only have gone through the gateway.
    const egress = new GatewayEgressPort({
      configFor: async () => ({ networking: { type: "limited", allowed_hosts: [registry.host] }, credentials: [] }),
      onAudit: (event) => audit.push(event),
    });
    const backend = await openBackend({ type: "bubblewrap" }, {}, egress, { npm: registry.npm, pip: registry.pip });
    sandboxes = sessionSandboxes(backend, { dataDir, logger });
  });
  afterAll(async () => {
    await sandboxes?.close();
    await registry?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it("installs npm and pip packages into a per-environment prefix through the gateway; the second session reuses it", async () => {
    progress.length = 0;
    const first = await sandboxes.resolve(request(`sesn_f_${run}`, env));
    if (first.type !== "ready") throw new Error(first.reason);
    const use =
      "openma-demo; node -p \"require('openma-demo-cli').answer\"; openma-demo-py; python3 -c 'import openma_demo; print(openma_demo.ANSWER)'";
    expect(await sh(first.port, use)).toEqual({ exitCode: 0, stdout: "demo-cli 42\n42\ndemo-py 42\n42\n", stderr: "" });
    // Read-only for the agent.
    expect((await sh(first.port, "touch /opt/openma/packages/x")).exitCode).not.toBe(0);
    const steps = progress.filter((p) => p.environmentId === env.id).map((p) => [p.type, p.manager ?? null]);
    expect(steps).toEqual([
      ["started", "pip"],
      ["finished", "pip"],
      ["started", "npm"],
      ["finished", "npm"],
      ["ready", null],
    ]);
    expect(registry.requests).toEqual(expect.arrayContaining([`/${NPM_PACKAGE}`, `/simple/${PIP_PACKAGE}/`]));
    expect(audit).toEqual(expect.arrayContaining([expect.objectContaining({ type: "egress.allowed", host: registry.host })]));

    progress.length = 0;
    const fetched = registry.requests.length;
    const second = await sandboxes.resolve(request(`sesn_g_${run}`, env));
    if (second.type !== "ready") throw new Error(second.reason);
    expect(await sh(second.port, use)).toMatchObject({ exitCode: 0, stdout: "demo-cli 42\n42\ndemo-py 42\n42\n" });
    // Nothing was installed or fetched again: the prefix was found complete.
    expect(progress.map((p) => p.type)).toEqual(["cached"]);
    expect(registry.requests.length).toBe(fetched);
    await sandboxes.release(`sesn_f_${run}`);
    await sandboxes.release(`sesn_g_${run}`);
  }, 300_000);

  it("refuses apt packages with a terminal session error saying why", async () => {
    const resolved = await sandboxes.resolve(request(`sesn_h_${run}`, cloudEnvironment(`env_apt_${run}`, { apt: ["jq"] })));
    expect(resolved).toMatchObject({
      type: "unavailable",
      sessionError: {
        message: expect.stringMatching(/cannot install apt packages: apt writes the system .* never runs as root; use the Docker driver/),
        retry_status: { type: "terminal" },
      },
    });
  });
});
