/**
 * @openma/driver-blaxel: Blaxel sandboxes as an OpenMA sandbox driver
 * (ManagedSandboxPort, SandboxInventoryPort, ToolSandboxPort and
 * SandboxProcessPort) through the official `@blaxel/core` SDK.
 */
import type { SandboxCapabilities } from "@openma/contract";
import { type RemoteDriverOptions, RemoteSandboxDriver } from "@openma/driver-kit/remote";
import { type BlaxelConfig, BlaxelProvider } from "./provider.ts";

export { type BlaxelConfig, BlaxelProvider } from "./provider.ts";

export const BLAXEL_PROVIDER = "blaxel";

export const BLAXEL_SANDBOX_CAPABILITIES: SandboxCapabilities = {
  provider: BLAXEL_PROVIDER,
  // Suspend is archive (filesystem kept, memory and processes lost); resume is unarchive.
  lifecycle: { suspendResume: "supported", hardTerminate: "supported", orphanReap: "host_managed" },
  facts: {
    has: ["stable_name_and_ownership_labels", "archive_unarchive_retained_filesystem", "duplex_named_process", "workspace_file_io"],
    // The platform's proxy firewall, secret injection and volumes exist but this adapter does not configure them.
    lacks: ["process_memory_checkpoint", "portable_workspace_checkpoint", "native_network_policy"],
  },
  credentialEgress: { enforcement: "unsupported" },
};

/** The variables the driver reads, named as Blaxel's SDK and CLI name them, plus OpenMA's image knob. */
export const BLAXEL_ENV = {
  apiKey: "BL_API_KEY",
  workspace: "BL_WORKSPACE",
  apiUrl: "BL_API_URL",
  runUrl: "BL_RUN_URL",
  region: "BL_REGION",
  disableH2: "BL_DISABLE_H2",
  image: "OPENMA_BLAXEL_IMAGE",
} as const;

export function blaxelConfigFromEnv(env: Readonly<Record<string, string | undefined>>): BlaxelConfig | { missing: string[] } {
  const missing = [BLAXEL_ENV.apiKey, BLAXEL_ENV.workspace].filter((name) => !env[name]);
  if (missing.length > 0) return { missing };
  return {
    apiKey: env.BL_API_KEY as string,
    workspace: env.BL_WORKSPACE as string,
    apiUrl: env.BL_API_URL || undefined,
    runUrl: env.BL_RUN_URL || undefined,
    region: env.BL_REGION || undefined,
    disableH2: ["1", "true", "yes", "on"].includes((env.BL_DISABLE_H2 ?? "").toLowerCase()) || undefined,
    image: env.OPENMA_BLAXEL_IMAGE || undefined,
  };
}

export type BlaxelDriver = RemoteSandboxDriver;

export function createBlaxelDriver(config: BlaxelConfig, options: RemoteDriverOptions = {}): BlaxelDriver {
  const prefix = options.namePrefix ?? "openma";
  return new RemoteSandboxDriver(new BlaxelProvider({ ...config, listPrefix: `${prefix}-` }), BLAXEL_SANDBOX_CAPABILITIES, options);
}
