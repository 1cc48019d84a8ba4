/**
 * Credential values never leave the executors: every result, error message,
 * session.error object and console line produced while the servers echo
 * tokens back is searched for every secret. The same run proves the secrets
 * did reach the hosts they were meant for, so an executor that simply never
 * sent them would fail here too.
 */
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startTestServer, type TestServer } from "../../../../test/support/server.ts";
import { createMcpExecutors, McpServerError } from "./mcp.ts";
import { type McpTestServer, startMcpTestServer, startWebTestServer, toolContext, type WebTestServer } from "./testing.ts";
import { credentialHostErrors } from "./vault-credentials.ts";
import { WebFetchExecutor } from "./web-fetch.ts";

const SECRETS = {
  valid: "leak-valid-bearer-6b1d2e",
  wrong: "leak-wrong-bearer-0c9f44",
  staleAccess: "leak-stale-access-3e7a10",
  refresh: "leak-refresh-token-92fd3a",
  envValue: "leak-env-secret-value-5d81",
  clientSecret: "leak-client-secret-a4c7b2",
};

describe.each(BACKENDS)("no credential leaks on %s", (dialect) => {
  let t: TestServer;
  let mcp: McpTestServer;
  let web: WebTestServer;

  beforeAll(async () => {
    t = await startTestServer(dialect);
    mcp = await startMcpTestServer({ validToken: SECRETS.valid, refreshToken: SECRETS.refresh });
    web = await startWebTestServer();
  });
  afterAll(async () => {
    await mcp?.close();
    await web?.close();
    await t?.close();
  });

  it("keeps every secret out of results, errors and logs", async () => {
    const outputs: string[] = [];
    const logged: string[] = [];
    const spies = (["log", "info", "warn", "error", "debug"] as const).map((m) =>
      vi.spyOn(console, m).mockImplementation((...args: unknown[]) => {
        logged.push(args.map((a) => (a instanceof Error ? `${a.message}\n${a.stack}` : String(a))).join(" "));
      }),
    );
    const record = (value: unknown) => outputs.push(JSON.stringify(value));
    const recordError = (err: unknown) => {
      outputs.push(String(err), (err as Error).stack ?? "");
      if (err instanceof McpServerError) record(err.toSessionError());
    };

    try {
      const vaults = t.client.beta.vaults;
      const good = await vaults.create({ display_name: "good" });
      await vaults.credentials.create(good.id, { auth: { type: "static_bearer", mcp_server_url: mcp.url, token: SECRETS.valid } });
      await vaults.credentials.create(good.id, {
        auth: {
          type: "environment_variable",
          secret_name: "API_KEY",
          secret_value: SECRETS.envValue,
          networking: { type: "limited", allowed_hosts: ["allowed.test", "unlisted.example"] },
        },
      });
      const bad = await vaults.create({ display_name: "bad" });
      await vaults.credentials.create(bad.id, { auth: { type: "static_bearer", mcp_server_url: mcp.url, token: SECRETS.wrong } });
      const oauth = await vaults.create({ display_name: "oauth" });
      const oauthCredential = await vaults.credentials.create(oauth.id, {
        auth: {
          type: "mcp_oauth",
          mcp_server_url: mcp.url,
          access_token: SECRETS.staleAccess,
          refresh: {
            client_id: "client",
            refresh_token: SECRETS.refresh,
            token_endpoint: mcp.tokenEndpoint,
            token_endpoint_auth: { type: "client_secret_post", client_secret: SECRETS.clientSecret },
          },
        },
      });

      const agent = await t.client.beta.agents.create({
        name: "leaky",
        model: "claude-sonnet-4-5",
        mcp_servers: [{ type: "url", name: "notes", url: mcp.url }],
        tools: [{ type: "mcp_toolset", mcp_server_name: "notes" } as never, { type: "agent_toolset_20260401" } as never],
      });
      const environment = await t.client.beta.environments.create({
        name: "limited",
        config: { type: "cloud", networking: { type: "limited", allowed_hosts: ["allowed.test"] } },
      });
      const signal = new AbortController().signal;

      // MCP with a valid bearer: the server echoes the token inside the tool result.
      for (const vaultId of [good.id, oauth.id]) {
        const m = createMcpExecutors(agent);
        const ctx = toolContext({ storage: t.store.storage, secrets: t.secrets }, agent, { environment, vaultIds: [vaultId] });
        record(await m.executors[0]!.listTools(ctx));
        record(await m.executors[0]!.execute({ name: "notes__private_note", input: {}, toolUseId: "a" }, ctx, signal));
        await m.close();
      }
      // MCP with a wrong bearer: the server's 401 body echoes the Authorization header.
      const m = createMcpExecutors(agent);
      await m.executors[0]!.listTools(
        toolContext({ storage: t.store.storage, secrets: t.secrets }, agent, { environment, vaultIds: [bad.id] }),
      ).then(record, recordError);
      await m.close();

      // web_fetch: the echo server returns the injected header; a redirect and a refusal carry the placeholder.
      const fetcher = new WebFetchExecutor({
        resolve: async (host) => (host.endsWith(".test") ? [{ address: "127.0.0.1", family: 4 }] : []),
        privateAddressAllowlist: ["127.0.0.1/32"],
      });
      const ctx = toolContext({ storage: t.store.storage, secrets: t.secrets }, agent, { environment, vaultIds: [good.id] });
      const headers = { "x-api-key": `\${API_KEY}`, authorization: "Bearer $API_KEY" };
      for (const url of [
        `http://allowed.test:${web.port}/headers`,
        `http://allowed.test:${web.port}/headers?k=%24%7BAPI_KEY%7D`,
        `http://allowed.test:${web.port}/redirect?to=${encodeURIComponent(`http://blocked.test:${web.port}/headers`)}`,
        `http://blocked.test:${web.port}/headers`,
      ]) {
        record(await fetcher.execute({ name: "web_fetch", input: { url, headers }, toolUseId: "w" }, ctx, signal).catch(recordError));
      }
      record(await credentialHostErrors({ storage: t.store.storage, secrets: t.secrets, vaultIds: [good.id], environment }));

      // The secrets did travel where they belong.
      expect(mcp.authorizations).toContain(`Bearer ${SECRETS.valid}`);
      expect(mcp.authorizations).toContain(`Bearer ${SECRETS.wrong}`);
      expect(mcp.tokenRequests.some((f) => f.get("client_secret") === SECRETS.clientSecret)).toBe(true);
      expect(web.requests.some((r) => r.headers["x-api-key"] === SECRETS.envValue)).toBe(true);
      expect(outputs.some((o) => o.includes("[redacted credential]"))).toBe(true);
      expect(outputs.some((o) => o.includes("mcp_authentication_failed_error"))).toBe(true);
      expect(outputs.some((o) => o.includes("credential_host_unreachable_error"))).toBe(true);

      // Stored bodies (what the API returns) stay free of secrets after a refresh rewrote them.
      const bodies = await t.store.storage.db.selectFrom("vault_credentials").select("body").execute();
      const refreshed = await vaults.credentials.retrieve(oauthCredential.id, { vault_id: oauth.id });
      const everything = [...outputs, ...logged, ...bodies.map((b) => b.body), JSON.stringify(refreshed)].join("\n");
      for (const [name, secret] of Object.entries(SECRETS)) expect(everything.includes(secret), name).toBe(false);
      expect(everything.includes(`${SECRETS.refresh}-next`), "rotated refresh token").toBe(false);
    } finally {
      for (const spy of spies) spy.mockRestore();
    }
  });
});
