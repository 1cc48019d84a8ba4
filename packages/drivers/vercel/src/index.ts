/**
 * @openma/driver-vercel: Vercel Sandbox as an OpenMA sandbox driver
 * (ManagedSandboxPort, SandboxInventoryPort, ToolSandboxPort and the
 * SandboxProcessPort of the `ama_worker` lane) through the official
 * `@vercel/sandbox` SDK.
 */
import type { SandboxCapabilities } from "@openma/contract";
import { type RemoteDriverOptions, RemoteSandboxDriver } from "@openma/driver-kit/remote";
import { type VercelConfig, VercelProvider } from "./provider.ts";

export { routedFetch, VERCEL_API_BASE, type VercelConfig, VercelProvider } from "./provider.ts";

export const VERCEL_PROVIDER = "vercel";

export const VERCEL_SANDBOX_CAPABILITIES: SandboxCapabilities = {
  provider: VERCEL_PROVIDER,
  // Suspend is a stop of a persistent sandbox: its filesystem is snapshotted and restored by the next session; memory is not kept.
  lifecycle: { suspendResume: "supported", hardTerminate: "supported", orphanReap: "host_managed" },
  facts: {
    has: [
      "stable_name_and_ownership_tags",
      "persistent_filesystem_with_automatic_snapshot_restore",
      "detached_process_logs",
      "spooled_process_stdin",
      "workspace_file_io",
    ],
    // The platform's network policy and header transforms exist but this adapter does not configure them.
    lacks: ["streaming_process_stdin", "portable_workspace_checkpoint", "process_memory_checkpoint", "native_network_policy"],
  },
  credentialEgress: { enforcement: "unsupported" },
};

/** The variables the driver reads: Vercel's own, plus OpenMA's endpoint, image and lifetime knobs. */
export const VERCEL_ENV = {
  token: "VERCEL_TOKEN",
  teamId: "VERCEL_TEAM_ID",
  projectId: "VERCEL_PROJECT_ID",
  oidcToken: "VERCEL_OIDC_TOKEN",
  apiUrl: "OPENMA_VERCEL_API_URL",
  image: "OPENMA_VERCEL_IMAGE",
  timeout: "OPENMA_VERCEL_SESSION_TIMEOUT_MS",
} as const;

/** The team and project an OIDC token names (its `owner_id` and `project_id` claims), or null. */
export function oidcClaims(token: string): { teamId: string; projectId: string } | null {
  const payload = token.split(".")[1];
  if (token.split(".").length !== 3 || !payload) return null;
  try {
    const claims = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as { owner_id?: unknown; project_id?: unknown };
    if (typeof claims.owner_id !== "string" || typeof claims.project_id !== "string") return null;
    return { teamId: claims.owner_id, projectId: claims.project_id };
  } catch {
    return null;
  }
}

/**
 * An access token with its team and project (`VERCEL_TOKEN`, `VERCEL_TEAM_ID`,
 * `VERCEL_PROJECT_ID`), or else an OIDC token (`VERCEL_OIDC_TOKEN`), whose
 * claims name the team and project.
 */
export function vercelConfigFromEnv(env: Readonly<Record<string, string | undefined>>): VercelConfig | { missing: string[] } {
  const timeout = env.OPENMA_VERCEL_SESSION_TIMEOUT_MS ? Number(env.OPENMA_VERCEL_SESSION_TIMEOUT_MS) : undefined;
  if (timeout !== undefined && !(Number.isInteger(timeout) && timeout >= 60_000))
    throw new Error("OPENMA_VERCEL_SESSION_TIMEOUT_MS must be an integer of at least 60000");
  const rest = { apiUrl: env.OPENMA_VERCEL_API_URL || undefined, image: env.OPENMA_VERCEL_IMAGE || undefined, sessionTimeoutMs: timeout };
  if (env.VERCEL_TOKEN) {
    const missing = [VERCEL_ENV.teamId, VERCEL_ENV.projectId].filter((name) => !env[name]);
    if (missing.length > 0) return { missing };
    return { token: env.VERCEL_TOKEN, teamId: env.VERCEL_TEAM_ID as string, projectId: env.VERCEL_PROJECT_ID as string, ...rest };
  }
  if (env.VERCEL_OIDC_TOKEN) {
    const claims = oidcClaims(env.VERCEL_OIDC_TOKEN);
    if (claims === null) throw new Error("VERCEL_OIDC_TOKEN is not a Vercel OIDC token (no owner_id and project_id claims)");
    return { token: env.VERCEL_OIDC_TOKEN, ...claims, ...rest };
  }
  return { missing: [`${VERCEL_ENV.token} or ${VERCEL_ENV.oidcToken}`] };
}

export type VercelDriver = RemoteSandboxDriver;

export function createVercelDriver(config: VercelConfig, options: RemoteDriverOptions = {}): VercelDriver {
  const prefix = options.namePrefix ?? "openma";
  return new RemoteSandboxDriver(new VercelProvider({ ...config, listPrefix: `${prefix}-` }), VERCEL_SANDBOX_CAPABILITIES, options);
}
