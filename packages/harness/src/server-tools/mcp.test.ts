/**
 * MCP executors against a real MCP server built with @modelcontextprotocol/sdk
 * (streamable HTTP on a local port). Agents and vault credentials are created
 * through the official SDK on the real server, so the executors read exactly
 * what the API stores, on both backends.
 */
import { openVaultSecret } from "@openma/storage";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../../../../test/support/server.ts";
import { createMcpExecutors, exposedToolName, type McpExecutors, McpServerError, mcpContentToText } from "./mcp.ts";
import { closedPort, type McpTestServer, startMcpTestServer, toolContext } from "./testing.ts";

const VALID_TOKEN = "mcp-valid-token-7f3a9c";
const REFRESH_TOKEN = "mcp-refresh-token-51be02";
const HOUR = 3600_000;

async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => {
      throw new Error("expected a rejection");
    },
    (e: unknown) => e,
  );
}

describe("exposedToolName", () => {
  it("joins server and tool with __ and keeps the Messages API alphabet", () => {
    expect(exposedToolName("notes", "echo", new Set())).toBe("notes__echo");
    expect(exposedToolName("my server", "get.item/v2", new Set())).toBe("my_server__get_item_v2");
  });

  it("hashes names that are too long or already taken, and never repeats one", () => {
    const long = exposedToolName("s".repeat(40), "t".repeat(40), new Set());
    expect(long).toMatch(/^[A-Za-z0-9_-]{1,64}$/);
    expect(long).toHaveLength(64);
    const taken = new Set(["a_b__x"]);
    const other = exposedToolName("a.b", "x", taken);
    expect(other).not.toBe("a_b__x");
    expect(other).toMatch(/^a_b__x_[0-9a-f]{8}$/);
    taken.add(other);
    expect(exposedToolName("a.b", "x", taken)).toMatch(/^a_b__x_[0-9a-f]{8}_1$/);
  });
});

describe("mcpContentToText", () => {
  it("keeps text and describes other content types", () => {
    const texts = mcpContentToText({
      content: [
        { type: "text", text: "hello" },
        { type: "image", data: "aGVsbG8=", mimeType: "image/png" },
        { type: "resource", resource: { uri: "file:///a.txt", text: "inside" } },
        { type: "resource", resource: { uri: "file:///b.bin", blob: "AAAA", mimeType: "application/octet-stream" } },
        { type: "resource_link", uri: "https://x/y", name: "y" },
      ],
    });
    expect(texts).toEqual([
      "hello",
      "[image content: image/png, about 6 bytes, not shown]",
      "[resource file:///a.txt]\ninside",
      "[binary resource file:///b.bin: application/octet-stream, about 3 bytes, not shown]",
      "[resource link: y https://x/y]",
    ]);
    expect(mcpContentToText({ content: [], structuredContent: { a: 1 } })).toEqual(['{"a":1}']);
  });
});

