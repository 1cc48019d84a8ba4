/**
 * @openma/driver-litebox: BoxLite's embedded micro-VM runtime
 * (`@boxlite-ai/boxlite` local mode) as an OpenMA sandbox driver: the same
 * provider as BoxRun over the runtime in this process instead of its REST
 * client, with boxes booted from a local OCI layout built from our sandbox
 * image (no registry needed). Boxes are host-local and retained: a stop
 * keeps the box's disk on this host (best effort), a start boots it again.
 *
 * Where no VM boots (a nested guest without a PVM-aware kernel), admission
 * fails closed: the acquire's create and first command fail with the
 * runtime's own boot error, the acquire answers `unavailable` and not
 * retryable with it, and the box is removed.
 */
import { homedir } from "node:os";
import { join } from "node:path";
import { type Boxlite, JsBoxlite } from "@boxlite-ai/boxlite";
import type { SandboxCapabilities } from "@openma/contract";
import { BoxliteProvider, type BoxSource } from "@openma/driver-boxrun";
import { type RemoteDriverOptions, RemoteSandboxDriver } from "@openma/driver-kit/remote";
import { readImageManifest } from "@openma/driver-node-docker/engine";
import { type BootProbe, probeBoot } from "./boot.ts";
import { ociLayoutFor } from "./oci-layout.ts";

export { BOOT_PROBE_TIMEOUT_MS, type BootProbe } from "./boot.ts";

export const LITEBOX_PROVIDER = "litebox";

export const LITEBOX_SANDBOX_CAPABILITIES: SandboxCapabilities = {
  provider: LITEBOX_PROVIDER,
  lifecycle: { suspendResume: "supported", hardTerminate: "supported", orphanReap: "host_managed" },
  facts: {
    has: ["embedded_microvm_runtime", "stable_get_or_create", "detached_retained_filesystem", "duplex_process", "workspace_file_io"],
    lacks: ["ownership_labels", "portable_workspace_checkpoint", "process_memory_checkpoint"],
  },
  credentialEgress: { enforcement: "unsupported" },
};

export const LITEBOX_ENV = {
  home: "BOXLITE_HOME",
  rootfs: "OPENMA_LITEBOX_ROOTFS",
  image: "OPENMA_LITEBOX_IMAGE",
} as const;

export interface LiteboxConfig {
  /** `BOXLITE_HOME`: the runtime's state directory (default `~/.boxlite`). */
  homeDir: string;
  /** `OPENMA_LITEBOX_ROOTFS`: an OCI image layout to boot boxes from; built from `image` when absent. */
  rootfsPath?: string;
  /** `OPENMA_LITEBOX_IMAGE`: the Docker image the layout is built from (default the sandbox base image of `npm run provision`). */
  image?: string;
  cpus?: number;
  memoryMib?: number;
}

/** No variable is required: every one has a default. */
export function liteboxConfigFromEnv(env: Readonly<Record<string, string | undefined>>): LiteboxConfig {
  return {
    homeDir: env.BOXLITE_HOME || join(homedir(), ".boxlite"),
    rootfsPath: env.OPENMA_LITEBOX_ROOTFS || undefined,
    image: env.OPENMA_LITEBOX_IMAGE || undefined,
  };
}

/** One runtime per state directory in a process: the runtime locks its directory. */
const runtimes = new Map<string, Boxlite>();
export function liteboxRuntime(homeDir: string): Boxlite {
  let runtime = runtimes.get(homeDir);
  if (runtime === undefined) {
    runtime = new JsBoxlite({ homeDir });
    runtimes.set(homeDir, runtime);
  }
  return runtime;
}

const layouts = new Map<string, Promise<string>>();
/** The layout boxes boot from: the configured one, or one built (once) from the image. */
function rootfsFor(config: LiteboxConfig): () => Promise<string> {
  return () => {
    if (config.rootfsPath) return Promise.resolve(config.rootfsPath);
    const key = `${config.homeDir}\0${config.image ?? ""}`;
    let layout = layouts.get(key);
    if (layout === undefined) {
      layout = (async () => {
        let image = config.image;
        if (image === undefined) {
          const manifest = await readImageManifest();
          if (!manifest.ok) throw new Error(manifest.message);
          image = manifest.manifest.base.image;
        }
        return ociLayoutFor(image, join(config.homeDir, "openma-oci"));
      })();
      layout.catch(() => layouts.delete(key));
      layouts.set(key, layout);
    }
    return layout;
  };
}

/** The runtime's boot failures: no retry makes a VM boot on a machine that cannot. */
const BOOT_FAILURE = /engine reported an error|VM failed to start|\/dev\/kvm|KVM/i;

/** Whether a micro-VM boots here: one real boot per process and configuration (see boot.ts). */
export function probeLiteboxBoot(config: LiteboxConfig): Promise<BootProbe> {
  return probeBoot(
    `${config.homeDir}\0${config.rootfsPath ?? config.image ?? ""}`,
    () => liteboxRuntime(config.homeDir),
    rootfsFor(config),
  );
}

/**
 * Admission first asks the boot probe (one real boot per process): where no
 * VM boots, every acquire answers `unavailable`, not retryable, with the
 * runtime's own error, and no box is made.
 */
export class LiteboxDriver extends RemoteSandboxDriver {
  readonly #config: LiteboxConfig;

  constructor(provider: BoxliteProvider, config: LiteboxConfig, options: RemoteDriverOptions) {
    super(provider, LITEBOX_SANDBOX_CAPABILITIES, options);
    this.#config = config;
  }

  override async acquire(input: Parameters<RemoteSandboxDriver["acquire"]>[0]): ReturnType<RemoteSandboxDriver["acquire"]> {
    const probe = await probeLiteboxBoot(this.#config);
    if (!probe.booted) return { type: "unavailable", reason: `litebox: no micro-VM boots on this host: ${probe.error}`, retryable: false };
    return super.acquire(input);
  }

  override async listOwned(input: Parameters<RemoteSandboxDriver["listOwned"]>[0]): ReturnType<RemoteSandboxDriver["listOwned"]> {
    if (!liteboxRuntimeOpens(this.#config.homeDir)) return { type: "listed", runtimes: [] };
    return super.listOwned(input);
  }
}

/** Whether the embedded runtime opens here at all: where it cannot (no KVM), no box of it can exist on this host. */
export function liteboxRuntimeOpens(homeDir: string): boolean {
  try {
    liteboxRuntime(homeDir);
    return true;
  } catch (err) {
    if (BOOT_FAILURE.test(err instanceof Error ? err.message : String(err))) return false;
    throw err;
  }
}

export function createLiteboxDriver(config: LiteboxConfig, options: RemoteDriverOptions = {}): LiteboxDriver {
  const rootfs = rootfsFor(config);
  const source = async (): Promise<BoxSource> => ({
    rootfsPath: await rootfs(),
    cpus: config.cpus ?? 1,
    memoryMib: config.memoryMib ?? 1024,
  });
  const provider = new BoxliteProvider({
    name: LITEBOX_PROVIDER,
    runtime: () => liteboxRuntime(config.homeDir),
    source,
    namePrefix: options.namePrefix ?? "openma",
    permanent: (message) => BOOT_FAILURE.test(message),
  });
  return new LiteboxDriver(provider, config, options);
}
