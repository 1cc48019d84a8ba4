/** Vaults and credentials through the official SDK, on both storage backends. */
import Anthropic from "@anthropic-ai/sdk";
import { type ApiDeps, createApp, type Logger } from "@openma/api";
import { hashSecret, newId, openVaultSecret, systemClock } from "@openma/storage";
import { BACKENDS, openTestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

const SECRETS = {
  token: "bearer-secret-token-1111",
  access: "oauth-access-secret-2222",
  refresh: "oauth-refresh-secret-3333",
  client: "oauth-client-secret-4444",
  value: "env-secret-value-5555",
  rotated: "rotated-secret-6666",
};

function expectNoSecrets(value: unknown): void {
  const text = JSON.stringify(value);
  for (const secret of Object.values(SECRETS)) expect(text).not.toContain(secret);
}

async function errorOf(p: Promise<unknown>): Promise<InstanceType<typeof Anthropic.APIError>> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(Anthropic.APIError);
  return err as InstanceType<typeof Anthropic.APIError>;
}

describe.each(BACKENDS)("vaults on %s", (dialect) => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer(dialect);
  });
  afterAll(async () => t?.close());

  it("creates, retrieves, updates, lists, archives and deletes vaults", async () => {
    const vaults = t.client.beta.vaults;
    const created = await vaults.create({ display_name: "prod", metadata: { team: "a" } });
    expect(created).toMatchObject({ type: "vault", display_name: "prod", metadata: { team: "a" }, archived_at: null });
    expect(created.id).toMatch(/^vlt_/);
    expect(await vaults.retrieve(created.id)).toEqual(created);

    const updated = await vaults.update(created.id, { display_name: "production", metadata: { team: null, tier: "gold" } });
    expect(updated).toMatchObject({ display_name: "production", metadata: { tier: "gold" } });
    expect(await vaults.update(created.id, {})).toEqual(updated);

    const archived = await vaults.archive(created.id);
    expect(archived.archived_at).not.toBeNull();
    expect((await vaults.archive(created.id)).archived_at).toBe(archived.archived_at);
    const live: string[] = [];
    for await (const v of vaults.list()) live.push(v.id);
    expect(live).not.toContain(created.id);
    const all: string[] = [];
    for await (const v of vaults.list({ include_archived: true })) all.push(v.id);
    expect(all).toContain(created.id);
    expect((await errorOf(vaults.update(created.id, { display_name: "x" }))).status).toBe(400);

    expect(await vaults.delete(created.id)).toEqual({ id: created.id, type: "vault_deleted" });
    expect(await errorOf(vaults.retrieve(created.id))).toBeInstanceOf(Anthropic.NotFoundError);
    expect(await errorOf(vaults.delete(created.id))).toBeInstanceOf(Anthropic.NotFoundError);
  });

  it("auto-paginates vaults", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await t.client.beta.vaults.create({ display_name: `p${i}` })).id);
    const seen: string[] = [];
    for await (const v of t.client.beta.vaults.list({ limit: 2 })) seen.push(v.id);
    for (const id of ids) expect(seen).toContain(id);
    expect(new Set(seen).size).toBe(seen.length);
  });

  it("stores every credential variant without ever returning its secrets", async () => {
    const vault = await t.client.beta.vaults.create({ display_name: "creds" });
    const creds = t.client.beta.vaults.credentials;
    const bearer = await creds.create(vault.id, {
      display_name: "docs",
      auth: { type: "static_bearer", mcp_server_url: "https://mcp.example.test/sse", token: SECRETS.token },
    });
    expect(bearer).toMatchObject({
      type: "vault_credential",
      vault_id: vault.id,
      display_name: "docs",
      auth: { type: "static_bearer", mcp_server_url: "https://mcp.example.test/sse" },
      archived_at: null,
    });
    expect(bearer.id).toMatch(/^vcrd_/);

    const future = new Date(Date.now() + 3_600_000).toISOString();
    const oauth = await creds.create(vault.id, {
      auth: {
        type: "mcp_oauth",
        mcp_server_url: "https://mcp.example.test/oauth",
        access_token: SECRETS.access,
        expires_at: future,
        refresh: {
          client_id: "client-1",
          refresh_token: SECRETS.refresh,
          token_endpoint: "https://auth.example.test/token",
          token_endpoint_auth: { type: "client_secret_basic", client_secret: SECRETS.client },
          scope: "read",
        },
      },
    });
    expect(oauth.auth).toEqual({
      type: "mcp_oauth",
      mcp_server_url: "https://mcp.example.test/oauth",
      expires_at: future,
      refresh: {
        client_id: "client-1",
        token_endpoint: "https://auth.example.test/token",
        token_endpoint_auth: { type: "client_secret_basic" },
        resource: null,
        scope: "read",
      },
    });

    const env = await creds.create(vault.id, {
      auth: {
        type: "environment_variable",
        secret_name: "GITHUB_TOKEN",
        secret_value: SECRETS.value,
        networking: { type: "limited", allowed_hosts: ["api.github.com", "*.example.com", "192.0.2.1"] },
      },
    });
    expect(env.auth).toEqual({
      type: "environment_variable",
      secret_name: "GITHUB_TOKEN",
      injection_location: { header: true, body: false },
      networking: { type: "limited", allowed_hosts: ["api.github.com", "*.example.com", "192.0.2.1"] },
    });

    const listed = [];
    for await (const c of creds.list(vault.id)) listed.push(c);
    expect(listed.map((c) => c.id).sort()).toEqual([bearer.id, oauth.id, env.id].sort());
    const retrieved = await Promise.all(listed.map((c) => creds.retrieve(c.id, { vault_id: vault.id })));
    expectNoSecrets([bearer, oauth, env, listed, retrieved]);

    // The secrets are stored, in the secret column only.
    const rows = await t.store.storage.db
      .selectFrom("vault_credentials")
      .select(["id", "body", "secret"])
      .where("vault_id", "=", vault.id)
      .execute();
    // Sealed at rest (see vault-secrets-at-rest.test.ts): opened here with the server's key.
    const opened = (id: string) => JSON.parse(openVaultSecret(t.secrets, id, rows.find((r) => r.id === id)!.secret));
    expectNoSecrets(rows.map((r) => r.secret));
    expect(opened(bearer.id)).toEqual({ token: SECRETS.token });
    expect(opened(oauth.id)).toEqual({
      access_token: SECRETS.access,
      refresh_token: SECRETS.refresh,
      client_secret: SECRETS.client,
    });
    expectNoSecrets(rows.map((r) => r.body));
  });

  it("updates credentials: rotates secrets, keeps immutable fields, refuses type changes", async () => {
    const vault = await t.client.beta.vaults.create({ display_name: "rotate" });
    const creds = t.client.beta.vaults.credentials;
    const bearer = await creds.create(vault.id, {
      auth: { type: "static_bearer", mcp_server_url: "https://mcp.example.test/a", token: SECRETS.token },
    });
    const rotated = await creds.update(bearer.id, {
      vault_id: vault.id,
      display_name: "renamed",
      metadata: { k: "v" },
      auth: { type: "static_bearer", token: SECRETS.rotated },
    });
    expect(rotated).toMatchObject({ display_name: "renamed", metadata: { k: "v" }, auth: bearer.auth });
    expectNoSecrets(rotated);
    const row = await t.store.storage.db
      .selectFrom("vault_credentials")
      .select("secret")
      .where("id", "=", bearer.id)
      .executeTakeFirstOrThrow();
    expect(JSON.parse(openVaultSecret(t.secrets, bearer.id, row.secret))).toEqual({ token: SECRETS.rotated });

    const typeChange = await errorOf(creds.update(bearer.id, { vault_id: vault.id, auth: { type: "mcp_oauth", access_token: "x" } }));
    expect(typeChange).toBeInstanceOf(Anthropic.BadRequestError);
    expect(typeChange.message).toContain("auth.type");

    const env = await creds.create(vault.id, {
      auth: { type: "environment_variable", secret_name: "K", secret_value: SECRETS.value, networking: { type: "unrestricted" } },
    });
    const moved = await creds.update(env.id, {
      vault_id: vault.id,
      auth: {
        type: "environment_variable",
        injection_location: { body: true },
        networking: { type: "limited", allowed_hosts: ["a.test"] },
      },
    });
    expect(moved.auth).toMatchObject({ injection_location: { header: true, body: true }, networking: { type: "limited" } });
    const noLocation = await errorOf(
      creds.update(env.id, {
        vault_id: vault.id,
        auth: { type: "environment_variable", injection_location: { header: false, body: false } },
      }),
    );
    expect(noLocation.message).toContain("injection_location");

    const archived = await creds.archive(bearer.id, { vault_id: vault.id });
    expect(archived.archived_at).not.toBeNull();
    expect((await errorOf(creds.update(bearer.id, { vault_id: vault.id, display_name: "again" }))).status).toBe(400);
    const active = [];
    for await (const c of creds.list(vault.id)) active.push(c.id);
    expect(active).toEqual([env.id]);
    const everything = [];
    for await (const c of creds.list(vault.id, { include_archived: true })) everything.push(c.id);
    expect(everything.sort()).toEqual([bearer.id, env.id].sort());

    expect(await creds.delete(env.id, { vault_id: vault.id })).toEqual({ id: env.id, type: "vault_credential_deleted" });
    expect(await errorOf(creds.retrieve(env.id, { vault_id: vault.id }))).toBeInstanceOf(Anthropic.NotFoundError);
  });

  it("answers mcp_oauth_validate with status unknown and a reason", async () => {
    const vault = await t.client.beta.vaults.create({ display_name: "validate" });
    const creds = t.client.beta.vaults.credentials;
    const oauth = await creds.create(vault.id, {
      auth: { type: "mcp_oauth", mcp_server_url: "https://mcp.example.test/o", access_token: SECRETS.access },
    });
    const result = await creds.mcpOAuthValidate(oauth.id, { vault_id: vault.id });
    expect(result).toMatchObject({
      type: "vault_credential_validation",
      credential_id: oauth.id,
      vault_id: vault.id,
      status: "unknown",
      has_refresh_token: false,
      refresh: null,
      mcp_probe: null,
    });
    expect((result as unknown as { status_reason: string }).status_reason).toMatch(/does not probe/);
    expectNoSecrets(result);
    const bearer = await creds.create(vault.id, {
      auth: { type: "static_bearer", mcp_server_url: "https://m.test/x", token: SECRETS.token },
    });
    expect((await errorOf(creds.mcpOAuthValidate(bearer.id, { vault_id: vault.id }))).status).toBe(400);
  });

  it("archiving a vault archives its credentials; an archived vault takes no new ones", async () => {
    const vault = await t.client.beta.vaults.create({ display_name: "cascade" });
    const creds = t.client.beta.vaults.credentials;
    const c1 = await creds.create(vault.id, { auth: { type: "static_bearer", mcp_server_url: "https://m.test/1", token: SECRETS.token } });
    await t.client.beta.vaults.archive(vault.id);
    expect((await creds.retrieve(c1.id, { vault_id: vault.id })).archived_at).not.toBeNull();
    const refused = await errorOf(
      creds.create(vault.id, { auth: { type: "static_bearer", mcp_server_url: "https://m.test/2", token: "t" } }),
    );
    expect(refused.status).toBe(400);
    await t.client.beta.vaults.delete(vault.id);
    const left = await t.store.storage.db.selectFrom("vault_credentials").select("id").where("vault_id", "=", vault.id).execute();
    expect(left).toEqual([]);
  });

  it("validates input with 400s naming the field, and 404s unknown ids", async () => {
    const vaults = t.client.beta.vaults;
    const creds = vaults.credentials;
    expect((await errorOf(vaults.create({ display_name: "" }))).message).toContain("body.display_name");
    const vault = await vaults.create({ display_name: "v" });
    const cases: Array<[unknown, string]> = [
      [{ type: "static_bearer", mcp_server_url: "not a url", token: "t" }, "auth.mcp_server_url"],
      [{ type: "static_bearer", mcp_server_url: "https://m.test", token: "" }, "auth.token"],
      [{ type: "mcp_oauth", mcp_server_url: "https://m.test", access_token: "a", expires_at: "2001-01-01T00:00:00Z" }, "auth.expires_at"],
      [{ type: "environment_variable", secret_name: "1BAD", secret_value: "v", networking: { type: "unrestricted" } }, "auth.secret_name"],
      [
        {
          type: "environment_variable",
          secret_name: "OK",
          secret_value: "v",
          networking: { type: "limited", allowed_hosts: ["https://x.test/path"] },
        },
        "allowed_hosts",
      ],
      [{ type: "carrier_pigeon" }, "auth"],
    ];
    for (const [auth, field] of cases) {
      const err = await errorOf(creds.create(vault.id, { auth } as never));
      expect(err.status, field).toBe(400);
      expect(err.message).toContain(field);
    }
    expect(await errorOf(vaults.retrieve("vlt_missing"))).toBeInstanceOf(Anthropic.NotFoundError);
    expect(await errorOf(creds.list("vlt_missing"))).toBeInstanceOf(Anthropic.NotFoundError);
    expect(await errorOf(creds.retrieve("vcrd_missing", { vault_id: vault.id }))).toBeInstanceOf(Anthropic.NotFoundError);
    expect((await errorOf(vaults.list({ limit: 0 }))).status).toBe(400);
  });

  it("accepts only API keys", async () => {
    const envKey = "sk-ant-oat01-vaults-test-key";
    await t.store.storage.db
      .insertInto("environment_keys")
      .values({ key_hash: hashSecret(envKey), environment_id: "env_vaults", created_at: new Date().toISOString(), revoked_at: null })
      .execute();
    const err = await errorOf(t.clientWith(envKey).beta.vaults.list());
    expect(err).toBeInstanceOf(Anthropic.PermissionDeniedError);
  });
});

