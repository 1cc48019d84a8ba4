/**
 * @openma/driver-cloudflare-bridge: an operator-deployed official
 * Cloudflare Sandbox Bridge (`@cloudflare/sandbox/bridge`) as an OpenMA
 * sandbox driver (ManagedSandboxPort, SandboxInventoryPort, ToolSandboxPort
 * and the SandboxProcessPort of the `ama_worker` lane), through a client
 * typed from the bridge's shipped OpenAPI document. Our own Worker that
 * serves the same API (the `cloudflare` driver) reuses this driver.
 */
import type { ManagedSandboxLease, SandboxCapabilities } from "@openma/contract";
import { type RemoteDriverOptions, RemoteSandboxDriver } from "@openma/driver-kit/remote";
import { type CloudflareBridgeConfig, CloudflareBridgeProvider } from "./provider.ts";

export { type CloudflareBridgeConfig, CloudflareBridgeProvider, OWNER_FILE, WORKSPACE, workspacePath } from "./provider.ts";

export const CLOUDFLARE_BRIDGE_PROVIDER = "cloudflare-bridge";

export const CLOUDFLARE_BRIDGE_SANDBOX_CAPABILITIES: SandboxCapabilities = {
  provider: CLOUDFLARE_BRIDGE_PROVIDER,
  // No listing at the bridge: the host's records (with their leases) find orphans, the driver reaps them by lease.
  lifecycle: { suspendResume: "unsupported", hardTerminate: "supported", orphanReap: "host_managed" },
  facts: {
    has: ["http_bridge", "argv_sse_process", "workspace_file_io", "workspace_tar_checkpoint", "spooled_process_stdin"],
    lacks: ["interactive_stdin_without_pty", "provider_lease", "process_memory_checkpoint", "provider_listing", "lookup_by_name"],
  },
  credentialEgress: { enforcement: "unsupported" },
};

/** The variables the driver reads: the bridge Worker's origin and its `SANDBOX_API_KEY` (the name the bridge itself uses). */
export const CLOUDFLARE_BRIDGE_ENV = { url: "CLOUDFLARE_BRIDGE_URL", apiKey: "SANDBOX_API_KEY" } as const;

export function cloudflareBridgeConfigFromEnv(
  env: Readonly<Record<string, string | undefined>>,
): CloudflareBridgeConfig | { missing: string[] } {
  return bridgeConfigFromEnv(env, CLOUDFLARE_BRIDGE_ENV);
}

/** A bridge API's origin and key from the variables `names` says (our Worker serves the same API under its own URL variable). */
export function bridgeConfigFromEnv(
  env: Readonly<Record<string, string | undefined>>,
  names: { url: string; apiKey: string },
): CloudflareBridgeConfig | { missing: string[] } {
  const missing = [names.url, names.apiKey].filter((name) => !env[name]);
  if (missing.length > 0) return { missing };
  const url = env[names.url] as string;
  if (!/^https?:\/\//.test(url)) throw new Error(`${names.url} must be an http(s) URL`);
  return { url, apiKey: env[names.apiKey] as string };
}

/** The kit's driver, plus the bridge's own tar checkpoints of /workspace. */
export class CloudflareBridgeDriver extends RemoteSandboxDriver {
  readonly bridge: CloudflareBridgeProvider;

  constructor(provider: CloudflareBridgeProvider, options: RemoteDriverOptions) {
    super(provider, CLOUDFLARE_BRIDGE_SANDBOX_CAPABILITIES, options);
    this.bridge = provider;
  }

  #runtimeOf(lease: ManagedSandboxLease): string {
    if (lease.provider !== CLOUDFLARE_BRIDGE_PROVIDER)
      throw new Error(`lease belongs to provider ${lease.provider}, not ${CLOUDFLARE_BRIDGE_PROVIDER}`);
    return lease.runtimeId;
  }

  /** `POST .../persist`: /workspace of the leased runtime as a tar (minus `excludes`, relative paths). */
  persistWorkspace(lease: ManagedSandboxLease, signal: AbortSignal, excludes: readonly string[] = []): Promise<Uint8Array> {
    return this.bridge.client.persist(this.#runtimeOf(lease), signal, excludes);
  }

  /** `POST .../hydrate`: extracts a tar (from `persistWorkspace`, possibly of another runtime) into /workspace. */
  hydrateWorkspace(lease: ManagedSandboxLease, tar: Uint8Array, signal: AbortSignal): Promise<void> {
    return this.bridge.client.hydrate(this.#runtimeOf(lease), tar, signal);
  }
}

export function createCloudflareBridgeDriver(config: CloudflareBridgeConfig, options: RemoteDriverOptions = {}): CloudflareBridgeDriver {
  return new CloudflareBridgeDriver(new CloudflareBridgeProvider(config), options);
}
