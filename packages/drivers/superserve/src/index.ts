/**
 * @openma/driver-superserve: Superserve sandboxes as an OpenMA sandbox
 * driver (ManagedSandboxPort, SandboxInventoryPort, ToolSandboxPort and the
 * SandboxProcessPort of both harness lanes) through the official
 * `@superserve/sdk`.
 */
import { readFileSync } from "node:fs";
import type { SandboxCapabilities } from "@openma/contract";
import { type RemoteDriverOptions, RemoteSandboxDriver } from "@openma/driver-kit/remote";
import { type SuperserveConfig, SuperserveProvider } from "./provider.ts";

export { type DataPlaneRedirect, isDataPlaneName, routeDataPlane } from "./data-plane.ts";
export { type SuperserveConfig, SuperserveProvider } from "./provider.ts";

export const SUPERSERVE_PROVIDER = "superserve";

export const SUPERSERVE_SANDBOX_CAPABILITIES: SandboxCapabilities = {
  provider: SUPERSERVE_PROVIDER,
  // Pause keeps memory: files and running processes are there after a resume.
  lifecycle: { suspendResume: "supported", hardTerminate: "supported", orphanReap: "host_managed" },
  facts: {
    has: [
      "stable_name_and_ownership_metadata",
      "pause_resume_preserves_processes_and_files",
      "transparent_token_rotation_and_auto_resume",
      "duplex_process",
      "workspace_file_io",
    ],
    // The platform's network rules and secret proxy exist; this adapter does not configure them.
    lacks: ["portable_workspace_checkpoint", "stable_process_memory_checkpoint", "native_network_policy"],
  },
  credentialEgress: { enforcement: "unsupported" },
};

/** The variables the driver reads: Superserve's own, plus OpenMA's data-plane redirect and template. */
export const SUPERSERVE_ENV = {
  apiKey: "SUPERSERVE_API_KEY",
  baseUrl: "SUPERSERVE_BASE_URL",
  dataPlaneUrl: "OPENMA_SUPERSERVE_DATA_PLANE_URL",
  dataPlaneCa: "OPENMA_SUPERSERVE_DATA_PLANE_CA",
  template: "OPENMA_SUPERSERVE_TEMPLATE",
} as const;

export function superserveConfigFromEnv(env: Readonly<Record<string, string | undefined>>): SuperserveConfig | { missing: string[] } {
  if (!env.SUPERSERVE_API_KEY) return { missing: [SUPERSERVE_ENV.apiKey] };
  const caPath = env.OPENMA_SUPERSERVE_DATA_PLANE_CA;
  if (caPath && !env.OPENMA_SUPERSERVE_DATA_PLANE_URL)
    throw new Error("OPENMA_SUPERSERVE_DATA_PLANE_CA is only used with OPENMA_SUPERSERVE_DATA_PLANE_URL");
  return {
    apiKey: env.SUPERSERVE_API_KEY,
    baseUrl: env.SUPERSERVE_BASE_URL || undefined,
    template: env.OPENMA_SUPERSERVE_TEMPLATE || undefined,
    ...(env.OPENMA_SUPERSERVE_DATA_PLANE_URL
      ? { dataPlane: { url: env.OPENMA_SUPERSERVE_DATA_PLANE_URL, ...(caPath ? { caPem: readFileSync(caPath, "utf8") } : {}) } }
      : {}),
  };
}

export type SuperserveDriver = RemoteSandboxDriver;

export function createSuperserveDriver(config: SuperserveConfig, options: RemoteDriverOptions = {}): SuperserveDriver {
  return new RemoteSandboxDriver(new SuperserveProvider(config), SUPERSERVE_SANDBOX_CAPABILITIES, options);
}