describe("vault secrets in logs", () => {
  it("never logs credential secrets, on success or on refusal", async () => {
    const store = await openTestStorage("sqlite");
    const lines: string[] = [];
    const logger: Logger = {
      info: (obj, msg) => lines.push(JSON.stringify([obj, msg])),
      warn: (obj, msg) => lines.push(JSON.stringify([obj, msg])),
      error: (obj, msg) => lines.push(JSON.stringify([obj, msg])),
    };
    const key = "sk-ant-api03-log-test";
    const deps: ApiDeps = {
      storage: store.storage,
      clock: systemClock,
      ids: newId,
      logger,
      configuredApiKeyHashes: new Set([hashSecret(key)]),
      workTtlSeconds: 60,
      sse: { keepAliveMs: 15_000 },
    };
    try {
      const app = createApp(deps);
      const headers = { authorization: `Bearer ${key}`, "content-type": "application/json" };
      const vault = await (
        await app.request("/v1/vaults", { method: "POST", headers, body: JSON.stringify({ display_name: "l" }) })
      ).json();
      const ok = await app.request(`/v1/vaults/${vault.id}/credentials`, {
        method: "POST",
        headers,
        body: JSON.stringify({ auth: { type: "static_bearer", mcp_server_url: "https://m.test", token: SECRETS.token } }),
      });
      expect(ok.status).toBe(200);
      const bad = await app.request(`/v1/vaults/${vault.id}/credentials`, {
        method: "POST",
        headers,
        body: JSON.stringify({ auth: { type: "static_bearer", mcp_server_url: 5, token: SECRETS.rotated } }),
      });
      expect(bad.status).toBe(400);
      expectNoSecrets(await bad.json());
      expect(lines.length).toBeGreaterThanOrEqual(3);
      expectNoSecrets(lines);
      expect(lines.join("\n")).not.toContain(key);
    } finally {
      await store.cleanup();
    }
  });
});
