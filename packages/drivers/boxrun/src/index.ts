/**
 * @openma/driver-boxrun: BoxLite's REST API (BoxRun) as an OpenMA sandbox
 * driver (ManagedSandboxPort, SandboxInventoryPort, ToolSandboxPort and
 * SandboxProcessPort) through the official REST client of
 * `@boxlite-ai/boxlite`.
 */
import type { SandboxCapabilities } from "@openma/contract";
import { type RemoteDriverOptions, RemoteSandboxDriver } from "@openma/driver-kit/remote";
import { type BoxRunConfig, boxRunProvider } from "./provider.ts";

export { BoxliteProvider, type BoxliteProviderOptions, type BoxRunConfig, type BoxSource, boxRunProvider } from "./provider.ts";

export const BOXRUN_PROVIDER = "boxrun";

export const BOXRUN_SANDBOX_CAPABILITIES: SandboxCapabilities = {
  provider: BOXRUN_PROVIDER,
  // Suspend is the API's stop: the box and its disk are retained by the server (best effort); memory and processes end.
  lifecycle: { suspendResume: "supported", hardTerminate: "supported", orphanReap: "host_managed" },
  facts: {
    has: ["official_boxlite_rest_client", "stable_get_or_create", "detached_retained_filesystem", "duplex_process", "workspace_file_io"],
    // No labels in the REST create: ownership travels in the box name, the scope only as a digest.
    lacks: ["ownership_labels", "portable_workspace_checkpoint", "process_memory_checkpoint"],
  },
  credentialEgress: { enforcement: "unsupported" },
};

/** The variables the driver reads: BoxLite's own key, the server's URL and routing slot, OpenMA's image. */
export const BOXRUN_ENV = {
  url: "BOXLITE_REST_URL",
  urlAlias: "BOXLITE_API_URL",
  apiKey: "BOXLITE_API_KEY",
  pathPrefix: "BOXLITE_PATH_PREFIX",
  image: "OPENMA_BOXRUN_IMAGE",
} as const;

export function boxRunConfigFromEnv(env: Readonly<Record<string, string | undefined>>): BoxRunConfig | { missing: string[] } {
  const url = env.BOXLITE_REST_URL || env.BOXLITE_API_URL;
  const missing = [...(url ? [] : [`${BOXRUN_ENV.url} or ${BOXRUN_ENV.urlAlias}`]), ...(env.BOXLITE_API_KEY ? [] : [BOXRUN_ENV.apiKey])];
  if (missing.length > 0 || !url || !env.BOXLITE_API_KEY) return { missing };
  return {
    url,
    apiKey: env.BOXLITE_API_KEY,
    pathPrefix: env.BOXLITE_PATH_PREFIX || undefined,
    image: env.OPENMA_BOXRUN_IMAGE || undefined,
  };
}

export type BoxRunDriver = RemoteSandboxDriver;

export function createBoxRunDriver(config: BoxRunConfig, options: RemoteDriverOptions = {}): BoxRunDriver {
  const provider = boxRunProvider({ ...config, namePrefix: options.namePrefix ?? "openma" });
  return new RemoteSandboxDriver(provider, BOXRUN_SANDBOX_CAPABILITIES, options);
}
