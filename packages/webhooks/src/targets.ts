/**
 * SSRF guard for webhook targets. A delivery may only reach a public
 * address: loopback, private, link-local (cloud metadata), CGNAT, multicast
 * and unspecified ranges are refused, for IP literals in the URL and for
 * every address a hostname resolves to — checked in the socket's own DNS
 * lookup, so a name cannot pass the check and then connect elsewhere
 * (rebinding). An operator may allow private targets
 * (OPENMA_WEBHOOK_ALLOW_PRIVATE_TARGETS=1: receivers on the same host or
 * network); plain http is accepted only then.
 */
import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { BlockList, isIP } from "node:net";

const blocked = new BlockList();
for (const [net, prefix] of [
  ["0.0.0.0", 8],
  ["10.0.0.0", 8],
  ["100.64.0.0", 10],
  ["127.0.0.0", 8],
  ["169.254.0.0", 16],
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15],
  ["224.0.0.0", 4],
  ["240.0.0.0", 4],
] as const) {
  blocked.addSubnet(net, prefix, "ipv4");
}
for (const [net, prefix] of [
  ["::", 128],
  ["::1", 128],
  ["fc00::", 7],
  ["fe80::", 10],
  ["ff00::", 8],
  ["64:ff9b::", 96],
] as const) {
  blocked.addSubnet(net, prefix, "ipv6");
}

/** True for an address a webhook must not reach without the operator's consent. */
export function isNonPublicAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 0) return true;
  if (family === 4) return blocked.check(address, "ipv4");
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped?.[1]) return blocked.check(mapped[1], "ipv4");
  return blocked.check(address, "ipv6");
}

/** Why `raw` cannot be a webhook URL, or null. Static checks only (the address check repeats at delivery). */
export function targetProblem(raw: string, allowPrivate: boolean): string | null {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return "url: not a valid URL";
  }
  if (url.protocol !== "https:" && !(allowPrivate && url.protocol === "http:")) return "url: must be an https URL";
  if (url.username || url.password) return "url: must not contain credentials";
  if (allowPrivate) return null;
  const host = url.hostname.replace(/^\[|\]$/g, "");
  if (host === "localhost" || host.endsWith(".localhost")) return "url: loopback targets are not allowed";
  if (isIP(host) && isNonPublicAddress(host)) return "url: loopback, private and link-local targets are not allowed";
  return null;
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/** A `lookup` for http(s).request that refuses non-public answers. */
export function guardedLookup(hostname: string, options: object, callback: LookupCallback): void {
  dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
    if (err) return callback(err, []);
    const bad = addresses.find((a) => isNonPublicAddress(a.address));
    if (bad) {
      const refused: NodeJS.ErrnoException = new Error(`webhook target ${hostname} resolves to a non-public address (${bad.address})`);
      refused.code = "EWEBHOOKTARGET";
      return callback(refused, []);
    }
    if ((options as { all?: boolean }).all) return callback(null, addresses);
    const first = addresses[0];
    if (!first) return callback(new Error(`no address for ${hostname}`), []);
    callback(null, first.address, first.family);
  });
}
