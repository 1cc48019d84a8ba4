/**
 * @openma/driver-cloudflare: OpenMA's own Cloudflare Worker and Durable
 * Object (packages/cloudflare-worker, Cloudflare Containers through
 * `@cloudflare/sandbox`) as a sandbox driver. The Worker serves the official
 * bridge routes, so the cloudflare-bridge provider does the runtime work; on
 * top, every runtime gets its session's credential egress from the Worker's
 * egress route before any command of the session runs, and the Worker is
 * the container's only way out (ADR 0019).
 */
import type { SandboxCapabilities } from "@openma/contract";
import { bridgeConfigFromEnv, CLOUDFLARE_BRIDGE_SANDBOX_CAPABILITIES } from "@openma/driver-cloudflare-bridge";
import { type RemoteDriverOptions, RemoteSandboxDriver } from "@openma/driver-kit/remote";
import { CLOUDFLARE_PROVIDER, type CloudflareConfig, type CloudflareEgressOptions, CloudflareProvider } from "./provider.ts";

export {
  CLOUDFLARE_PROVIDER,
  type CloudflareConfig,
  type CloudflareEgressOptions,
  CloudflareProvider,
  EgressInstallError,
  ENV_FILE,
  egressRequest,
} from "./provider.ts";

/** The bridge's row, plus the Worker's enforced egress (live substitution over HTTP and HTTPS). */
export const CLOUDFLARE_SANDBOX_CAPABILITIES: SandboxCapabilities = {
  ...CLOUDFLARE_BRIDGE_SANDBOX_CAPABILITIES,
  provider: CLOUDFLARE_PROVIDER,
  facts: {
    has: [...CLOUDFLARE_BRIDGE_SANDBOX_CAPABILITIES.facts.has, "egress_gateway", "credential_substitution"],
    lacks: CLOUDFLARE_BRIDGE_SANDBOX_CAPABILITIES.facts.lacks,
  },
  credentialEgress: { enforcement: "enforced", credentialMode: "live", interceptedProtocols: ["http", "https"] },
};

/** The Worker's origin and the `SANDBOX_API_KEY` it was deployed with. */
export const CLOUDFLARE_ENV = { url: "CLOUDFLARE_WORKER_URL", apiKey: "SANDBOX_API_KEY" } as const;

export function cloudflareConfigFromEnv(env: Readonly<Record<string, string | undefined>>): CloudflareConfig | { missing: string[] } {
  return bridgeConfigFromEnv(env, CLOUDFLARE_ENV);
}

export interface CloudflareDriverOptions extends RemoteDriverOptions {
  egress?: CloudflareEgressOptions;
}

export function createCloudflareDriver(config: CloudflareConfig, options: CloudflareDriverOptions = {}): RemoteSandboxDriver {
  const { egress, ...driver } = options;
  return new RemoteSandboxDriver(new CloudflareProvider(config, egress), CLOUDFLARE_SANDBOX_CAPABILITIES, driver);
}
