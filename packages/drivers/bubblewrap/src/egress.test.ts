/**
 * Egress: in proxy mode the sandbox's only way out is the driver's HTTP
 * proxy, which applies the allowlist. Checked from inside a real sandbox
 * against a real host-side server.
 */

import { rm } from "node:fs/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { networkInterfaces } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BubblewrapSandbox } from "./driver.ts";
import { type EgressDecision, isAllowed, parseAllowlist } from "./egress.ts";
import { acquire, assertBwrapInstalled, never, scratch } from "./test-support.ts";

describe("allowlist", () => {
  it("matches names, wildcards and ports; without a port only 80 and 443", () => {
    const rules = parseAllowlist(["api.example.com", "*.pkg.dev", "127.0.0.1:8080", "[::1]:9000"]);
    expect(isAllowed(rules, "api.example.com", 443)).toBe(true);
    expect(isAllowed(rules, "API.Example.com.", 80)).toBe(true);
    expect(isAllowed(rules, "api.example.com", 22)).toBe(false);
    expect(isAllowed(rules, "evil-api.example.com", 443)).toBe(false);
    expect(isAllowed(rules, "npm.pkg.dev", 443)).toBe(true);
    expect(isAllowed(rules, "a.b.pkg.dev", 443)).toBe(true);
    expect(isAllowed(rules, "pkg.dev", 443)).toBe(false);
    expect(isAllowed(rules, "127.0.0.1", 8080)).toBe(true);
    expect(isAllowed(rules, "127.0.0.1", 443)).toBe(false);
    expect(isAllowed(rules, "::1", 9000)).toBe(true);
  });

  it("rejects malformed entries by name", () => {
    expect(() => parseAllowlist(["http://x.com"])).toThrow(/http:\/\/x.com/);
    expect(() => parseAllowlist(["x.com:99999"])).toThrow(/x.com:99999/);
    expect(() => parseAllowlist(["*"])).toThrow();
  });
});

/** Run inside the sandbox with node: every way out it can try, as one JSON line. */
const PROBE = `
const net = require("node:net"), http = require("node:http");
const [port, hostIp] = process.argv.slice(1);
const direct = (host, p) => new Promise((r) => { const s = net.connect({ host, port: Number(p) }); s.setTimeout(3000, () => { s.destroy(); r("timeout"); }); s.on("connect", () => { s.destroy(); r("connected"); }); s.on("error", (e) => r(e.code)); });
const tunnel = (target) => new Promise((r) => {
  const req = http.request({ host: "127.0.0.1", port: 3128, method: "CONNECT", path: target });
  req.on("connect", (res, sock) => {
    if (res.statusCode !== 200) { sock.destroy(); return r(String(res.statusCode)); }
    sock.write("GET / HTTP/1.1\\r\\nHost: t\\r\\nConnection: close\\r\\n\\r\\n");
    let body = ""; sock.on("data", (c) => (body += c)); sock.on("end", () => r(res.statusCode + ":" + body.split("\\r\\n\\r\\n")[1]));
  });
  req.on("response", (res) => { res.resume(); r(String(res.statusCode)); });
  req.on("error", (e) => r(e.code)); req.end();
});
const plain = (url) => new Promise((r) => { http.get({ host: "127.0.0.1", port: 3128, path: url }, (res) => { let b = ""; res.on("data", (c) => (b += c)); res.on("end", () => r(res.statusCode + ":" + b)); }).on("error", (e) => r(e.code)); });
(async () => console.log(JSON.stringify({
  directLoopback: await direct("127.0.0.1", port),
  directHost: await direct(hostIp, port),
  tunnelAllowed: await tunnel("127.0.0.1:" + port),
  tunnelOtherPort: await tunnel("127.0.0.1:" + (Number(port) + 1)),
  tunnelOtherHost: await tunnel("example.com:443"),
  plainAllowed: await plain("http://127.0.0.1:" + port + "/x"),
  plainRefused: await plain("http://example.com/"),
  proxyEnv: process.env.HTTPS_PROXY,
})))();
`;