describe.each(BACKENDS)("MCP executors on %s", (dialect) => {
  let t: TestServer;
  let mcp: McpTestServer;
  const opened: McpExecutors[] = [];

  beforeAll(async () => {
    t = await startTestServer(dialect);
    mcp = await startMcpTestServer({ validToken: VALID_TOKEN, refreshToken: REFRESH_TOKEN });
  });
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((m) => m.close()));
  });
  afterAll(async () => {
    await mcp?.close();
    await t?.close();
  });

  async function agentFor(url: string, configs: Array<Record<string, unknown>> = []) {
    return t.client.beta.agents.create({
      name: "mcp agent",
      model: "claude-sonnet-4-5",
      mcp_servers: [{ type: "url", name: "notes", url }],
      tools: [
        {
          type: "mcp_toolset",
          mcp_server_name: "notes",
          default_config: { permission_policy: { type: "always_allow" } },
          configs,
        } as never,
      ],
    });
  }

  async function vaultWith(auth: Record<string, unknown>): Promise<string> {
    const vault = await t.client.beta.vaults.create({ display_name: "mcp" });
    await t.client.beta.vaults.credentials.create(vault.id, { auth: auth as never });
    return vault.id;
  }

  function executorsFor(agent: unknown, options: Parameters<typeof createMcpExecutors>[1] = {}) {
    const m = createMcpExecutors(agent, options);
    opened.push(m);
    return m;
  }

  it("lists enabled tools under server-prefixed names and hides disabled ones", async () => {
    const agent = await agentFor(mcp.url, [
      { name: "hang", enabled: false },
      { name: "private_note", permission_policy: { type: "always_ask" } },
    ]);
    const m = executorsFor(agent);
    expect(m.executors.map((e) => e.id)).toEqual(["notes"]);
    const ctx = toolContext({ storage: t.store.storage, secrets: t.secrets }, agent);
    const tools = await m.executors[0]!.listTools(ctx);
    expect(tools.map((d) => d.name).sort()).toEqual(["notes__echo", "notes__private_note"]);
    const echo = tools.find((d) => d.name === "notes__echo")!;
    expect(echo.description).toBe("[MCP server notes] Echoes the text back");
    expect(echo.input_schema).toMatchObject({ type: "object", properties: { text: { type: "string" } }, required: ["text"] });
    expect(m.executors[0]!.handles("notes__echo")).toBe(true);
    expect(m.executors[0]!.handles("notes__hang")).toBe(false);
    expect(m.executors[0]!.handles("echo")).toBe(false);
    expect(m.binding("notes__private_note")).toEqual({
      exposedName: "notes__private_note",
      serverName: "notes",
      toolName: "private_note",
      permissionPolicy: { type: "always_ask" },
    });
    expect(m.binding("notes__echo")?.permissionPolicy).toEqual({ type: "always_allow" });
  });

  it("calls a tool and converts its result to text", async () => {
    const agent = await agentFor(mcp.url);
    const m = executorsFor(agent);
    const ctx = toolContext({ storage: t.store.storage, secrets: t.secrets }, agent);
    await m.executors[0]!.listTools(ctx);
    const result = await m.executors[0]!.execute(
      { name: "notes__echo", input: { text: "hi" }, toolUseId: "t1" },
      ctx,
      new AbortController().signal,
    );
    expect(result).toEqual({
      isError: false,
      content: [
        { type: "text", text: "echo: hi" },
        { type: "text", text: "[image content: image/png, about 12 bytes, not shown]" },
      ],
    });
  });

  it("returns tool-level failures as error results", async () => {
    const agent = await agentFor(mcp.url);
    const m = executorsFor(agent);
    const ctx = toolContext({ storage: t.store.storage, secrets: t.secrets }, agent);
    const [exec] = m.executors;
    await exec!.listTools(ctx);
    const signal = new AbortController().signal;
    const unauthorized = await exec!.execute({ name: "notes__private_note", input: {}, toolUseId: "t1" }, ctx, signal);
    expect(unauthorized).toEqual({ isError: true, content: [{ type: "text", text: "unauthorized: a bearer token is required" }] });
    const badInput = await exec!.execute({ name: "notes__echo", input: { text: 5 }, toolUseId: "t2" }, ctx, signal);
    expect(badInput.isError).toBe(true);
    expect((await exec!.execute({ name: "notes__echo", input: [1], toolUseId: "t3" }, ctx, signal)).isError).toBe(true);
    expect((await exec!.execute({ name: "notes__nope", input: {}, toolUseId: "t4" }, ctx, signal)).content[0]!.text).toContain(
      "Unknown MCP tool",
    );
  });

  it("sends the bearer token of a static_bearer credential matching the server URL", async () => {
    const agent = await agentFor(mcp.url);
    const vaultId = await vaultWith({ type: "static_bearer", mcp_server_url: `${mcp.url}/`, token: VALID_TOKEN });
    const m = executorsFor(agent);
    const ctx = toolContext({ storage: t.store.storage, secrets: t.secrets }, agent, { vaultIds: [vaultId] });
    const before = mcp.authorizations.length;
    await m.executors[0]!.listTools(ctx);
    const result = await m.executors[0]!.execute(
      { name: "notes__private_note", input: {}, toolUseId: "t1" },
      ctx,
      new AbortController().signal,
    );
    expect(result).toEqual({
      isError: false,
      content: [{ type: "text", text: "private note for test-client, token [redacted credential]" }],
    });
    const seen = mcp.authorizations.slice(before);
    expect(seen.length).toBeGreaterThan(0);
    expect(seen.every((a) => a === `Bearer ${VALID_TOKEN}`)).toBe(true);
  });

  it("fails with mcp_authentication_failed_error when the server rejects the token", async () => {
    const agent = await agentFor(mcp.url);
    const vaultId = await vaultWith({ type: "static_bearer", mcp_server_url: mcp.url, token: "wrong-token-0000" });
    const m = executorsFor(agent);
    const err = await rejection(
      m.executors[0]!.listTools(toolContext({ storage: t.store.storage, secrets: t.secrets }, agent, { vaultIds: [vaultId] })),
    );
    expect(err).toBeInstanceOf(McpServerError);
    const session = (err as McpServerError).toSessionError();
    expect(session).toEqual({
      type: "mcp_authentication_failed_error",
      message: "MCP server notes authentication failed while connecting (HTTP 401)",
      mcp_server_name: "notes",
      retry_status: { type: "terminal" },
    });
  });

  it("ignores credentials of archived vaults and other servers", async () => {
    const agent = await agentFor(mcp.url);
    const archived = await vaultWith({ type: "static_bearer", mcp_server_url: mcp.url, token: "wrong-token-1111" });
    await t.client.beta.vaults.archive(archived);
    const elsewhere = await vaultWith({ type: "static_bearer", mcp_server_url: "https://other.example/mcp", token: "wrong-token-2222" });
    const m = executorsFor(agent);
    const before = mcp.authorizations.length;
    await m.executors[0]!.listTools(
      toolContext({ storage: t.store.storage, secrets: t.secrets }, agent, { vaultIds: [archived, elsewhere] }),
    );
    expect(mcp.authorizations.slice(before).every((a) => a === null)).toBe(true);
  });

  it("fails with mcp_connection_failed_error when nothing listens", async () => {
    const port = await closedPort();
    const agent = await agentFor(`http://127.0.0.1:${port}/mcp`);
    const m = executorsFor(agent);
    const err = await rejection(m.executors[0]!.listTools(toolContext({ storage: t.store.storage, secrets: t.secrets }, agent)));
    expect(err).toBeInstanceOf(McpServerError);
    expect((err as McpServerError).errorType).toBe("mcp_connection_failed_error");
    expect((err as McpServerError).mcpServerName).toBe("notes");
    expect((err as McpServerError).message).toBe("MCP server notes failed while connecting (ECONNREFUSED)");
  });

  it("honours the caller's abort signal during a call", async () => {
    const agent = await agentFor(mcp.url);
    const m = executorsFor(agent);
    const ctx = toolContext({ storage: t.store.storage, secrets: t.secrets }, agent);
    await m.executors[0]!.listTools(ctx);
    const controller = new AbortController();
    const call = m.executors[0]!.execute({ name: "notes__hang", input: {}, toolUseId: "t1" }, ctx, controller.signal);
    const settled = rejection(call);
    await mcp.hangStarted;
    const reason = new Error("user.interrupt");
    controller.abort(reason);
    expect(await settled).toBe(reason);
    const already = new AbortController();
    already.abort(reason);
    expect(
      await rejection(m.executors[0]!.execute({ name: "notes__echo", input: { text: "x" }, toolUseId: "t2" }, ctx, already.signal)),
    ).toBe(reason);
  });

  it("refreshes an expired mcp_oauth token with the stored refresh config and stores the result", async () => {
    const agent = await agentFor(mcp.url);
    const vault = await t.client.beta.vaults.create({ display_name: "oauth" });
    const credential = await t.client.beta.vaults.credentials.create(vault.id, {
      auth: {
        type: "mcp_oauth",
        mcp_server_url: mcp.url,
        access_token: "expired-access-token-9d1",
        expires_at: new Date(Date.now() + HOUR).toISOString(),
        refresh: {
          client_id: "client-1",
          refresh_token: REFRESH_TOKEN,
          token_endpoint: mcp.tokenEndpoint,
          token_endpoint_auth: { type: "none" },
          scope: "notes.read",
        },
      },
    });
    const m = executorsFor(agent, { now: () => Date.now() + 2 * HOUR });
    const before = mcp.authorizations.length;
    const tokenCalls = mcp.tokenRequests.length;
    await m.executors[0]!.listTools(toolContext({ storage: t.store.storage, secrets: t.secrets }, agent, { vaultIds: [vault.id] }));
    const form = mcp.tokenRequests[tokenCalls]!;
    expect(Object.fromEntries(form)).toEqual({
      grant_type: "refresh_token",
      refresh_token: REFRESH_TOKEN,
      client_id: "client-1",
      scope: "notes.read",
    });
    expect(mcp.authorizations.slice(before).every((a) => a === `Bearer ${VALID_TOKEN}`)).toBe(true);
    const row = await t.store.storage.db
      .selectFrom("vault_credentials")
      .selectAll()
      .where("id", "=", credential.id)
      .executeTakeFirstOrThrow();
    // Persisted sealed, like the API writes it.
    expect(row.secret).not.toContain(VALID_TOKEN);
    expect(JSON.parse(openVaultSecret(t.secrets, credential.id, row.secret))).toMatchObject({
      access_token: VALID_TOKEN,
      refresh_token: `${REFRESH_TOKEN}-next`,
    });
    const stored = await t.client.beta.vaults.credentials.retrieve(credential.id, { vault_id: vault.id });
    // The new expiry (now + expires_in by the executor's clock) is visible through the API; the tokens are not.
    const expiresAt = stored.auth.type === "mcp_oauth" ? Date.parse(stored.auth.expires_at ?? "") : Number.NaN;
    expect(expiresAt).toBeGreaterThan(Date.now() + 2.5 * HOUR);
    expect(JSON.stringify(stored)).not.toContain(VALID_TOKEN);
  });

  it("refreshes once when the server rejects an unexpired mcp_oauth token", async () => {
    const agent = await agentFor(mcp.url);
    const vaultId = await vaultWith({
      type: "mcp_oauth",
      mcp_server_url: mcp.url,
      access_token: "revoked-access-token-4c2",
      refresh: {
        client_id: "client-2",
        refresh_token: REFRESH_TOKEN,
        token_endpoint: mcp.tokenEndpoint,
        token_endpoint_auth: { type: "none" },
      },
    });
    const m = executorsFor(agent);
    const before = mcp.authorizations.length;
    const tools = await m.executors[0]!.listTools(
      toolContext({ storage: t.store.storage, secrets: t.secrets }, agent, { vaultIds: [vaultId] }),
    );
    expect(tools.length).toBe(3);
    const seen = mcp.authorizations.slice(before);
    expect(seen[0]).toBe("Bearer revoked-access-token-4c2");
    expect(seen.at(-1)).toBe(`Bearer ${VALID_TOKEN}`);
  });

  it("fails with mcp_authentication_failed_error when an expired token cannot be refreshed", async () => {
    const agent = await agentFor(mcp.url);
    const noRefresh = await vaultWith({
      type: "mcp_oauth",
      mcp_server_url: mcp.url,
      access_token: "old-access-token-aa1",
      expires_at: new Date(Date.now() + HOUR).toISOString(),
    });
    const later = () => Date.now() + 2 * HOUR;
    const err1 = await rejection(
      executorsFor(agent, { now: later }).executors[0]!.listTools(
        toolContext({ storage: t.store.storage, secrets: t.secrets }, agent, { vaultIds: [noRefresh] }),
      ),
    );
    expect((err1 as McpServerError).errorType).toBe("mcp_authentication_failed_error");
    expect((err1 as McpServerError).message).toContain("has expired and it has no refresh configuration");

    const badRefresh = await vaultWith({
      type: "mcp_oauth",
      mcp_server_url: mcp.url,
      access_token: "old-access-token-bb2",
      expires_at: new Date(Date.now() + HOUR).toISOString(),
      refresh: {
        client_id: "c",
        refresh_token: "not-the-refresh-token",
        token_endpoint: mcp.tokenEndpoint,
        token_endpoint_auth: { type: "none" },
      },
    });
    const err2 = await rejection(
      executorsFor(agent, { now: later }).executors[0]!.listTools(
        toolContext({ storage: t.store.storage, secrets: t.secrets }, agent, { vaultIds: [badRefresh] }),
      ),
    );
    expect((err2 as McpServerError).errorType).toBe("mcp_authentication_failed_error");
    expect((err2 as McpServerError).message).toContain("token endpoint answered HTTP 400");
  });

  it("gives every server its own executor and names, and refuses use after close or by another session", async () => {
    const agent = await t.client.beta.agents.create({
      name: "two servers",
      model: "claude-sonnet-4-5",
      mcp_servers: [
        { type: "url", name: "a", url: mcp.url },
        { type: "url", name: "b", url: mcp.url },
        { type: "url", name: "unused", url: mcp.url },
      ],
      tools: [{ type: "mcp_toolset", mcp_server_name: "a" } as never, { type: "mcp_toolset", mcp_server_name: "b" } as never],
    });
    const m = executorsFor(agent);
    expect(m.executors.map((e) => e.id)).toEqual(["a", "b"]);
    const ctx = toolContext({ storage: t.store.storage, secrets: t.secrets }, agent);
    const a = await m.executors[0]!.listTools(ctx);
    const b = await m.executors[1]!.listTools(ctx);
    expect(a.map((d) => d.name)).toContain("a__echo");
    expect(b.map((d) => d.name)).toContain("b__echo");
    expect(m.executors[0]!.handles("b__echo")).toBe(false);
    expect(await rejection(m.executors[0]!.listTools({ ...ctx, sessionId: "sesn_other" }))).toBeInstanceOf(Error);
    await m.close();
    expect(await rejection(m.executors[0]!.listTools(ctx))).toBeInstanceOf(Error);
  });
});
