/**
 * Host and address rules for tools that reach the network from inside the
 * server (web_fetch, credential injection).
 *
 * Two different matching rules exist in the API and both are applied
 * strictly, never loosened:
 * - host patterns (an environment's `networking.allowed_hosts`, a credential's
 *   `networking.allowed_hosts`): an entry matches the request host exactly; an
 *   entry `*.example.com` matches any subdomain of `example.com` but not
 *   `example.com` itself (the SDK's documented rule for credential hosts, used
 *   for environments too so there is one rule for "allowed hosts");
 * - domain lists (web_fetch `allowed_domains` / `blocked_domains`): an entry
 *   matches that host and any subdomain of it.
 *
 * Addresses: a request may only connect to a public unicast address unless
 * the operator explicitly allows a private range. API users (agent or
 * environment authors) cannot grant that: an `allowed_hosts` entry of
 * `127.0.0.1` does not open loopback, because the server's own network is
 * not theirs to reach.
 */
import { BlockList, isIP } from "node:net";

/** Lower-cases, drops IPv6 brackets and a trailing root dot. */
export function normalizeHost(host: string): string {
  let h = host.trim().toLowerCase();
  if (h.startsWith("[") && h.endsWith("]")) h = h.slice(1, -1);
  if (h.endsWith(".")) h = h.slice(0, -1);
  return h;
}

/** Exact match, or `*.suffix` matching strict subdomains of `suffix`. */
export function hostMatchesPattern(host: string, pattern: string): boolean {
  const h = normalizeHost(host);
  const p = normalizeHost(pattern);
  if (p.length === 0 || h.length === 0) return false;
  if (p.startsWith("*.")) {
    const suffix = p.slice(1); // ".example.com"
    return suffix.length > 1 && h.length > suffix.length && h.endsWith(suffix);
  }
  return h === p;
}

export function hostMatchesAnyPattern(host: string, patterns: readonly string[]): boolean {
  return patterns.some((p) => hostMatchesPattern(host, p));
}

/** `domain` itself or any subdomain of it (web_fetch allowed/blocked domains). */
export function hostInDomain(host: string, domain: string): boolean {
  const h = normalizeHost(host);
  const d = normalizeHost(domain);
  if (d.length === 0) return false;
  return h === d || h.endsWith(`.${d}`);
}

/**
 * Whether every host matched by `inner` is also matched by `outer` (both host
 * patterns). Used to tell whether a credential's hosts are reachable under an
 * environment's `limited` networking.
 */
export function patternCoveredBy(inner: string, outer: string): boolean {
  const i = normalizeHost(inner);
  const o = normalizeHost(outer);
  if (!o.startsWith("*.")) return i === o;
  // `*.example.com` covers `a.example.com`, `*.example.com` and `*.a.example.com`, never `example.com` itself.
  const base = o.slice(2);
  if (base.length === 0) return false;
  if (i.startsWith("*.")) {
    const innerBase = i.slice(2);
    return innerBase === base || innerBase.endsWith(`.${base}`);
  }
  return i.endsWith(`.${base}`);
}

export interface HostPolicy {
  /** The environment's `limited` allow-list; `null` means unrestricted. */
  allowedHosts: readonly string[] | null;
  /** web_fetch `allowed_domains`; `null` when not configured. */
  allowedDomains: readonly string[] | null;
  /** web_fetch `blocked_domains`; `null` when not configured. */
  blockedDomains: readonly string[] | null;
}

/** Why `host` may not be fetched under `policy`, or null when it may. */
export function hostRefusal(host: string, policy: HostPolicy): string | null {
  const h = normalizeHost(host);
  if (policy.allowedHosts !== null && !hostMatchesAnyPattern(h, policy.allowedHosts)) {
    return `host ${h} is not in the environment's networking.allowed_hosts`;
  }
  if (policy.blockedDomains?.some((d) => hostInDomain(h, d))) return `host ${h} is in web_fetch blocked_domains`;
  if (policy.allowedDomains !== null && !policy.allowedDomains.some((d) => hostInDomain(h, d))) {
    return `host ${h} is not in web_fetch allowed_domains`;
  }
  return null;
}