describe("proxy-only network", () => {
  let root: string;
  let server: http.Server;
  let port: number;
  const drivers: BubblewrapSandbox[] = [];

  beforeAll(async () => {
    assertBwrapInstalled();
    root = await scratch("bwrap-egress");
    server = http.createServer((_req, res) => res.end("hello"));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as AddressInfo).port;
  });

  afterAll(async () => {
    for (const d of drivers) await d.shutdown();
    await new Promise((resolve) => server?.close(resolve));
    if (root) await rm(root, { recursive: true, force: true });
  });

  it("reaches an allowed host only through the proxy; everything else fails", async () => {
    const decisions: EgressDecision[] = [];
    const driver = new BubblewrapSandbox({
      stateRoot: join(root, "state"),
      network: { mode: "proxy", allow: [`127.0.0.1:${port}`], onDecision: (d) => decisions.push(d) },
      // The probe needs node; bound explicitly so the test does not depend on where the host keeps it.
      binds: [{ source: process.execPath, target: "/opt/openma-test/node" }],
    });
    drivers.push(driver);
    expect(driver.capabilities.credentialEgress).toEqual({ enforcement: "enforced", interceptedProtocols: ["http", "https"] });
    const { lease } = await acquire(driver, root);
    const hostIp =
      Object.values(networkInterfaces())
        .flat()
        .find((nic) => nic && nic.family === "IPv4" && !nic.internal)?.address ?? "192.0.2.1";
    const result = await driver.toolSandbox(lease).exec({
      command: ["/opt/openma-test/node", "-e", PROBE, String(port), hostIp],
      timeoutMs: 30_000,
      signal: never(),
    });
    if (result.type !== "exited") throw new Error(`probe ended as ${result.type}`);
    const seen = JSON.parse(Buffer.from(result.stdout).toString("utf8"));
    expect(seen.directLoopback).toBe("ECONNREFUSED"); // the host's loopback is not the sandbox's
    expect(["ENETUNREACH", "EHOSTUNREACH", "EADDRNOTAVAIL"]).toContain(seen.directHost); // no route at all
    expect(seen.tunnelAllowed).toBe("200:hello");
    expect(seen.tunnelOtherPort).toBe("403");
    expect(seen.tunnelOtherHost).toBe("403");
    expect(seen.plainAllowed).toBe("200:hello");
    expect(seen.plainRefused).toMatch(/^403:/);
    expect(seen.proxyEnv).toBe("http://127.0.0.1:3128");
    expect(decisions).toEqual(
      expect.arrayContaining([
        { method: "CONNECT", host: "127.0.0.1", port, allowed: true },
        { method: "CONNECT", host: "example.com", port: 443, allowed: false },
        { method: "GET", host: "example.com", port: 80, allowed: false },
      ]),
    );
  });

  it("has no route out at all without the proxy", async () => {
    const driver = new BubblewrapSandbox({
      stateRoot: join(root, "state-none"),
      binds: [{ source: process.execPath, target: "/opt/openma-test/node" }],
    });
    drivers.push(driver);
    expect(driver.capabilities.credentialEgress).toEqual({ enforcement: "enforced", interceptedProtocols: [] });
    const { lease } = await acquire(driver, root);
    const result = await driver.toolSandbox(lease).exec({
      command: ["/opt/openma-test/node", "-e", PROBE, String(port), "192.0.2.1"],
      timeoutMs: 30_000,
      signal: never(),
    });
    if (result.type !== "exited") throw new Error(`probe ended as ${result.type}`);
    const seen = JSON.parse(Buffer.from(result.stdout).toString("utf8"));
    expect(seen.tunnelAllowed).toBe("ECONNREFUSED"); // no proxy listens
    expect(seen.proxyEnv).toBeUndefined();
  });
});
