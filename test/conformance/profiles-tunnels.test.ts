/**
 * User profiles and MCP tunnels through the official SDK, on both storage
 * backends: every method. What a self-hosted server cannot honour (hosted
 * enrollment and action pages, a tunnel edge and its tokens) answers the
 * SDK's BadRequestError with `error_code: not_supported_self_hosted` and a
 * message saying why (docs/api.md). The CA fixture is a self-signed test CA
 * (openssl, P-256, CA:TRUE); the leaf fixture is CA:FALSE.
 */
import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import Anthropic from "@anthropic-ai/sdk";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { errorOf } from "../support/sdk-errors.ts";
import { startTestServer, type TestServer } from "../support/server.ts";

const CA_PEM = readFileSync(new URL("fixtures/tunnel-ca.pem", import.meta.url), "utf8");
const LEAF_PEM = readFileSync(new URL("fixtures/tunnel-leaf.pem", import.meta.url), "utf8");

function expectNotHonoured(err: InstanceType<typeof Anthropic.APIError>, why: RegExp): void {
  expect(err).toBeInstanceOf(Anthropic.BadRequestError);
  const body = err.error as { error: { type: string; message: string; details?: { error_code?: string } } };
  expect(body.error.type).toBe("invalid_request_error");
  expect(body.error.details?.error_code).toBe("not_supported_self_hosted");
  expect(body.error.message).toMatch(why);
}

