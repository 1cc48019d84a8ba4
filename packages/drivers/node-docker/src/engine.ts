/**
 * Connection to the Docker Engine API and the locally built sandbox images.
 * Images come from `scripts/build-images.sh` (no registry is involved), which
 * records what it built in `/var/lib/openma/images.json`.
 */
import { readFile } from "node:fs/promises";
import Docker from "dockerode";

export const DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock";
export const DEFAULT_IMAGE_MANIFEST = "/var/lib/openma/images.json";
export const PROVISION_HINT = "run `npm run provision` (installs and starts dockerd, then builds the sandbox images)";

export function connectDocker(socketPath: string = process.env.OPENMA_DOCKER_SOCKET ?? DEFAULT_DOCKER_SOCKET): Docker {
  return new Docker({ socketPath });
}

export interface EngineInfo {
  serverVersion: string;
  apiVersion: string;
  storageDriver: string;
  cgroupVersion: string;
}

/** What the engine says about itself, or a message saying why it cannot be used (and how to fix it). */
export async function probeEngine(docker: Docker): Promise<{ ok: true; info: EngineInfo } | { ok: false; message: string }> {
  try {
    const [info, version] = await Promise.all([docker.info(), docker.version()]);
    return {
      ok: true,
      info: {
        serverVersion: String(version.Version ?? info.ServerVersion ?? "unknown"),
        apiVersion: String(version.ApiVersion ?? "unknown"),
        storageDriver: String(info.Driver ?? "unknown"),
        cgroupVersion: String(info.CgroupVersion ?? "unknown"),
      },
    };
  } catch (err) {
    return { ok: false, message: `the Docker Engine does not answer (${describeError(err)}): ${PROVISION_HINT}` };
  }
}

export interface ImageManifest {
  tag: string;
  base: { image: string; rootfs: string };
  busybox: { image: string; rootfs: string };
  /** The dev toolchain image (docs/images.md), when the build made one. */
  dev?: { image: string; rootfs: string; node?: string; npm?: string };
}

function isImageEntry(value: unknown): value is { image: string; rootfs: string } {
  const entry = value as { image?: unknown; rootfs?: unknown } | null;
  return typeof entry === "object" && entry !== null && typeof entry.image === "string" && typeof entry.rootfs === "string";
}

/** The manifest `scripts/build-images.sh` writes, or a message naming what is missing. */
export async function readImageManifest(
  path: string = process.env.OPENMA_IMAGE_MANIFEST ?? DEFAULT_IMAGE_MANIFEST,
): Promise<{ ok: true; manifest: ImageManifest } | { ok: false; message: string }> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(await readFile(path, "utf8"));
  } catch (err) {
    return { ok: false, message: `no sandbox image manifest at ${path} (${describeError(err)}): ${PROVISION_HINT}` };
  }
  const value = parsed as Partial<ImageManifest> | null;
  if (
    typeof value !== "object" ||
    value === null ||
    typeof value.tag !== "string" ||
    !isImageEntry(value.base) ||
    !isImageEntry(value.busybox) ||
    (value.dev !== undefined && !isImageEntry(value.dev))
  ) {
    return { ok: false, message: `the sandbox image manifest at ${path} is malformed: ${PROVISION_HINT}` };
  }
  return { ok: true, manifest: value as ImageManifest };
}

export async function imagePresent(docker: Docker, image: string): Promise<boolean> {
  try {
    await docker.getImage(image).inspect();
    return true;
  } catch (err) {
    if (statusOf(err) === 404) return false;
    throw err;
  }
}

/** HTTP status of an Engine API error, when it has one. */
export function statusOf(err: unknown): number | undefined {
  const status = (err as { statusCode?: unknown } | null)?.statusCode;
  return typeof status === "number" ? status : undefined;
}

/** One line, without the Engine's trailing whitespace. */
export function describeError(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text.replace(/\s+/g, " ").trim();
}
