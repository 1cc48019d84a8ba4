/**
 * Vault credential secrets at rest, on both storage backends: what the
 * official SDK creates is sealed in `vault_credentials.secret` (the key in the
 * data dir opens it, nothing else in the row or the logs holds the secret),
 * the harness still injects it (MCP bearer token, web_fetch header), a
 * tampered or moved value disables only its credential with a clear error,
 * and plaintext rows written before encryption are re-sealed at start-up,
 * idempotently, and moved to a newly configured key.
 */
import { randomBytes } from "node:crypto";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import type { Logger } from "@openma/api";
import { createMcpExecutors, McpServerError } from "@openma/harness/server-tools/mcp";
import {
  type McpTestServer,
  startMcpTestServer,
  startWebTestServer,
  toolContext,
  type WebTestServer,
} from "@openma/harness/server-tools/testing";
import { CredentialUnreadableError, SessionCredentials } from "@openma/harness/server-tools/vault-credentials";
import { WebFetchExecutor } from "@openma/harness/server-tools/web-fetch";
import { SecretBox, SecretBoxError, secretKeyId, vaultSecretAad } from "@openma/storage";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../apps/openma/src/config.ts";
import { type RunningServer, startServer } from "../../apps/openma/src/server.ts";
import { TEST_API_KEY } from "../support/server.ts";

const MCP_TOKEN = "at-rest-mcp-token-6c1d0a";
const SECRETS = {
  env: "at-rest-env-value-91f3b2",
  access: "at-rest-oauth-access-0b7e44",
  refresh: "at-rest-oauth-refresh-d2a9c5",
  client: "at-rest-oauth-client-secret-7e18f0",
  legacy: "at-rest-legacy-plaintext-3a5c99",
};
const ALL_SECRETS = [MCP_TOKEN, ...Object.values(SECRETS)];

const LOOPBACK = {
  resolve: async (host: string) => {
    if (host !== "allowed.test" && host !== "other.test") throw Object.assign(new Error("ENOTFOUND"), { code: "ENOTFOUND" });
    return [{ address: "127.0.0.1", family: 4 as const }];
  },
  privateAddressAllowlist: ["127.0.0.1/32"],
};

