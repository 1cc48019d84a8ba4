/**
 * @openma/driver-daytona: Daytona sandboxes as an OpenMA sandbox driver
 * (ManagedSandboxPort, SandboxInventoryPort, ToolSandboxPort and
 * SandboxProcessPort) through the official `@daytonaio/sdk`.
 */
import type { SandboxCapabilities } from "@openma/contract";
import { type RemoteDriverOptions, RemoteSandboxDriver } from "@openma/driver-kit/remote";
import { type DaytonaConfig, DaytonaProvider } from "./provider.ts";

export { type DaytonaConfig, DaytonaProvider } from "./provider.ts";

export const DAYTONA_PROVIDER = "daytona";

export const DAYTONA_SANDBOX_CAPABILITIES: SandboxCapabilities = {
  provider: DAYTONA_PROVIDER,
  lifecycle: { suspendResume: "supported", hardTerminate: "supported", orphanReap: "host_managed" },
  facts: {
    has: [
      "provider_activity_lease",
      "stable_name_with_ownership_labels",
      "retained_filesystem_stop_start",
      "duplex_session_process",
      "workspace_file_io",
    ],
    // Session commands cannot close stdin (the driver frames stdin in-band instead); Daytona's snapshots are not used.
    lacks: ["process_memory_checkpoint", "durable_output_mount", "streaming_process_stdin_eof", "portable_filesystem_snapshot"],
  },
  credentialEgress: { enforcement: "unsupported" },
};

/** The variables the driver reads: Daytona's own, plus OpenMA's snapshot and auto-stop knobs. */
export const DAYTONA_ENV = {
  apiKey: "DAYTONA_API_KEY",
  apiUrl: "DAYTONA_API_URL",
  target: "DAYTONA_TARGET",
  snapshot: "OPENMA_DAYTONA_SNAPSHOT",
  autoStop: "OPENMA_DAYTONA_AUTO_STOP_MINUTES",
} as const;

export function daytonaConfigFromEnv(env: Readonly<Record<string, string | undefined>>): DaytonaConfig | { missing: string[] } {
  const apiKey = env.DAYTONA_API_KEY;
  if (!apiKey) return { missing: ["DAYTONA_API_KEY"] };
  const autoStop = env.OPENMA_DAYTONA_AUTO_STOP_MINUTES ? Number(env.OPENMA_DAYTONA_AUTO_STOP_MINUTES) : undefined;
  if (autoStop !== undefined && !(Number.isInteger(autoStop) && autoStop >= 1))
    throw new Error("OPENMA_DAYTONA_AUTO_STOP_MINUTES must be a positive integer");
  return {
    apiKey,
    apiUrl: env.DAYTONA_API_URL || env.DAYTONA_SERVER_URL || undefined,
    target: env.DAYTONA_TARGET || undefined,
    snapshot: env.OPENMA_DAYTONA_SNAPSHOT || undefined,
    autoStopMinutes: autoStop,
  };
}

export type DaytonaDriver = RemoteSandboxDriver;

export function createDaytonaDriver(config: DaytonaConfig, options: RemoteDriverOptions = {}): DaytonaDriver {
  return new RemoteSandboxDriver(new DaytonaProvider(config), DAYTONA_SANDBOX_CAPABILITIES, options);
}
