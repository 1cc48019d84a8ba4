/**
 * Test support for the node-docker suites: they run against the real
 * dockerd started by `scripts/provision.sh` and FAIL (never skip) when the
 * engine or the images are missing, with the command that fixes it.
 */
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, realpath, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  type FenceIdentity,
  OUTPUTS_MOUNT_PATH,
  type RuntimeResourceScope,
  type SessionOutputBinding,
  WORKSPACE_MOUNT_PATH,
  type WorkspaceBinding,
} from "@openma/contract";
import type Docker from "dockerode";
import { NodeDockerSandbox, type NodeDockerSandboxOptions } from "./driver.ts";
import { connectDocker, type ImageManifest, imagePresent, PROVISION_HINT, probeEngine, readImageManifest } from "./engine.ts";

export const TEST_LABEL = "openma.test-run";

export interface DockerTestEnv {
  docker: Docker;
  images: ImageManifest;
  /** Unique per test file run: every container a suite makes carries it. */
  runId: string;
  labels: Record<string, string>;
  driver(options?: Partial<NodeDockerSandboxOptions>): NodeDockerSandbox;
}

/** Throws (so the suite fails) when dockerd or the sandbox images are not there. */
export async function requireDocker(): Promise<DockerTestEnv> {
  const docker = connectDocker();
  const engine = await probeEngine(docker);
  if (!engine.ok) throw new Error(engine.message);
  const manifest = await readImageManifest();
  if (!manifest.ok) throw new Error(manifest.message);
  const images = manifest.manifest;
  for (const image of [images.busybox.image, images.base.image]) {
    if (!(await imagePresent(docker, image))) throw new Error(`image ${image} is not loaded in dockerd: ${PROVISION_HINT}`);
  }
  const runId = randomBytes(6).toString("hex");
  const labels = { [TEST_LABEL]: runId };
  return {
    docker,
    images,
    runId,
    labels,
    driver: (options = {}) =>
      new NodeDockerSandbox({ image: images.busybox.image, docker, ...options, labels: { ...labels, ...options.labels } }),
  };
}

/** Force-removes every container of this run (the safety net; tests assert emptiness themselves). */
export async function removeRunContainers(env: DockerTestEnv): Promise<void> {
  const containers = await env.docker.listContainers({ all: true, filters: { label: [`${TEST_LABEL}=${env.runId}`] } });
  await Promise.all(
    containers.map((c) =>
      env.docker
        .getContainer(c.Id)
        .remove({ force: true, v: true })
        .catch(() => {}),
    ),
  );
}

export interface HostBindings {
  root: string;
  workspaceDir: string;
  outputsDir: string;
  workspace: WorkspaceBinding;
  outputs: SessionOutputBinding;
}

/** Fresh host directories for `/workspace` and `/mnt/session/outputs`, as the filesystem ports would make them. */
export async function hostBindings(): Promise<HostBindings> {
  const root = await realpath(await mkdtemp(join(tmpdir(), "openma-docker-test-")));
  const workspaceDir = join(root, "workspace");
  const outputsDir = join(root, "outputs");
  await mkdir(workspaceDir);
  await mkdir(outputsDir);
  return {
    root,
    workspaceDir,
    outputsDir,
    workspace: {
      bindingId: `wsb_${randomBytes(4).toString("hex")}`,
      strategy: "checkpoint_restore",
      mountPath: WORKSPACE_MOUNT_PATH,
      metadata: { hostPath: workspaceDir },
    },
    outputs: {
      bindingId: `out_${randomBytes(4).toString("hex")}`,
      strategy: "final_collect",
      mountPath: OUTPUTS_MOUNT_PATH,
      metadata: { hostPath: outputsDir },
    },
  };
}

export async function removeHostBindings(bindings: HostBindings): Promise<void> {
  await rm(bindings.root, { recursive: true, force: true });
}

export function testScope(): RuntimeResourceScope {
  const id = randomBytes(6).toString("hex");
  return { environmentId: `env_${id}`, sessionId: `sesn_${id}` };
}

export function testFence(scope: RuntimeResourceScope, generation = 1): FenceIdentity {
  return { scope, ownerId: `owner_${randomBytes(4).toString("hex")}`, generation, expiresAt: Date.now() + 60_000 };
}

export const never = new AbortController().signal;

/**
 * Memoizes an async setup. Suites call it from `beforeEach`, not
 * `beforeAll`: a throwing `beforeAll` makes vitest report the tests as
 * skipped, while a throwing `beforeEach` fails every one of them with the
 * setup's message (e.g. "run `npm run provision`").
 */
export function once<T>(setup: () => Promise<T>): () => Promise<T> {
  let result: Promise<T> | null = null;
  return () => {
    result ??= setup();
    return result;
  };
}
