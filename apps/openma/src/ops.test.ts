import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../../../test/support/server.ts";
import { readiness } from "./ops.ts";

const SCRAPE_TOKEN = "scrape-token-0123456789abcdef";

describe("readiness", () => {
  it("names the failing dependency without its reason, and logs the reason", async () => {
    const logged: object[] = [];
    const logger = { info() {}, warn: (obj: object) => logged.push(obj), error() {} };
    const r = readiness(
      {
        database: async () => {},
        blobs: async () => {
          throw new Error("connect ECONNREFUSED 10.0.0.7:9000 (secret-bucket)");
        },
      },
      logger,
    );
    const report = await r.check();
    expect(report).toEqual({ ready: false, status: "not_ready", checks: { database: "ok", blobs: "fail" } });
    expect(JSON.stringify(report)).not.toContain("ECONNREFUSED");
    expect(logged).toEqual([{ check: "blobs", err: "connect ECONNREFUSED 10.0.0.7:9000 (secret-bucket)" }]);
  });

  it("fails a check that does not answer in time", async () => {
    const never = (signal: AbortSignal) =>
      new Promise<void>((_, reject) => signal.addEventListener("abort", () => reject(new Error("aborted"))));
    const r = readiness({ sandbox: never }, { info() {}, warn() {}, error() {} }, 20);
    expect((await r.check()).checks).toEqual({ sandbox: "fail" });
  });

  it("reports draining once told, even with every dependency healthy", async () => {
    const r = readiness({ database: async () => {} }, { info() {}, warn() {}, error() {} });
    expect((await r.check()).status).toBe("ready");
    r.drain();
    expect(await r.check()).toEqual({ ready: false, status: "draining", checks: { database: "ok" } });
  });
});

describe("/ready and /metrics of openma serve", () => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer("sqlite", { OPENMA_METRICS_TOKEN: SCRAPE_TOKEN });
  });
  afterAll(async () => {
    await t?.close();
  });

  it("answers /health and /ready without credentials", async () => {
    expect((await fetch(`${t.baseURL}/health`)).status).toBe(200);
    const ready = await fetch(`${t.baseURL}/ready`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: "ready", checks: { database: "ok", blobs: "ok" } });
  });

  it("serves /metrics to the admin key or the scrape token only", async () => {
    const anonymous = await fetch(`${t.baseURL}/metrics`);
    expect(anonymous.status).toBe(401);
    expect(await anonymous.json()).toMatchObject({ type: "error", error: { type: "authentication_error" } });
    expect((await fetch(`${t.baseURL}/metrics`, { headers: { authorization: "Bearer wrong-token-0123456789" } })).status).toBe(401);
    const byToken = await fetch(`${t.baseURL}/metrics`, { headers: { authorization: `Bearer ${SCRAPE_TOKEN}` } });
    expect(byToken.status).toBe(200);
    expect(byToken.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
    const byKey = await fetch(`${t.baseURL}/metrics`, { headers: { "x-api-key": t.apiKey } });
    expect(byKey.status).toBe(200);
    // The earlier requests are in it, by route pattern; an unmatched path is one series, not one per path.
    await fetch(`${t.baseURL}/no/such/path/123`);
    const body = await byKey.text();
    expect(body).toMatch(/openma_http_requests_total\{method="GET",route="\/ready",status="200"\} 1/);
    const after = await (await fetch(`${t.baseURL}/metrics`, { headers: { "x-api-key": t.apiKey } })).text();
    expect(after).toMatch(/openma_http_requests_total\{method="GET",route="unmatched",status="404"\} 1/);
    expect(after).not.toContain("/no/such/path");
  });

  it("refuses a scrape token the server does not have as an API key", async () => {
    const res = await t
      .clientWith(SCRAPE_TOKEN)
      .beta.agents.list()
      .catch((e: unknown) => e);
    expect((res as { status?: number }).status).toBe(401);
  });
});

describe("OPENMA_METRICS=off", () => {
  it("has no /metrics route", async () => {
    const t = await startTestServer("sqlite", { OPENMA_METRICS: "off" });
    try {
      expect((await fetch(`${t.baseURL}/metrics`, { headers: { "x-api-key": t.apiKey } })).status).toBe(404);
      expect((await fetch(`${t.baseURL}/ready`)).status).toBe(200);
    } finally {
      await t.close();
    }
  });
});
