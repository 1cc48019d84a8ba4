import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../../../../test/support/server.ts";
import { SessionCredentials, sameServerUrl, substitutePlaceholders } from "./vault-credentials.ts";

describe("substitutePlaceholders", () => {
  const subs = [{ name: "API_KEY", value: "s3cr$&t" }];
  it(`replaces \${NAME} and $NAME at a name boundary, literally`, () => {
    expect(substitutePlaceholders(`Bearer \${API_KEY}`, subs)).toBe("Bearer s3cr$&t");
    expect(substitutePlaceholders("Bearer $API_KEY", subs)).toBe("Bearer s3cr$&t");
    expect(substitutePlaceholders(`$API_KEY_2 \${API_KEY_2}`, subs)).toBe(`$API_KEY_2 \${API_KEY_2}`);
    expect(substitutePlaceholders(`\${OTHER}`, subs)).toBe(`\${OTHER}`);
    expect(substitutePlaceholders("x", [{ name: "bad name(", value: "v" }])).toBe("x");
  });
});

describe("sameServerUrl", () => {
  it("compares normalised URLs", () => {
    expect(sameServerUrl("https://MCP.example.com:443/mcp/", "https://mcp.example.com/mcp")).toBe(true);
    expect(sameServerUrl("https://mcp.example.com/mcp", "https://mcp.example.com/other")).toBe(false);
    expect(sameServerUrl("http://mcp.example.com/mcp", "https://mcp.example.com/mcp")).toBe(false);
    expect(sameServerUrl("not a url", "not a url")).toBe(false);
  });
});

describe.each(BACKENDS)("SessionCredentials on %s", (dialect) => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer(dialect);
  });
  afterAll(async () => t?.close());

  const envVar = (name: string, value: string, networking: unknown, header = true) =>
    ({
      type: "environment_variable",
      secret_name: name,
      secret_value: value,
      injection_location: { header, body: !header },
      networking,
    }) as never;

  it("loads active credentials in vault_ids order and picks the first match", async () => {
    const v1 = await t.client.beta.vaults.create({ display_name: "one" });
    const v2 = await t.client.beta.vaults.create({ display_name: "two" });
    await t.client.beta.vaults.credentials.create(v2.id, {
      auth: { type: "static_bearer", mcp_server_url: "https://m.example/mcp", token: "tok-two" },
    });
    await t.client.beta.vaults.credentials.create(v1.id, {
      auth: { type: "static_bearer", mcp_server_url: "https://m.example/mcp", token: "tok-one" },
    });
    const archived = await t.client.beta.vaults.credentials.create(v1.id, {
      auth: { type: "static_bearer", mcp_server_url: "https://gone.example/mcp", token: "tok-archived" },
    });
    await t.client.beta.vaults.credentials.archive(archived.id, { vault_id: v1.id });

    const creds = await SessionCredentials.load(t.store.storage, [v2.id, v1.id, "nonexistent", "bad\u0000id"], {
      secrets: t.secrets,
    });
    expect(creds.credentials.map((c) => c.vaultId)).toEqual([v2.id, v1.id]);
    const match = creds.mcpCredentialFor("https://m.example/mcp")!;
    expect(await creds.bearerToken(match)).toBe("tok-two");
    expect(creds.mcpCredentialFor("https://gone.example/mcp")).toBeUndefined();
    expect(creds.redactor.redact("tok-one tok-two tok-archived")).toBe("[redacted credential] [redacted credential] tok-archived");
    expect(
      (await SessionCredentials.load(t.store.storage, [v1.id, v2.id], { secrets: t.secrets })).credentials.map((c) => c.vaultId),
    ).toEqual([v1.id, v2.id]);
    expect((await SessionCredentials.load(t.store.storage, [], { secrets: t.secrets })).credentials).toEqual([]);
  });

  it("offers header substitutions only for matching hosts and header injection", async () => {
    const vault = await t.client.beta.vaults.create({ display_name: "env" });
    const { credentials } = t.client.beta.vaults;
    await credentials.create(vault.id, { auth: envVar("WILD", "wild-value", { type: "limited", allowed_hosts: ["*.example.com"] }) });
    await credentials.create(vault.id, { auth: envVar("ANY", "any-value", { type: "unrestricted" }) });
    await credentials.create(vault.id, { auth: envVar("BODY", "body-value", { type: "unrestricted" }, false) });
    const creds = await SessionCredentials.load(t.store.storage, [vault.id], { secrets: t.secrets });
    expect(creds.headerSubstitutions("api.example.com")).toEqual([
      { name: "WILD", value: "wild-value" },
      { name: "ANY", value: "any-value" },
    ]);
    expect(creds.headerSubstitutions("example.com")).toEqual([{ name: "ANY", value: "any-value" }]);
  });
});
