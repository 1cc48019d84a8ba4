/**
 * What a sandbox may reach, from its environment's `networking`.
 *
 * Names: `unrestricted` allows every name; `limited` allows the
 * environment's `allowed_hosts`, plus the package registries' hosts when
 * `allow_package_managers` is set and the agent's MCP server hosts when
 * `allow_mcp_servers` is set. Host patterns follow the API's rule: an entry
 * matches that host exactly, `*.example.com` matches strict subdomains only.
 *
 * Addresses, in every mode: the gateway resolves the name itself and refuses
 * when any resolved address is loopback, unspecified, link-local (which
 * holds the cloud metadata address), multicast or a metadata address, so
 * neither a name nor a literal IP can reach the host's own loopback services
 * or the metadata endpoint. It then connects to the address it checked, so
 * a second resolution cannot swap it (DNS rebinding).
 */
import { BlockList, isIP } from "node:net";
import { hostMatchesAny, normalizeHost } from "./hosts.ts";

export { hostMatches, hostMatchesAny, normalizeHost } from "./hosts.ts";

export type EnvironmentNetworking =
  | { type: "unrestricted" }
  | { type: "limited"; allowed_hosts: readonly string[]; allow_package_managers?: boolean; allow_mcp_servers?: boolean };

export interface EgressPolicyInput {
  networking: EnvironmentNetworking;
  /** The registries' hosts (operator configuration), allowed under `limited` with `allow_package_managers`. */
  packageManagerHosts?: readonly string[];
  /** The agent's MCP server hosts, allowed under `limited` with `allow_mcp_servers`. */
  mcpServerHosts?: readonly string[];
}

// Never reachable from a sandbox, whatever the policy says.
const BLOCKED_V4: Array<[string, number]> = [
  ["0.0.0.0", 8], // "this network": 0.0.0.0 reaches the host's loopback services on Linux
  ["127.0.0.0", 8], // loopback
  ["169.254.0.0", 16], // link-local, holds 169.254.169.254 (metadata)
  ["100.100.100.200", 32], // a metadata address outside link-local
  ["224.0.0.0", 4], // multicast
  ["255.255.255.255", 32],
];
const BLOCKED_V6: Array<[string, number]> = [
  ["::", 128],
  ["::1", 128],
  ["fe80::", 10], // link-local
  ["fd00:ec2::254", 128], // metadata over IPv6
  ["ff00::", 8], // multicast
];

const BLOCKED = new BlockList();
for (const [net, prefix] of BLOCKED_V4) BLOCKED.addSubnet(net, prefix, "ipv4");
for (const [net, prefix] of BLOCKED_V6) BLOCKED.addSubnet(net, prefix, "ipv6");

/** Why a connection to `address` is refused, or null. IPv4-mapped IPv6 is judged as the IPv4 it embeds. */
export function addressRefusal(address: string): string | null {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  const ip = mapped ?? address;
  const version = isIP(ip);
  if (version === 0) return `${address} is not an IP address`;
  if (BLOCKED.check(ip, version === 4 ? "ipv4" : "ipv6"))
    return `address ${address} is loopback, link-local, metadata, multicast or unspecified`;
  return null;
}

/**
 * The normalized host patterns a policy allows, or null for every host: the
 * one reading of `networking` (the local gateway's, and what the cloudflare
 * driver sends its Worker).
 */
export function allowedHostsOf(input: EgressPolicyInput): string[] | null {
  const n = input.networking;
  if (n.type === "unrestricted") return null;
  if (n.type === "limited")
    return [
      ...n.allowed_hosts,
      ...(n.allow_package_managers ? (input.packageManagerHosts ?? []) : []),
      ...(n.allow_mcp_servers ? (input.mcpServerHosts ?? []) : []),
    ].map(normalizeHost);
  return []; // an unknown policy type allows nothing
}

export class EgressPolicy {
  readonly #hosts: readonly string[] | null;

  constructor(input: EgressPolicyInput) {
    this.#hosts = allowedHostsOf(input);
  }

  get mode(): "unrestricted" | "limited" {
    return this.#hosts === null ? "unrestricted" : "limited";
  }

  /** Why `host` may not be reached by name, or null. Addresses are checked after resolution. */
  hostRefusal(host: string): string | null {
    if (this.#hosts === null || hostMatchesAny(host, this.#hosts)) return null;
    return `host ${normalizeHost(host)} is not in the environment's allowed hosts (networking: limited)`;
  }
}