describe.each(BACKENDS)("vault secrets at rest on %s", (dialect) => {
  let store: TestStorage;
  let server: RunningServer | undefined;
  let client: Anthropic;
  let mcp: McpTestServer;
  let web: WebTestServer;
  const logs: string[] = [];
  const logger: Logger = {
    info: (obj, msg) => logs.push(JSON.stringify(["info", obj, msg])),
    warn: (obj, msg) => logs.push(JSON.stringify(["warn", obj, msg])),
    error: (obj, msg) => logs.push(JSON.stringify(["error", obj, msg])),
  };

  /** (Re)starts `openma serve` on the same storage and data dir: each start runs the re-seal step. */
  async function restart(env: Record<string, string> = {}): Promise<void> {
    await server?.close();
    const config = loadConfig({
      PORT: "0",
      OPENMA_DATA_DIR: store.dataDir,
      OPENMA_API_KEY: TEST_API_KEY,
      LOG_LEVEL: "silent",
      OPENMA_BRAIN: "off",
      ...env,
    });
    server = await startServer(config, { storage: store.storage, logger });
    client = new Anthropic({ baseURL: server.url, apiKey: TEST_API_KEY, maxRetries: 0 });
  }

  const keyFile = () => join(store.dataDir, "secret-key");
  const fileBox = () => SecretBox.fromBase64(readFileSync(keyFile(), "utf8"));
  const rawSecret = async (id: string) =>
    (await store.storage.db.selectFrom("vault_credentials").select("secret").where("id", "=", id).executeTakeFirstOrThrow()).secret;
  const setRawSecret = (id: string, secret: string) =>
    store.storage.db.updateTable("vault_credentials").set({ secret }).where("id", "=", id).execute();

  async function mcpAgent() {
    return client.beta.agents.create({
      name: "at rest",
      model: "claude-sonnet-4-5",
      mcp_servers: [{ type: "url", name: "notes", url: mcp.url }],
      tools: [{ type: "mcp_toolset", mcp_server_name: "notes", default_config: { permission_policy: { type: "always_allow" } } } as never],
    });
  }

  /** Lists the MCP server's tools with the vault's credentials: resolves, or rejects with the executor's error. */
  async function listMcpTools(vaultId: string, secrets: SecretBox = fileBox()): Promise<unknown> {
    const agent = await mcpAgent();
    const m = createMcpExecutors(agent);
    try {
      return await m.executors[0]!.listTools(toolContext({ storage: store.storage, secrets }, agent, { vaultIds: [vaultId] }));
    } finally {
      await m.close();
    }
  }

  async function webFetch(vaultId: string, host: string) {
    const agent = await client.beta.agents.create({
      name: "fetcher",
      model: "claude-sonnet-4-5",
      tools: [{ type: "agent_toolset_20260401", configs: [{ name: "web_fetch", enabled: true }] } as never],
    });
    const input = { url: `http://${host}:${web.port}/headers`, headers: { "x-api-key": `\${API_KEY}` } };
    const ctx = toolContext({ storage: store.storage, secrets: fileBox() }, agent, { vaultIds: [vaultId] });
    return new WebFetchExecutor(LOOPBACK).execute({ name: "web_fetch", input, toolUseId: "t1" }, ctx, new AbortController().signal);
  }

  function expectCleanLogs(extra: string[] = []): void {
    const text = logs.join("\n");
    for (const s of [...ALL_SECRETS, readFileSync(keyFile(), "utf8").trim(), ...extra]) expect(text).not.toContain(s);
  }

  beforeAll(async () => {
    store = await openTestStorage(dialect);
    mcp = await startMcpTestServer({ validToken: MCP_TOKEN });
    web = await startWebTestServer();
    await restart();
  });
  afterAll(async () => {
    await server?.close();
    await web?.close();
    await mcp?.close();
    await store?.cleanup();
  });

  it("seals what the SDK creates: the column holds no secret, and the data dir's key opens it to the secret", async () => {
    const vault = await client.beta.vaults.create({ display_name: "sealed" });
    const creds = client.beta.vaults.credentials;
    const bearer = await creds.create(vault.id, { auth: { type: "static_bearer", mcp_server_url: mcp.url, token: MCP_TOKEN } });
    const env = await creds.create(vault.id, {
      auth: { type: "environment_variable", secret_name: "API_KEY", secret_value: SECRETS.env, networking: { type: "unrestricted" } },
    });
    const oauth = await creds.create(vault.id, {
      auth: {
        type: "mcp_oauth",
        mcp_server_url: "https://oauth.example.test/mcp",
        access_token: SECRETS.access,
        refresh: {
          client_id: "c",
          refresh_token: SECRETS.refresh,
          token_endpoint: "https://oauth.example.test/token",
          token_endpoint_auth: { type: "client_secret_post", client_secret: SECRETS.client },
        },
      },
    });
    expect(statSync(keyFile()).mode & 0o777).toBe(0o600);
    const box = fileBox();
    const rows = await store.storage.db.selectFrom("vault_credentials").selectAll().where("vault_id", "=", vault.id).execute();
    expect(rows).toHaveLength(3);
    for (const row of rows) {
      expect(row.secret.startsWith(`openma-sb:v1:${box.currentKeyId}:`)).toBe(true);
      for (const s of ALL_SECRETS) expect(JSON.stringify(row)).not.toContain(s);
    }
    const opened = (id: string) => JSON.parse(box.open(rows.find((r) => r.id === id)!.secret, vaultSecretAad(id)));
    expect(opened(bearer.id)).toEqual({ token: MCP_TOKEN });
    expect(opened(env.id)).toEqual({ secret_value: SECRETS.env });
    expect(opened(oauth.id)).toEqual({ access_token: SECRETS.access, refresh_token: SECRETS.refresh, client_secret: SECRETS.client });
    // Bound to its row: the same ciphertext under another credential's id does not open.
    expect(() => box.open(rows.find((r) => r.id === bearer.id)!.secret, vaultSecretAad(env.id))).toThrow(SecretBoxError);
    // Another key does not open it either.
    expect(() => new SecretBox(randomBytes(32)).open(rows[0]!.secret, vaultSecretAad(rows[0]!.id))).toThrow(SecretBoxError);

    // The API reads it back (mcp_oauth_validate looks at the sealed refresh token) and an unchanged update rewrites nothing.
    expect((await creds.mcpOAuthValidate(oauth.id, { vault_id: vault.id })).has_refresh_token).toBe(true);
    const before = await rawSecret(bearer.id);
    await creds.update(bearer.id, { vault_id: vault.id, display_name: "renamed" });
    await creds.update(bearer.id, { vault_id: vault.id, auth: { type: "static_bearer", token: MCP_TOKEN } });
    expect(await rawSecret(bearer.id)).toBe(before);
    expectCleanLogs(rows.map((r) => r.secret));
  });

  it("the harness injects sealed secrets: the MCP bearer token and the web_fetch header", async () => {
    const vault = await client.beta.vaults.create({ display_name: "inject" });
    await client.beta.vaults.credentials.create(vault.id, { auth: { type: "static_bearer", mcp_server_url: mcp.url, token: MCP_TOKEN } });
    await client.beta.vaults.credentials.create(vault.id, {
      auth: {
        type: "environment_variable",
        secret_name: "API_KEY",
        secret_value: SECRETS.env,
        networking: { type: "limited", allowed_hosts: ["allowed.test"] },
      },
    });
    const seen = mcp.authorizations.length;
    const tools = (await listMcpTools(vault.id)) as Array<{ name: string }>;
    expect(tools.map((x) => x.name)).toContain("notes__echo");
    expect(mcp.authorizations.slice(seen).length).toBeGreaterThan(0);
    expect(mcp.authorizations.slice(seen).every((a) => a === `Bearer ${MCP_TOKEN}`)).toBe(true);

    const result = await webFetch(vault.id, "allowed.test");
    expect(result.isError).toBe(false);
    expect(web.requests.at(-1)!.headers["x-api-key"]).toBe(SECRETS.env);
    expect(result.content[0]!.text).not.toContain(SECRETS.env);
  });

  it("a tampered or moved secret makes only its credential unusable, with a clear error and nothing leaked", async () => {
    const vault = await client.beta.vaults.create({ display_name: "broken" });
    const creds = client.beta.vaults.credentials;
    const bearer = await creds.create(vault.id, { auth: { type: "static_bearer", mcp_server_url: mcp.url, token: MCP_TOKEN } });
    const env = await creds.create(vault.id, {
      auth: {
        type: "environment_variable",
        secret_name: "API_KEY",
        secret_value: SECRETS.env,
        networking: { type: "limited", allowed_hosts: ["allowed.test"] },
      },
    });
    // The env credential's ciphertext moved into the bearer's row; the env row's own ciphertext altered by one character.
    const envSealed = await rawSecret(env.id);
    await setRawSecret(bearer.id, envSealed);
    const tampered = envSealed.slice(0, -3) + (envSealed.at(-3) === "A" ? "B" : "A") + envSealed.slice(-2);
    await setRawSecret(env.id, tampered);

    const mcpError = await listMcpTools(vault.id).then(
      () => null,
      (e: unknown) => e,
    );
    expect(mcpError).toBeInstanceOf(McpServerError);
    const sessionError = (mcpError as McpServerError).toSessionError();
    expect(sessionError).toMatchObject({ type: "mcp_authentication_failed_error", mcp_server_name: "notes" });
    expect(sessionError.message).toContain(`vault credential ${bearer.id} cannot be decrypted`);
    expect(sessionError.message).toContain("authentication_failed");

    const fetched = await webFetch(vault.id, "allowed.test");
    expect(fetched.isError).toBe(true);
    // The model is told which credential is broken and why, never the stored value.
    expect(fetched.content).toEqual([
      { type: "text", text: expect.stringMatching(/vault credential vcrd_\w+ cannot be decrypted .*\(authentication_failed\)/) },
    ]);
    const requests = web.requests.length;
    // Hosts the broken credential does not cover are unaffected.
    expect((await webFetch(vault.id, "other.test")).isError).toBe(false);
    expect(web.requests.length).toBe(requests + 1);

    const loaded = await SessionCredentials.load(store.storage, [vault.id]);
    expect(loaded.credentials.map((c) => c.unreadable !== null)).toEqual([true, true]);
    await expect(loaded.bearerToken(loaded.credentials[0]!)).rejects.toBeInstanceOf(CredentialUnreadableError);

    // Through the API: metadata still updates; a secret rotation cannot merge into an unreadable secret and says why.
    await creds.update(bearer.id, { vault_id: vault.id, metadata: { state: "broken" } });
    const rotate = await creds.update(bearer.id, { vault_id: vault.id, auth: { type: "static_bearer", token: "new-token-000" } }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(rotate).toBeInstanceOf(Anthropic.InternalServerError);
    expect((rotate as InstanceType<typeof Anthropic.APIError>).message).toContain(`vault credential ${bearer.id} cannot be decrypted`);

    // A restart leaves them as they are (they carry the current key id, so there is nothing to re-seal).
    await restart();
    expect(await rawSecret(bearer.id)).toBe(envSealed);
    expect(await rawSecret(env.id)).toBe(tampered);
    for (const text of [JSON.stringify([mcpError, sessionError, fetched, rotate]), logs.join("\n")]) {
      for (const s of [...ALL_SECRETS, envSealed, tampered]) expect(text).not.toContain(s);
    }
    // Removed so later start-ups in this file report only what they test.
    await client.beta.vaults.credentials.delete(bearer.id, { vault_id: vault.id });
    await client.beta.vaults.credentials.delete(env.id, { vault_id: vault.id });
  });

  it("a key this server does not hold makes the credential unusable, and start-up names it without re-sealing it", async () => {
    const vault = await client.beta.vaults.create({ display_name: "other key" });
    const credential = await client.beta.vaults.credentials.create(vault.id, {
      auth: { type: "static_bearer", mcp_server_url: mcp.url, token: MCP_TOKEN },
    });
    const loaded = await SessionCredentials.load(store.storage, [vault.id], { secrets: new SecretBox(randomBytes(32)) });
    expect(loaded.credentials[0]!.unreadable).toMatch(/cannot be decrypted .*\(unknown_key\)/);
    const err = await loaded.bearerToken(loaded.credentials[0]!).then(
      () => null,
      (e: unknown) => e as Error,
    );
    expect(err).toBeInstanceOf(CredentialUnreadableError);
    expect(err?.message).not.toContain(MCP_TOKEN);

    // A row sealed under a key the server was never given: the start-up re-seal reports it by id and leaves it.
    const foreign = new SecretBox(randomBytes(32)).seal(JSON.stringify({ token: MCP_TOKEN }), vaultSecretAad(credential.id));
    await setRawSecret(credential.id, foreign);
    const logged = logs.length;
    await restart();
    expect(await rawSecret(credential.id)).toBe(foreign);
    const warning = logs.slice(logged).find((l) => l.includes("no configured key opens")) ?? "";
    expect(warning).toContain(credential.id);
    expect(warning).not.toContain(foreign);
    expect((await listMcpTools(vault.id).catch((e: McpServerError) => e.toSessionError())) as object).toMatchObject({
      type: "mcp_authentication_failed_error",
      message: expect.stringContaining("(unknown_key)"),
    });
    await client.beta.vaults.credentials.delete(credential.id, { vault_id: vault.id });
  });

  it("re-seals plaintext rows written before encryption at start-up, idempotently, then moves everything to a configured key", async () => {
    const vault = await client.beta.vaults.create({ display_name: "legacy" });
    const creds = client.beta.vaults.credentials;
    const bearer = await creds.create(vault.id, { auth: { type: "static_bearer", mcp_server_url: mcp.url, token: "placeholder-token" } });
    const oauth = await creds.create(vault.id, {
      auth: {
        type: "mcp_oauth",
        mcp_server_url: "https://oauth.example.test/legacy",
        access_token: "placeholder-access",
        refresh: {
          client_id: "c",
          refresh_token: "placeholder-refresh",
          token_endpoint: "https://oauth.example.test/token",
          token_endpoint_auth: { type: "none" },
        },
      },
    });
    // What a server before this change wrote: the secret JSON itself.
    const legacyBearer = JSON.stringify({ token: MCP_TOKEN });
    const legacyOauth = JSON.stringify({ access_token: SECRETS.legacy, refresh_token: SECRETS.refresh });
    await setRawSecret(bearer.id, legacyBearer);
    await setRawSecret(oauth.id, legacyOauth);

    // Still readable as they are, by the harness and the API.
    const seen = mcp.authorizations.length;
    await listMcpTools(vault.id);
    expect(mcp.authorizations.slice(seen).every((a) => a === `Bearer ${MCP_TOKEN}`)).toBe(true);
    expect((await creds.mcpOAuthValidate(oauth.id, { vault_id: vault.id })).has_refresh_token).toBe(true);

    const logged = logs.length;
    await restart();
    const box = fileBox();
    const sealedBearer = await rawSecret(bearer.id);
    const sealedOauth = await rawSecret(oauth.id);
    expect(sealedBearer.startsWith(`openma-sb:v1:${box.currentKeyId}:`)).toBe(true);
    expect(sealedOauth.startsWith(`openma-sb:v1:${box.currentKeyId}:`)).toBe(true);
    expect(box.open(sealedBearer, vaultSecretAad(bearer.id))).toBe(legacyBearer);
    expect(box.open(sealedOauth, vaultSecretAad(oauth.id))).toBe(legacyOauth);
    expect(logs.slice(logged).some((l) => l.includes("sealed vault secrets at rest") && l.includes('"resealed":2'))).toBe(true);
    const seenAfter = mcp.authorizations.length;
    await listMcpTools(vault.id);
    expect(mcp.authorizations.slice(seenAfter).every((a) => a === `Bearer ${MCP_TOKEN}`)).toBe(true);

    // Idempotent: a second start-up rewrites nothing.
    await restart();
    expect(await rawSecret(bearer.id)).toBe(sealedBearer);
    expect(await rawSecret(oauth.id)).toBe(sealedOauth);

    // Rotation: a configured key seals from now on; the data dir's key still opens, and start-up re-seals with the new one.
    const newKey = randomBytes(32);
    await restart({ OPENMA_SECRET_KEY: newKey.toString("base64") });
    const rotated = new SecretBox(newKey);
    expect(rotated.currentKeyId).toBe(secretKeyId(newKey));
    const all = await store.storage.db.selectFrom("vault_credentials").select(["id", "secret"]).execute();
    expect(all.length).toBeGreaterThan(2);
    for (const row of all) {
      expect(row.secret.startsWith(`openma-sb:v1:${rotated.currentKeyId}:`)).toBe(true);
      expect(() => rotated.open(row.secret, vaultSecretAad(row.id))).not.toThrow();
    }
    expect(rotated.open(await rawSecret(bearer.id), vaultSecretAad(bearer.id))).toBe(legacyBearer);
    const seenRotated = mcp.authorizations.length;
    await listMcpTools(vault.id, rotated);
    expect(mcp.authorizations.slice(seenRotated).every((a) => a === `Bearer ${MCP_TOKEN}`)).toBe(true);
    expectCleanLogs([newKey.toString("base64"), sealedBearer, sealedOauth]);
  });
});
