/**
 * An environment's packages as a cached image layer: the first session of an
 * environment (per packages hash) installs them in a build container of the
 * base image, as root, then commits that container to
 * `openma/env-packages:<environment id>-<hash>`; every later session of the
 * environment starts from that image and installs nothing.
 *
 * The build container is not the agent's sandbox: it runs only the package
 * managers, with the network the operator gives it (`buildNetworkMode`,
 * default the engine's bridge), and is removed whatever happens. The agent's
 * sandbox then runs unprivileged on the committed image with its own network.
 * The package managers trust the host's CA bundle (bound read-only, named
 * only in the execs' environment, so the committed image never refers to it):
 * a host whose egress re-signs TLS can install what the host itself can.
 */
import { access } from "node:fs/promises";

import { TailBuffer } from "@openma/driver-kit";
import {
  INSTALL_PROGRAMS,
  type InstallProgress,
  type InstallResult,
  PACKAGE_MANAGERS,
  type PackageSpec,
  packagesHash,
} from "@openma/driver-kit/env-packages";
import type Docker from "dockerode";
import { describeError, statusOf } from "./engine.ts";
import { Demuxer } from "./streams.ts";

export const PACKAGES_REPO = "openma/env-packages";
/** On the build container (sweepable by label) and, through the commit, on the image. */
export const PACKAGES_LABEL = "openma.packages";
export const PACKAGES_ENVIRONMENT_LABEL = "openma.packages.environment";

const DEFAULT_HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt";
const CA_TARGET = "/run/openma-host-ca.crt";
/** Every way the package managers (and what they run) are told about a CA bundle. */
const CA_ENV = [
  "NODE_EXTRA_CA_CERTS",
  "npm_config_cafile",
  "PIP_CERT",
  "SSL_CERT_FILE",
  "CURL_CA_BUNDLE",
  "REQUESTS_CA_BUNDLE",
  "GIT_SSL_CAINFO",
];

/** Enough of a failed install's output to say why (the end of it: the error is last). */
const OUTPUT_TAIL_BYTES = 4 * 1024;

export interface PackageLayerOptions {
  docker: Docker;
  /** The image the packages go on (the sandbox's base). */
  baseImage: string;
  environmentId: string;
  spec: PackageSpec;
  /** Network of the build container (default `bridge`). */
  buildNetworkMode?: string;
  /** Host CA bundle the package managers trust (default the host's system bundle when present; null: none). */
  hostCaBundle?: string | null;
  /** Per package manager (default 15 minutes). */
  timeoutMs?: number;
  onProgress?: (progress: InstallProgress) => void;
  signal?: AbortSignal;
}

/** Tag-safe: docker tags are `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`. */
function tagFor(environmentId: string, hash: string): string {
  return `${environmentId.replace(/[^A-Za-z0-9_.-]/g, "_").slice(0, 100)}-${hash}`;
}

/** Concurrent sessions of one environment share one build. */
const building = new Map<string, Promise<InstallResult>>();

export async function ensurePackageLayer(options: PackageLayerOptions): Promise<InstallResult> {
  const { docker } = options;
  let baseId: string;
  try {
    baseId = (await docker.getImage(options.baseImage).inspect()).Id;
  } catch (err) {
    return { ok: false, manager: null, message: `the base image ${options.baseImage} is not usable: ${describeError(err)}` };
  }
  const image = `${PACKAGES_REPO}:${tagFor(options.environmentId, packagesHash(options.spec, baseId))}`;
  try {
    await docker.getImage(image).inspect();
    options.onProgress?.({ type: "cached", image });
    return { ok: true, image, cached: true };
  } catch (err) {
    if (statusOf(err) !== 404) return { ok: false, manager: null, message: `docker: ${describeError(err)}` };
  }
  let pending = building.get(image);
  if (pending === undefined) {
    pending = build(options, image).finally(() => building.delete(image));
    building.set(image, pending);
  }
  return pending;
}

async function build(options: PackageLayerOptions, image: string): Promise<InstallResult> {
  const { docker } = options;
  const [repo, tag] = image.split(":") as [string, string];
  const caBundle = await hostCa(options.hostCaBundle);
  const env = caBundle === null ? [] : CA_ENV.map((name) => `${name}=${CA_TARGET}`);
  let container: Docker.Container;
  try {
    container = await docker.createContainer({
      Image: options.baseImage,
      Cmd: ["/bin/sh", "-c", "while :; do sleep 86400; done"],
      User: "0:0",
      WorkingDir: "/",
      Labels: { [PACKAGES_LABEL]: tag, [PACKAGES_ENVIRONMENT_LABEL]: options.environmentId },
      HostConfig: {
        NetworkMode: options.buildNetworkMode ?? "bridge",
        Init: true,
        LogConfig: { Type: "none", Config: {} },
        Mounts: caBundle === null ? [] : [{ Type: "bind", Source: caBundle, Target: CA_TARGET, ReadOnly: true }],
      },
    });
    await container.start();
  } catch (err) {
    return { ok: false, manager: null, message: `the build container could not start: ${describeError(err)}` };
  }
  try {
    for (const manager of PACKAGE_MANAGERS) {
      const names = options.spec[manager];
      if (names.length === 0) continue;
      options.onProgress?.({ type: "started", manager, packages: names });
      const run = await runProgram(container, ["/bin/sh", "-c", INSTALL_PROGRAMS[manager], "sh", ...names], env, options);
      if (run.exitCode !== 0) {
        const why = run.output.trim().split("\n").slice(-12).join("\n");
        return { ok: false, manager, message: `${manager} exited with ${run.exitCode}${why ? `:\n${why}` : ""}` };
      }
      options.onProgress?.({ type: "finished", manager });
    }
    // The committed image keeps the base's config; the sandbox sets its own user, command and environment.
    await container.commit({ repo, tag, comment: `packages of ${options.environmentId}`, pause: true });
    options.onProgress?.({ type: "ready", image });
    return { ok: true, image, cached: false };
  } catch (err) {
    return { ok: false, manager: null, message: describeError(err) };
  } finally {
    await container.remove({ force: true, v: true }).catch(() => {});
  }
}

/** Runs one program to its end; on timeout or abort the build container is killed (and the build fails). */
async function runProgram(
  container: Docker.Container,
  cmd: string[],
  env: string[],
  options: PackageLayerOptions,
): Promise<{ exitCode: number; output: string }> {
  const exec = await container.exec({ Cmd: cmd, Env: env, User: "0:0", AttachStdout: true, AttachStderr: true });
  const stream = (await exec.start({ hijack: true, stdin: false })) as NodeJS.ReadWriteStream;
  const tail = new TailBuffer(OUTPUT_TAIL_BYTES);
  const demux = new Demuxer((_stream, chunk) => tail.push(chunk));
  const kill = () => container.kill().catch(() => {});
  const timer = setTimeout(kill, options.timeoutMs ?? 15 * 60_000);
  options.signal?.addEventListener("abort", kill, { once: true });
  try {
    await new Promise<void>((resolve, reject) => {
      stream.on("data", (chunk: Buffer) => demux.push(chunk));
      stream.on("end", resolve);
      stream.on("close", resolve);
      stream.on("error", reject);
    });
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener("abort", kill);
  }
  const info = await exec.inspect();
  return { exitCode: info.ExitCode ?? -1, output: tail.text() };
}

/** The bundle to bind, or null when there is none to trust. */
async function hostCa(configured: string | null | undefined): Promise<string | null> {
  if (configured === null) return null;
  const path = configured ?? DEFAULT_HOST_CA_BUNDLE;
  try {
    await access(path);
    return path;
  } catch {
    return null;
  }
}
