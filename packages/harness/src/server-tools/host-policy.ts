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
import { BlockList } from "node:net";
import { hostMatchesAny as hostMatchesAnyPattern, hostMatches as hostMatchesPattern, normalizeHost } from "@openma/egress/hosts";
import { addressFamily as family, isNonPublicAddress } from "@openma/egress/public-address";

// The API's host-pattern rule is the egress gateway's (one implementation for both).
export { hostMatchesAnyPattern, hostMatchesPattern, normalizeHost };

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
    if (!isNonPublicAddress(address)) return null;
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
