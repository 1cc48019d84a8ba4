/**
 * SSRF guard for webhook targets. A delivery may only reach a public
 * unicast address (the server's one rule, @openma/egress/public-address):
 * loopback, private, link-local (cloud metadata), CGNAT, multicast, reserved
 * and the IPv6 forms embedding an IPv4 address are refused, for IP literals in the URL and for
 * every address a hostname resolves to — checked in the socket's own DNS
 * lookup, so a name cannot pass the check and then connect elsewhere
 * (rebinding). An operator may allow private targets
 * (OPENMA_WEBHOOK_ALLOW_PRIVATE_TARGETS=1: receivers on the same host or
 * network); plain http is accepted only then.
 */
import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { isIP } from "node:net";
import { isNonPublicAddress } from "@openma/egress/public-address";

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
