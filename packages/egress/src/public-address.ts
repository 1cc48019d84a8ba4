/**
 * Public unicast or not: the one address rule for every request the server
 * itself makes on a user's behalf (web_fetch, credential injection, webhook
 * deliveries). Anything else (private, loopback, link-local and the cloud
 * metadata address in it, CGNAT, multicast, reserved, documentation and
 * benchmarking ranges, and the IPv6 forms that can embed an IPv4 address)
 * is refused unless an operator allows it.
 *
 * A sandbox's own egress (policy.ts) is a different, looser rule on purpose:
 * an `unrestricted` sandbox may reach private networks, only never the
 * host's loopback or the metadata endpoint.
 */
import { BlockList, isIP } from "node:net";

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

/** `ipv4`, `ipv6`, or null for a string that is not an IP address. */
export function addressFamily(address: string): "ipv4" | "ipv6" | null {
  const v = isIP(address);
  return v === 4 ? "ipv4" : v === 6 ? "ipv6" : null;
}

/** True for any address that is not public unicast (IPv4-mapped IPv6 included), and for a non-address. */
export function isNonPublicAddress(address: string): boolean {
  const f = addressFamily(address);
  if (!f) return true;
  return SPECIAL.check(address, f);
}
