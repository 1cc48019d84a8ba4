/**
 * Host names and the API's host-pattern rule, with no Node import, so a
 * Worker (packages/cloudflare-worker) applies exactly the rule the local
 * gateway applies.
 */

/** Lower-cases, drops IPv6 brackets and a trailing root dot. */
export function normalizeHost(host: string): string {
  let h = host.trim().toLowerCase();
  if (h.startsWith("[") && h.endsWith("]")) h = h.slice(1, -1);
  if (h.endsWith(".")) h = h.slice(0, -1);
  return h;
}

/** Exact match, or `*.suffix` matching strict subdomains of `suffix`. */
export function hostMatches(host: string, pattern: string): boolean {
  const h = normalizeHost(host);
  const p = normalizeHost(pattern);
  if (p.length === 0 || h.length === 0) return false;
  if (p.startsWith("*.")) {
    const suffix = p.slice(1);
    return suffix.length > 1 && h.length > suffix.length && h.endsWith(suffix);
  }
  return h === p;
}

export function hostMatchesAny(host: string, patterns: readonly string[]): boolean {
  return patterns.some((p) => hostMatches(host, p));
}
