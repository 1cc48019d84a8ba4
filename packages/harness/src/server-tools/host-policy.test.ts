import { isNonPublicAddress } from "@openma/egress/public-address";
import { describe, expect, it } from "vitest";
import {
  AddressPolicy,
  environmentAllowedHosts,
  hostInDomain,
  hostMatchesPattern,
  hostRefusal,
  normalizeHost,
  patternCoveredBy,
} from "./host-policy.ts";

describe("host patterns (allowed_hosts)", () => {
  it("normalises case, brackets and a trailing dot", () => {
    expect(normalizeHost("API.Example.COM.")).toBe("api.example.com");
    expect(normalizeHost("[::1]")).toBe("::1");
  });

  it("matches exactly, or *. for strict subdomains only", () => {
    expect(hostMatchesPattern("api.example.com", "api.example.com")).toBe(true);
    expect(hostMatchesPattern("API.example.com.", "api.EXAMPLE.com")).toBe(true);
    expect(hostMatchesPattern("www.api.example.com", "api.example.com")).toBe(false);
    expect(hostMatchesPattern("a.example.com", "*.example.com")).toBe(true);
    expect(hostMatchesPattern("a.b.example.com", "*.example.com")).toBe(true);
    expect(hostMatchesPattern("example.com", "*.example.com")).toBe(false);
    expect(hostMatchesPattern("evilexample.com", "*.example.com")).toBe(false);
    expect(hostMatchesPattern("example.com", "*.")).toBe(false);
    expect(hostMatchesPattern("example.com", "")).toBe(false);
    expect(hostMatchesPattern("192.0.2.1", "192.0.2.1")).toBe(true);
  });

  it("domain lists match the domain and its subdomains", () => {
    expect(hostInDomain("example.com", "example.com")).toBe(true);
    expect(hostInDomain("docs.example.com", "example.com")).toBe(true);
    expect(hostInDomain("badexample.com", "example.com")).toBe(false);
  });

  it("tells whether a credential host is covered by an environment pattern", () => {
    expect(patternCoveredBy("a.example.com", "*.example.com")).toBe(true);
    expect(patternCoveredBy("*.a.example.com", "*.example.com")).toBe(true);
    expect(patternCoveredBy("*.example.com", "*.example.com")).toBe(true);
    expect(patternCoveredBy("example.com", "*.example.com")).toBe(false);
    expect(patternCoveredBy("*.example.com", "a.example.com")).toBe(false);
    expect(patternCoveredBy("*.example.com", "*.a.example.com")).toBe(false);
    expect(patternCoveredBy("x.com", "x.com")).toBe(true);
  });

  it("combines the environment list with allowed and blocked domains", () => {
    const policy = { allowedHosts: ["*.example.com"], allowedDomains: null, blockedDomains: ["ads.example.com"] };
    expect(hostRefusal("docs.example.com", policy)).toBeNull();
    expect(hostRefusal("example.com", policy)).toBe("host example.com is not in the environment's networking.allowed_hosts");
    expect(hostRefusal("x.ads.example.com", policy)).toBe("host x.ads.example.com is in web_fetch blocked_domains");
    expect(hostRefusal("a.com", { allowedHosts: null, allowedDomains: ["b.com"], blockedDomains: null })).toBe(
      "host a.com is not in web_fetch allowed_domains",
    );
    expect(hostRefusal("anything.org", { allowedHosts: null, allowedDomains: null, blockedDomains: null })).toBeNull();
  });

  it("reads the environment's networking, failing closed on a limited config without a list", () => {
    const env = (networking: unknown) => ({ config: { type: "cloud", networking } });
    expect(environmentAllowedHosts(env({ type: "limited", allowed_hosts: ["a.com"] }))).toEqual(["a.com"]);
    expect(environmentAllowedHosts(env({ type: "limited" }))).toEqual([]);
    expect(environmentAllowedHosts(env({ type: "something_new" }))).toEqual([]);
    expect(environmentAllowedHosts(env({ type: "unrestricted" }))).toBeNull();
    expect(environmentAllowedHosts({ config: { type: "self_hosted" } })).toBeNull();
    expect(environmentAllowedHosts({ type: "none" })).toBeNull();
    expect(environmentAllowedHosts(null)).toBeNull();
  });
});

describe("addresses", () => {
  it("classifies every non-public range as special", () => {
    const special = [
      "0.0.0.0",
      "10.0.0.1",
      "100.64.0.1",
      "127.0.0.1",
      "127.255.255.254",
      "169.254.169.254",
      "172.16.0.1",
      "172.31.255.255",
      "192.168.1.1",
      "192.0.2.5",
      "198.18.0.1",
      "224.0.0.1",
      "255.255.255.255",
      "::",
      "::1",
      "fe80::1",
      "fc00::1",
      "fd12:3456::1",
      "ff02::1",
      "::ffff:10.0.0.1",
      "::ffff:127.0.0.1",
      "64:ff9b::a00:1",
      "2002:a00:1::1",
      "2001:db8::1",
      "not-an-ip",
    ];
    for (const a of special) expect(isNonPublicAddress(a), a).toBe(true);
    for (const a of ["8.8.8.8", "1.1.1.1", "172.32.0.1", "93.184.216.34", "2606:4700::1111", "::ffff:8.8.8.8"]) {
      expect(isNonPublicAddress(a), a).toBe(false);
    }
  });

  it("lets operator CIDRs through and nothing else", () => {
    const policy = new AddressPolicy(["127.0.0.1/32", "fd00::/8"]);
    expect(policy.refusal("127.0.0.1")).toBeNull();
    expect(policy.refusal("::ffff:127.0.0.1")).toBeNull();
    expect(policy.refusal("fd00::5")).toBeNull();
    expect(policy.refusal("127.0.0.2")).toBe("address 127.0.0.2 is private, loopback, link-local or reserved");
    expect(policy.refusal("8.8.8.8")).toBeNull();
    expect(new AddressPolicy().refusal("127.0.0.1")).not.toBeNull();
    expect(() => new AddressPolicy(["nonsense/8"])).toThrow(/invalid CIDR/);
    expect(() => new AddressPolicy(["10.0.0.0/33"])).toThrow(/invalid CIDR prefix/);
  });
});
