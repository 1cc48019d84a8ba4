/**
 * The egress gateway of `openma serve`'s local session sandboxes (ADR 0020):
 * every bubblewrap or Docker sandbox gets one `@openma/egress` gateway as its
 * only way out, configured per session from storage:
 *
 * - the environment's `networking` (`unrestricted`, or `limited` with
 *   `allowed_hosts`, `allow_package_managers`, `allow_mcp_servers`), the
 *   latter resolved to the hosts of the session agent's MCP servers;
 * - the session vaults' `environment_variable` credentials: the sandbox sees a
 *   placeholder under `secret_name`, the gateway substitutes the real value
 *   only on requests to the credential's allowed hosts.
 *
 * The secrets are read here, in the server, and handed to the gateway in
 * memory; nothing of them is logged (audit events carry names only).
 */
import { readFileSync } from "node:fs";
import type { Logger } from "@openma/api";
import type { CredentialEgressPort, RuntimeResourceScope } from "@openma/contract";
import type { CloudflareEgressOptions } from "@openma/driver-cloudflare";
import { type EnvironmentNetworking, GatewayEgressPort, type SandboxEgressConfig } from "@openma/egress";
import { loadContext } from "@openma/harness/context";
import { SessionCredentials } from "@openma/harness/server-tools/vault-credentials";
import type { SecretBox, Storage } from "@openma/storage";
import { z } from "zod";

export interface EgressSettings {
  /** `OPENMA_EGRESS`: on (default) composes the gateway; off leaves sandboxes with no network at all. */
  enabled: boolean;
  /** `OPENMA_EGRESS_PACKAGE_MANAGER_HOSTS`: the registries' hosts `allow_package_managers` adds (host patterns). */
  packageManagerHosts: string[];
  /** `OPENMA_EGRESS_UPSTREAM_CA`: PEM file(s) the gateway trusts upstream besides the system roots. */
  upstreamCaFiles: string[];
}

const list = (text: string | undefined): string[] =>
  (text ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s.length > 0);

export function egressSettings(env: {
  OPENMA_EGRESS?: string;
  OPENMA_EGRESS_PACKAGE_MANAGER_HOSTS?: string;
  OPENMA_EGRESS_UPSTREAM_CA?: string;
}): EgressSettings {
  return {
    enabled: env.OPENMA_EGRESS !== "off",
    packageManagerHosts: list(env.OPENMA_EGRESS_PACKAGE_MANAGER_HOSTS),
    upstreamCaFiles: list(env.OPENMA_EGRESS_UPSTREAM_CA),
  };
}

const networkingSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("unrestricted") }),
  z.object({
    type: z.literal("limited"),
    allowed_hosts: z.array(z.string()).catch([]),
    allow_package_managers: z.boolean().nullish(),
    allow_mcp_servers: z.boolean().nullish(),
  }),
]);

/** Nothing may leave: what an unknown or missing environment gets. */
const NOTHING: EnvironmentNetworking = { type: "limited", allowed_hosts: [] };

/**
 * The environment's networking. A cloud environment without one is
 * `unrestricted` (the API's default); a gone environment, or a policy this
 * server does not understand, allows nothing.
 */
export function networkingOf(environment: unknown): EnvironmentNetworking {
  if (environment === null || typeof environment !== "object") return NOTHING;
  const networking = (environment as { config?: { networking?: unknown } }).config?.networking;
  if (networking === undefined || networking === null) return { type: "unrestricted" };
  const parsed = networkingSchema.safeParse(networking);
  if (!parsed.success) return NOTHING;
  const n = parsed.data;
  if (n.type === "unrestricted") return n;
  return {
    type: "limited",
    allowed_hosts: n.allowed_hosts,
    allow_package_managers: n.allow_package_managers === true,
    allow_mcp_servers: n.allow_mcp_servers === true,
  };
}

/** The hosts of the agent's MCP servers (for `allow_mcp_servers`); unparseable URLs contribute nothing. */
export function mcpServerHosts(agent: unknown): string[] {
  const servers = (agent as { mcp_servers?: unknown } | null)?.mcp_servers;
  if (!Array.isArray(servers)) return [];
  const hosts = new Set<string>();
  for (const server of servers) {
    const url = (server as { url?: unknown } | null)?.url;
    if (typeof url !== "string") continue;
    try {
      hosts.add(new URL(url).hostname);
    } catch {
      // Not a URL: no host to allow.
    }
  }
  return [...hosts];
}

/**
 * The gateway's view of one session: its environment's networking, its
 * agent's MCP hosts and its vaults' `environment_variable` credentials (the
 * first credential per `secret_name` wins, as in web_fetch). A credential
 * whose secret cannot be opened is left out, so its placeholder is never set
 * and nothing is substituted for it: the request goes out without it.
 */
export async function sessionEgressConfig(
  deps: { storage: Storage; secrets?: SecretBox | undefined; logger: Logger },
  scope: RuntimeResourceScope,
): Promise<SandboxEgressConfig> {
  const sessionId = scope.sessionId;
  const ctx = sessionId === undefined ? null : await loadContext(deps.storage, sessionId);
  if (ctx === null) return { networking: NOTHING, credentials: [] };
  const vault = await SessionCredentials.load(deps.storage, ctx.vaultIds, { secrets: deps.secrets });
  const credentials: SandboxEgressConfig["credentials"][number][] = [];
  for (const c of vault.credentials) {
    const auth = c.auth;
    if (auth.type !== "environment_variable") continue;
    if (credentials.some((k) => k.secretName === auth.secret_name)) continue;
    const secret = c.secret.secret_value;
    if (c.unreadable !== null || !secret) {
      deps.logger.warn(
        { sessionId, credential_id: c.id, vault_id: c.vaultId },
        "vault credential has no usable secret: not given to the sandbox",
      );
      continue;
    }
    credentials.push({
      secretName: auth.secret_name,
      secret,
      hosts: auth.networking.type === "limited" ? auth.networking.allowed_hosts : null,
      header: auth.injection_location.header,
      body: auth.injection_location.body,
    });
  }
  return { networking: networkingOf(ctx.environment), mcpServerHosts: mcpServerHosts(ctx.agent), credentials };
}

/**
 * The port `openma serve` composes into its local drivers, or null when the
 * operator turned egress off. Every audit event (`egress.allowed`,
 * `egress.denied`) is a structured line of the server log, message `egress`.
 */
export function serveEgressPort(
  settings: EgressSettings,
  deps: { storage: Storage; secrets?: SecretBox | undefined; logger: Logger },
): CredentialEgressPort | null {
  if (!settings.enabled) return null;
  const upstreamCa = settings.upstreamCaFiles.map((file) => readFileSync(file, "utf8"));
  return new GatewayEgressPort({
    configFor: ({ scope }) => sessionEgressConfig(deps, scope),
    packageManagerHosts: settings.packageManagerHosts,
    upstreamCa,
    onAudit: (event) => deps.logger.info({ ...event, audit: event.type }, "egress"),
  });
}

/**
 * The same per-session egress for a cloud driver that enforces it at the
 * provider (`cloudflare`: our Worker substitutes the credentials, ADR
 * 0019), or undefined when the operator turned egress off (the driver then
 * lets nothing out of its sandboxes).
 */
export function cloudEgress(
  settings: EgressSettings,
  deps: { storage: Storage; secrets?: SecretBox | undefined; logger: Logger },
): CloudflareEgressOptions | undefined {
  if (!settings.enabled) return undefined;
  return { egressConfig: ({ scope }) => sessionEgressConfig(deps, scope), packageManagerHosts: settings.packageManagerHosts };
}
