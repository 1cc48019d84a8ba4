/**
 * The `CredentialEgressPort` a host composes into a local driver: per
 * sandbox, it resolves the environment's networking and the session's
 * `environment_variable` credentials (through `configFor`, which the host
 * backs with its storage), mints a placeholder per credential and a CA when
 * some credential needs interception, and opens the gateway.
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { CredentialEgressCapabilities, CredentialEgressPort, RuntimeResourceScope, SandboxEgress } from "@openma/contract";
import { SandboxCa } from "./ca.ts";
import { type EgressAuditEvent, type EgressCredential, EgressGateway, type Lookup } from "./gateway.ts";
import { EgressPolicy, type EnvironmentNetworking } from "./policy.ts";

export interface SandboxEgressConfig {
  networking: EnvironmentNetworking;
  /** Hosts of the agent's MCP servers (for `allow_mcp_servers`). */
  mcpServerHosts?: readonly string[];
  credentials: readonly {
    secretName: string;
    secret: string;
    /** The credential's `networking.allowed_hosts`; null when it is `unrestricted`. */
    hosts: readonly string[] | null;
    header: boolean;
    body: boolean;
  }[];
}

export interface GatewayEgressPortOptions {
  configFor(input: { scope: RuntimeResourceScope; signal: AbortSignal }): Promise<SandboxEgressConfig>;
  /** The package registries' hosts (operator configuration), allowed under `limited` + `allow_package_managers`. */
  packageManagerHosts?: readonly string[];
  /** Extra certificates trusted for upstream TLS (a private registry's CA, a test server's). */
  upstreamCa?: readonly string[];
  lookup?: Lookup;
  onAudit?: (event: EgressAuditEvent) => void;
}

export const GATEWAY_EGRESS_CAPABILITIES: CredentialEgressCapabilities = {
  enforcement: "enforced",
  credentialMode: "live",
  interceptedProtocols: ["http", "https"],
};

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
/** Variables a credential may not shadow: the sandbox's own plumbing. */
const RESERVED_NAMES = new Set([
  "PATH",
  "HOME",
  "HTTP_PROXY",
  "HTTPS_PROXY",
  "NO_PROXY",
  "ALL_PROXY",
  "NODE_EXTRA_CA_CERTS",
  "SSL_CERT_FILE",
]);

export class GatewayEgressPort implements CredentialEgressPort {
  readonly capabilities = GATEWAY_EGRESS_CAPABILITIES;
  readonly #options: GatewayEgressPortOptions;

  constructor(options: GatewayEgressPortOptions) {
    this.#options = options;
  }

  async open(input: { scope: RuntimeResourceScope; runtimeId: string; signal: AbortSignal }): Promise<SandboxEgress> {
    const config = await this.#options.configFor({ scope: input.scope, signal: input.signal });
    const policy = new EgressPolicy({
      networking: config.networking,
      packageManagerHosts: this.#options.packageManagerHosts,
      mcpServerHosts: config.mcpServerHosts,
    });
    const credentials: EgressCredential[] = [];
    const env: Record<string, string> = {};
    for (const c of config.credentials) {
      if (!ENV_NAME.test(c.secretName) || RESERVED_NAMES.has(c.secretName.toUpperCase()))
        throw new Error(`credential secret_name ${JSON.stringify(c.secretName)} cannot be a sandbox variable`);
      if (env[c.secretName] !== undefined) throw new Error(`two credentials share secret_name ${c.secretName}`);
      // Random, so it cannot occur in traffic by accident, and distinct per sandbox.
      const placeholder = `openma-placeholder-${c.secretName.toLowerCase()}-${randomBytes(12).toString("hex")}`;
      env[c.secretName] = placeholder;
      credentials.push({ ...c, placeholder });
    }
    const ca = credentials.length > 0 ? new SandboxCa(input.runtimeId) : undefined;
    const gateway = new EgressGateway({
      sandbox: input.runtimeId,
      policy,
      credentials,
      ca,
      upstreamCa: this.#options.upstreamCa,
      lookup: this.#options.lookup,
      onAudit: this.#options.onAudit,
    });
    return {
      caCertPem: ca?.certPem ?? null,
      env,
      accept: (socket) => gateway.accept(socket as never),
      close: () => gateway.close(),
    };
  }
}