describe.each(BACKENDS)("user profiles and tunnels on %s", (dialect) => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer(dialect);
  });
  afterAll(async () => t?.close());

  it("creates, retrieves, updates, lists and deletes user profiles", async () => {
    const profiles = t.client.beta.userProfiles;
    const ada = await profiles.create({
      name: "Ada",
      external_id: "user-1",
      metadata: { plan: "pro" },
      external_user_details: { country: "GB", entity_type: "individual", onboarded_at: "2026-01-02T03:04:05Z" },
    });
    expect(ada).toMatchObject({
      type: "user_profile",
      name: "Ada",
      external_id: "user-1",
      metadata: { plan: "pro" },
      trust_grants: {},
      access_type: "application",
      external_user_onboarded_at: null,
      external_user_details: { country: "GB", entity_type: "individual", onboarded_at: "2026-01-02T03:04:05.000Z", account_status: null },
    });
    expect(ada.id).toMatch(/^uprof_/);
    expect(await profiles.retrieve(ada.id)).toEqual(ada);
    const bob = await profiles.create({ name: "Bob", access_type: "passthrough" });
    const cy = await profiles.create({});
    expect(cy.name).toBeNull();

    const updated = await profiles.update(ada.id, { name: "Ada L.", external_user_details: { account_status: "active" } });
    expect(updated).toMatchObject({
      name: "Ada L.",
      external_id: "user-1",
      external_user_details: { account_status: "active", country: "GB" },
    });
    expect(await profiles.update(ada.id, {})).toEqual(updated);

    const newest: string[] = [];
    for await (const p of profiles.list({ limit: 2 })) newest.push(p.id);
    expect(newest).toEqual([cy.id, bob.id, ada.id]);
    const oldest = await profiles.list({ order: "asc" });
    expect(oldest.data.map((p) => p.id)).toEqual([ada.id, bob.id, cy.id]);
    const byName = await profiles.list({ order_by: "name", order: "asc" });
    expect(byName.data.map((p) => p.name)).toEqual([null, "Ada L.", "Bob"]);

    expect(await profiles.delete(bob.id)).toEqual({ id: bob.id, type: "user_profile_deleted" });
    expect((await errorOf(profiles.retrieve(bob.id))).status).toBe(404);
    expect((await errorOf(profiles.delete(bob.id))).status).toBe(404);
  });

  it("answers enrollment and action URLs with the reason a self-hosted server has none", async () => {
    const p = await t.client.beta.userProfiles.create({ name: "Dee" });
    expectNotHonoured(await errorOf(t.client.beta.userProfiles.createEnrollmentURL(p.id)), /hosted end-user enrollment page/);
    expectNotHonoured(
      await errorOf(t.client.beta.userProfiles.actionURLs.create(p.id, { action: { type: "enroll_end_user" } })),
      /hosted end-user pages/,
    );
    expect((await errorOf(t.client.beta.userProfiles.createEnrollmentURL("uprof_missing"))).status).toBe(404);
  });

  it("creates, lists, retrieves and archives tunnels and their certificates; refuses tokens", async () => {
    const tunnels = t.client.beta.tunnels;
    const tunnel = await tunnels.create({ display_name: "office" });
    expect(tunnel).toMatchObject({ type: "tunnel", display_name: "office", archived_at: null });
    expect(tunnel.id).toMatch(/^tunl_/);
    expect(tunnel.domain).toMatch(/\.invalid$/);
    expect(await tunnels.retrieve(tunnel.id)).toEqual(tunnel);
    const other = await tunnels.create({});
    expect(other.display_name).toBeNull();

    const cert = await tunnels.certificates.create(tunnel.id, { ca_certificate_pem: CA_PEM });
    const x509 = new X509Certificate(CA_PEM);
    expect(cert).toMatchObject({
      type: "tunnel_certificate",
      tunnel_id: tunnel.id,
      archived_at: null,
      fingerprint: x509.fingerprint256.toLowerCase(),
      expires_at: new Date(x509.validTo).toISOString(),
    });
    expect(await tunnels.certificates.create(tunnel.id, { ca_certificate_pem: CA_PEM })).toEqual(cert);
    expect(await tunnels.certificates.retrieve(cert.id, { tunnel_id: tunnel.id })).toEqual(cert);
    expect((await errorOf(tunnels.certificates.retrieve(cert.id, { tunnel_id: other.id }))).status).toBe(404);
    expect((await tunnels.certificates.list(tunnel.id)).data).toEqual([cert]);
    expect((await errorOf(tunnels.certificates.create(tunnel.id, { ca_certificate_pem: LEAF_PEM }))).status).toBe(400);
    expect((await errorOf(tunnels.certificates.create(tunnel.id, { ca_certificate_pem: "not a pem" }))).status).toBe(400);
    const archivedCert = await tunnels.certificates.archive(cert.id, { tunnel_id: tunnel.id });
    expect(archivedCert.archived_at).not.toBeNull();
    expect(await tunnels.certificates.archive(cert.id, { tunnel_id: tunnel.id })).toEqual(archivedCert);
    expect((await tunnels.certificates.list(tunnel.id)).data).toEqual([]);
    expect((await tunnels.certificates.list(tunnel.id, { include_archived: true })).data).toEqual([archivedCert]);

    expectNotHonoured(await errorOf(tunnels.revealToken(tunnel.id)), /runs no tunnel edge/);
    expectNotHonoured(await errorOf(tunnels.rotateToken(tunnel.id, { reason: "leaked" })), /runs no tunnel edge/);

    const listed: string[] = [];
    for await (const x of tunnels.list({ limit: 1 })) listed.push(x.id);
    expect(listed).toEqual([other.id, tunnel.id]);
    const archived = await tunnels.archive(tunnel.id);
    expect(archived.archived_at).not.toBeNull();
    expect(await tunnels.archive(tunnel.id)).toEqual(archived);
    expect((await tunnels.list()).data.map((x) => x.id)).toEqual([other.id]);
    expect((await tunnels.list({ include_archived: true })).data.map((x) => x.id)).toEqual([other.id, tunnel.id]);
    expect((await errorOf(tunnels.certificates.create(tunnel.id, { ca_certificate_pem: CA_PEM }))).status).toBe(400);
    expect((await errorOf(tunnels.retrieve("tunl_missing"))).status).toBe(404);
  });

  it("answers 404 without the beta header, as the hosted API does", async () => {
    const res = await fetch(`${t.baseURL}/v1/tunnels`, { headers: { "x-api-key": t.apiKey } });
    expect(res.status).toBe(404);
  });
});
