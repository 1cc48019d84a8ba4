/**
 * @openma/driver-e2b: E2B sandboxes as an OpenMA sandbox driver
 * (ManagedSandboxPort, SandboxInventoryPort, ToolSandboxPort and
 * SandboxProcessPort) through the official `e2b` SDK.
 */
import type { SandboxCapabilities } from "@openma/contract";
import { type RemoteDriverOptions, RemoteSandboxDriver } from "@openma/driver-kit/remote";
import { type E2BConfig, E2BProvider } from "./provider.ts";

export { type E2BConfig, E2BProvider } from "./provider.ts";

export const E2B_PROVIDER = "e2b";

export const E2B_SANDBOX_CAPABILITIES: SandboxCapabilities = {
  provider: E2B_PROVIDER,
  lifecycle: { suspendResume: "supported", hardTerminate: "supported", orphanReap: "host_managed" },
  facts: {
    // The pause keeps memory (a provider snapshot): never advertised as an OpenMA process checkpoint.
    has: ["duplex_process", "workspace_file_io", "provider_suspend_resume", "provider_memory_snapshot", "provider_lease_timeout"],
    lacks: ["process_memory_checkpoint", "stable_name"],
  },
  credentialEgress: { enforcement: "unsupported" },
};

/** The variables the driver reads: E2B's own, plus OpenMA's template and lifetime knobs. */
export const E2B_ENV = {
  apiKey: "E2B_API_KEY",
  apiUrl: "E2B_API_URL",
  sandboxUrl: "E2B_SANDBOX_URL",
  domain: "E2B_DOMAIN",
  template: "OPENMA_E2B_TEMPLATE",
  timeout: "OPENMA_E2B_SANDBOX_TIMEOUT_MS",
} as const;

export function e2bConfigFromEnv(env: Readonly<Record<string, string | undefined>>): E2BConfig | { missing: string[] } {
  const apiKey = env.E2B_API_KEY;
  if (!apiKey) return { missing: ["E2B_API_KEY"] };
  const timeout = env.OPENMA_E2B_SANDBOX_TIMEOUT_MS ? Number(env.OPENMA_E2B_SANDBOX_TIMEOUT_MS) : undefined;
  if (timeout !== undefined && !(Number.isInteger(timeout) && timeout >= 60_000))
    throw new Error("OPENMA_E2B_SANDBOX_TIMEOUT_MS must be an integer of at least 60000");
  return {
    apiKey,
    apiUrl: env.E2B_API_URL || undefined,
    sandboxUrl: env.E2B_SANDBOX_URL || undefined,
    domain: env.E2B_DOMAIN || undefined,
    template: env.OPENMA_E2B_TEMPLATE || undefined,
    sandboxTimeoutMs: timeout,
  };
}

export type E2BDriver = RemoteSandboxDriver;

export function createE2BDriver(config: E2BConfig, options: RemoteDriverOptions = {}): E2BDriver {
  return new RemoteSandboxDriver(new E2BProvider(config), E2B_SANDBOX_CAPABILITIES, options);
}