// Every range that is not public unicast: private, loopback, link-local, CGNAT,
// multicast, reserved, documentation, benchmarking, and the IPv6 transition
// forms that can embed an IPv4 address (NAT64, 6to4, Teredo, IPv4-compatible).
const SPECIAL_V4: Array<[string, number]> = [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.0.2.0", 24],
  ["192.88.99.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["198.51.100.0", 24],
  ["203.0.113.0", 24],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4],
];
const SPECIAL_V6: Array<[string, number]> = [
  ["::", 96],
  ["64:ff9b::", 96],
  ["64:ff9b:1::", 48],
  ["100::", 64],
  ["2001::", 32],
  ["2001:db8::", 32],
  ["2002::", 16],
  ["fc00::", 7],
  ["fe80::", 10],
  ["fec0::", 10],
  ["ff00::", 8],
];

const SPECIAL = new BlockList();
for (const [net, prefix] of SPECIAL_V4) SPECIAL.addSubnet(net, prefix, "ipv4");
for (const [net, prefix] of SPECIAL_V6) SPECIAL.addSubnet(net, prefix, "ipv6");

function family(address: string): "ipv4" | "ipv6" | null {
  const v = isIP(address);
  return v === 4 ? "ipv4" : v === 6 ? "ipv6" : null;
}

/** True for any address that is not public unicast (IPv4-mapped IPv6 included). */
export function isSpecialAddress(address: string): boolean {
  const f = family(address);
  if (!f) return true;
  return SPECIAL.check(address, f);
}

/**
 * Decides which resolved addresses a request may connect to. `allowCidrs` is
 * operator configuration (e.g. `["127.0.0.1/32"]` for tests or an internal
 * documentation server); it is never taken from API input.
 */
export class AddressPolicy {
  private readonly allowed = new BlockList();

  constructor(allowCidrs: readonly string[] = []) {
    for (const entry of allowCidrs) {
      const [net, prefixText] = entry.split("/");
      const f = net ? family(net) : null;
      if (!net || !f) throw new Error(`invalid CIDR in private address allow-list: ${entry}`);
      const max = f === "ipv4" ? 32 : 128;
      const prefix = prefixText === undefined ? max : Number(prefixText);
      if (!Number.isInteger(prefix) || prefix < 0 || prefix > max) throw new Error(`invalid CIDR prefix: ${entry}`);
      this.allowed.addSubnet(net, prefix, f);
    }
  }

  /** Why connecting to `address` is refused, or null when it is permitted. */
  refusal(address: string): string | null {
    const f = family(address);
    if (!f) return `not an IP address: ${address}`;
    if (!isSpecialAddress(address)) return null;
    if (this.allowed.check(address, f)) return null;
    return `address ${address} is private, loopback, link-local or reserved`;
  }
}

/**
 * The environment's `limited` allow-list, or null when web_fetch is not
 * host-restricted (unrestricted cloud networking, self-hosted, or the
 * sandbox-free `none` extension, none of which carries an allow-list).
 * A `limited` config whose list is missing or malformed allows nothing: the
 * policy fails closed.
 */
export function environmentAllowedHosts(environment: unknown): string[] | null {
  const config = (environment as { config?: { type?: unknown; networking?: unknown } } | null)?.config;
  const networking = config?.networking as { type?: unknown; allowed_hosts?: unknown } | undefined;
  if (!networking || networking.type === "unrestricted") return null;
  if (networking.type !== "limited") return []; // an unknown policy type restricts everything
  const hosts = networking.allowed_hosts;
  if (!Array.isArray(hosts)) return [];
  return hosts.filter((h): h is string => typeof h === "string" && h.length > 0 && h.length <= 253);
}
