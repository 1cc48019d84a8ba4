/**
 * @openma/driver-modal: Modal sandboxes as an OpenMA sandbox driver
 * (ManagedSandboxPort, SandboxInventoryPort, ToolSandboxPort and
 * SandboxProcessPort) through the official `modal` SDK.
 */
import type { SandboxCapabilities } from "@openma/contract";
import { type RemoteDriverOptions, RemoteSandboxDriver } from "@openma/driver-kit/remote";
import { type ModalConfig, ModalProvider } from "./provider.ts";

export { type ModalConfig, ModalProvider, workspaceSubPath } from "./provider.ts";

export const MODAL_PROVIDER = "modal";

export const MODAL_SANDBOX_CAPABILITIES: SandboxCapabilities = {
  provider: MODAL_PROVIDER,
  lifecycle: { suspendResume: "supported", hardTerminate: "supported", orphanReap: "host_managed" },
  facts: {
    has: [
      "stable_name_and_ownership_tags",
      "session_scoped_volume_v2_subpath",
      "volume_sync_before_detach",
      "compute_recreate_over_durable_volume",
      "duplex_process",
      "workspace_file_io",
    ],
    // Modal's own domain and CIDR allowlists are not configured by this driver.
    lacks: ["portable_workspace_checkpoint", "stable_process_memory_checkpoint", "native_domain_and_cidr_allowlist", "provider_lease"],
  },
  credentialEgress: { enforcement: "unsupported" },
};

/** The variables the driver reads: Modal's own, plus OpenMA's app, image, volume and lifetime knobs. */
export const MODAL_ENV = {
  tokenId: "MODAL_TOKEN_ID",
  tokenSecret: "MODAL_TOKEN_SECRET",
  serverUrl: "MODAL_SERVER_URL",
  environment: "MODAL_ENVIRONMENT",
  app: "OPENMA_MODAL_APP",
  image: "OPENMA_MODAL_IMAGE",
  volume: "OPENMA_MODAL_VOLUME",
  timeout: "OPENMA_MODAL_SANDBOX_TIMEOUT_MS",
} as const;

export function modalConfigFromEnv(env: Readonly<Record<string, string | undefined>>): ModalConfig | { missing: string[] } {
  const missing = [MODAL_ENV.tokenId, MODAL_ENV.tokenSecret].filter((name) => !env[name]);
  if (missing.length > 0) return { missing };
  const timeout = env.OPENMA_MODAL_SANDBOX_TIMEOUT_MS ? Number(env.OPENMA_MODAL_SANDBOX_TIMEOUT_MS) : undefined;
  if (timeout !== undefined && !(Number.isInteger(timeout) && timeout % 1000 === 0 && timeout >= 60_000 && timeout <= 86_400_000))
    throw new Error("OPENMA_MODAL_SANDBOX_TIMEOUT_MS must be whole seconds between 60000 and 86400000");
  const volume = env.OPENMA_MODAL_VOLUME || undefined;
  if (volume !== undefined && !/^[A-Za-z0-9._-]{1,64}$/.test(volume))
    throw new Error("OPENMA_MODAL_VOLUME must be 1-64 characters of letters, digits, '.', '_' and '-'");
  return {
    tokenId: env.MODAL_TOKEN_ID as string,
    tokenSecret: env.MODAL_TOKEN_SECRET as string,
    serverUrl: env.MODAL_SERVER_URL || undefined,
    environment: env.MODAL_ENVIRONMENT || undefined,
    app: env.OPENMA_MODAL_APP || undefined,
    image: env.OPENMA_MODAL_IMAGE || undefined,
    volume,
    sandboxTimeoutMs: timeout,
  };
}

export type ModalDriver = RemoteSandboxDriver;

export function createModalDriver(config: ModalConfig, options: RemoteDriverOptions = {}): ModalDriver {
  return new RemoteSandboxDriver(new ModalProvider(config), MODAL_SANDBOX_CAPABILITIES, options);
}
