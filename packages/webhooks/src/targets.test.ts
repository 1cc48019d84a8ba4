import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { isNonPublicAddress } from "@openma/egress/public-address";
import { ManualScheduler } from "@openma/time";
import { Webhook } from "standardwebhooks";
import { describe, expect, it } from "vitest";
import { newSigningSecret, signDelivery } from "./signing.ts";
import { guardedLookup, targetProblem } from "./targets.ts";
import { WebhookDeliveryWorker } from "./worker.ts";

describe("webhook targets", () => {
  it("classifies non-public addresses, v4, v6 and v4-mapped", () => {
    for (const ip of [
      "127.0.0.1",
      "10.0.0.1",
      "172.16.5.5",
      "192.168.1.1",
      "169.254.169.254",
      "100.64.0.1",
      "0.0.0.0",
      "224.0.0.1",
      "::1",
      "::",
      "fe80::1",
      "fd00::1",
      "::ffff:127.0.0.1",
      "2002:7f00:1::1", // 6to4 embedding 127.0.0.1
      "2001:0:7f00:1::1", // Teredo
      "not-an-ip",
    ]) {
      expect(isNonPublicAddress(ip), ip).toBe(true);
    }
    for (const ip of ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8", "172.32.0.1"])
      expect(isNonPublicAddress(ip), ip).toBe(false);
  });

  it("refuses bad URLs statically, and admits private http targets only when allowed", () => {
    expect(targetProblem("not a url", false)).toMatch(/valid URL/);
    expect(targetProblem("http://hooks.example.com", false)).toMatch(/https/);
    expect(targetProblem("https://user:pw@hooks.example.com", false)).toMatch(/credentials/);
    expect(targetProblem("https://localhost:8443/x", false)).toMatch(/loopback/);
    expect(targetProblem("https://[fe80::1]/x", false)).toMatch(/link-local/);
    expect(targetProblem("https://hooks.example.com/x", false)).toBeNull();
    expect(targetProblem("http://127.0.0.1:9/x", true)).toBeNull();
    expect(targetProblem("ftp://127.0.0.1/x", true)).toMatch(/https/);
  });

  it("refuses a hostname that resolves to a non-public address at connect time", async () => {
    const err = await new Promise<NodeJS.ErrnoException | null>((resolve) => guardedLookup("localhost", {}, (e) => resolve(e)));
    expect(err?.code).toBe("EWEBHOOKTARGET");
  });

  it("never sends to a loopback receiver unless allowed", async () => {
    let hits = 0;
    const server = createServer((_req, res) => {
      hits++;
      res.writeHead(204).end();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    const common = {
      db: null as never,
      clock: { now: () => Date.now() },
      scheduler: new ManualScheduler(),
      logger: { info() {}, warn() {} },
    };
    try {
      const secret = newSigningSecret();
      const strict = new WebhookDeliveryWorker({ ...common, allowPrivateTargets: false });
      expect(await strict.attempt(`https://127.0.0.1:${port}/x`, secret, "wevt_1", "{}")).toMatchObject({
        ok: false,
        error: expect.stringMatching(/refused/),
      });
      expect(await strict.attempt(`http://127.0.0.1:${port}/x`, secret, "wevt_1", "{}")).toMatchObject({
        ok: false,
        error: expect.stringMatching(/https/),
      });
      expect(await strict.attempt(`https://localhost:${port}/x`, secret, "wevt_1", "{}")).toMatchObject({ ok: false });
      expect(hits).toBe(0);
      const open = new WebhookDeliveryWorker({ ...common, allowPrivateTargets: true });
      expect(await open.attempt(`http://127.0.0.1:${port}/x`, secret, "wevt_1", "{}")).toEqual({ ok: true });
      expect(hits).toBe(1);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

describe("webhook signatures", () => {
  it("verify with the standard-webhooks library the SDK uses, and fail with another secret", () => {
    const secret = newSigningSecret();
    const body = JSON.stringify({ type: "event", id: "wevt_1" });
    const headers = signDelivery(secret, "wevt_1", Date.now(), body);
    expect(new Webhook(secret).verify(body, { ...headers })).toEqual({ type: "event", id: "wevt_1" });
    expect(() => new Webhook(newSigningSecret()).verify(body, { ...headers })).toThrow();
    expect(() => new Webhook(secret).verify(`${body} `, { ...headers })).toThrow();
    expect(() => signDelivery("nope", "x", 0, "")).toThrow(/whsec_/);
  });
});