/**
 * Where the drivers put the trust files inside a sandbox: a directory under
 * `/run`, which every layout can create (images and rootfs trees leave it
 * empty), bound read-only. The bundle is also bound over the system trust
 * store where one exists, for tools that ignore the variables.
 */
export const SANDBOX_EGRESS_DIR = "/run/openma/egress";
export const SANDBOX_CA_FILE = `${SANDBOX_EGRESS_DIR}/ca.pem`;
export const SANDBOX_CA_BUNDLE = `${SANDBOX_EGRESS_DIR}/ca-bundle.pem`;
export const SYSTEM_TRUST_STORE = "/etc/ssl/certs/ca-certificates.crt";
export const EGRESS_PROXY_PORT = 3128;

/** Proxy variables (both spellings: tools disagree on case). The sandbox's own loopback needs no proxy. */
export function sandboxProxyEnv(port: number = EGRESS_PROXY_PORT): Record<string, string> {
  const url = `http://127.0.0.1:${port}`;
  const noProxy = "localhost,127.0.0.1,::1";
  return {
    HTTP_PROXY: url,
    HTTPS_PROXY: url,
    ALL_PROXY: url,
    http_proxy: url,
    https_proxy: url,
    all_proxy: url,
    NO_PROXY: noProxy,
    no_proxy: noProxy,
    // Node's own http, https and fetch honour the variables only when asked to.
    NODE_USE_ENV_PROXY: "1",
  };
}

/** Trust variables for Node, Python, curl, git, npm and pip, when the sandbox has a CA. */
export function sandboxTrustEnv(): Record<string, string> {
  return {
    NODE_EXTRA_CA_CERTS: SANDBOX_CA_FILE,
    SSL_CERT_FILE: SANDBOX_CA_BUNDLE,
    REQUESTS_CA_BUNDLE: SANDBOX_CA_BUNDLE,
    CURL_CA_BUNDLE: SANDBOX_CA_BUNDLE,
    GIT_SSL_CAINFO: SANDBOX_CA_BUNDLE,
    PIP_CERT: SANDBOX_CA_BUNDLE,
  };
}

/** The host's system bundle plus the sandbox CA: what `SSL_CERT_FILE` points at, so ordinary HTTPS still verifies. */
export function trustBundle(caCertPem: string, systemBundle = SYSTEM_TRUST_STORE): string {
  let system = "";
  try {
    system = readFileSync(systemBundle, "utf8");
  } catch {
    // No system bundle: the sandbox CA alone.
  }
  return `${system.trimEnd()}\n${caCertPem.trim()}\n`;
}

/** Writes `ca.pem` and `ca-bundle.pem` into `hostDir` (a directory the driver binds at SANDBOX_EGRESS_DIR). */
export function writeTrustFiles(hostDir: string, caCertPem: string): void {
  mkdirSync(hostDir, { recursive: true, mode: 0o755 });
  writeFileSync(join(hostDir, "ca.pem"), caCertPem, { mode: 0o644 });
  writeFileSync(join(hostDir, "ca-bundle.pem"), trustBundle(caCertPem), { mode: 0o644 });
}

/** Everything a driver sets in a sandbox behind `gateway`: proxy variables, trust variables when it has a CA, placeholders. */
export function gatewaySandboxEnv(gateway: { caCertPem: string | null; env: Readonly<Record<string, string>> }): Record<string, string> {
  return { ...sandboxProxyEnv(EGRESS_PROXY_PORT), ...(gateway.caCertPem !== null ? sandboxTrustEnv() : {}), ...gateway.env };
}
