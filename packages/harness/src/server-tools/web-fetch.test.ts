/**
 * web_fetch against a local HTTP server. Names resolve through an injected
 * resolver (so `allowed.test`, `other.test` … reach the local server) while
 * the executor still applies its own address checks to every answer.
 * Agents, environments and vault credentials come from the real API.
 */
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../../../../test/support/server.ts";
import { startWebTestServer, toolContext, type WebTestServer } from "./testing.ts";
import { credentialHostErrors } from "./vault-credentials.ts";
import { htmlToText, type ResolvedAddress, WebFetchExecutor, type WebFetchOptions, webFetchConfig } from "./web-fetch.ts";

const SECRET = "env-secret-value-83e1f0";

const DNS: Record<string, ResolvedAddress[]> = {
  "allowed.test": [{ address: "127.0.0.1", family: 4 }],
  "api.allowed.test": [{ address: "127.0.0.1", family: 4 }],
  "evil-allowed.test": [{ address: "127.0.0.1", family: 4 }],
  "other.test": [{ address: "127.0.0.1", family: 4 }],
  "blocked.test": [{ address: "127.0.0.1", family: 4 }],
  "internal.test": [{ address: "10.1.2.3", family: 4 }],
  "mixed.test": [
    { address: "93.184.216.34", family: 4 },
    { address: "192.168.1.1", family: 4 },
  ],
  "metadata.test": [{ address: "::ffff:169.254.169.254", family: 6 }],
};

async function resolve(host: string): Promise<ResolvedAddress[]> {
  const found = DNS[host];
  if (!found) throw Object.assign(new Error(`ENOTFOUND ${host}`), { code: "ENOTFOUND" });
  return found;
}

const LOOPBACK_ALLOWED: WebFetchOptions = { resolve, privateAddressAllowlist: ["127.0.0.1/32"] };

describe("htmlToText", () => {
  it("keeps readable text and structure, drops scripts and styles", () => {
    const page = htmlToText(
      "<html><head><title>T &amp; x</title><style>p{}</style></head><body><h2>Head</h2><script>alert(1)</script>" +
        "<p>a&nbsp;b &#x41;&#66;</p><ul><li>one</li></ul><a href='https://e.com/'>link</a><!-- hidden --></body></html>",
    );
    expect(page.title).toBe("T & x");
    expect(page.text).toBe("# Head\n\na b AB\n\n- one\nlink (https://e.com/)");
  });
});

describe("webFetchConfig", () => {
  it("reads the toolset config and defaults", () => {
    expect(webFetchConfig({ tools: [] }).enabled).toBe(false);
    expect(webFetchConfig({ tools: [{ type: "agent_toolset_20260401", default_config: { enabled: true }, configs: [] }] }).enabled).toBe(
      true,
    );
    const cfg = webFetchConfig({
      tools: [
        {
          type: "agent_toolset_20260401",
          configs: [{ name: "web_fetch", enabled: true, blocked_domains: ["x.com"], max_content_tokens: 1e12 }],
        },
      ],
    });
    expect(cfg).toEqual({ enabled: true, allowedDomains: null, blockedDomains: ["x.com"], maxContentTokens: 1_000_000 });
    // An unreadable entry never widens access: the tool is off.
    expect(
      webFetchConfig({ tools: [{ type: "agent_toolset_20260401", configs: [{ name: "web_fetch", blocked_domains: "x" }] }] }).enabled,
    ).toBe(false);
  });
});

describe.each(BACKENDS)("web_fetch on %s", (dialect) => {
  let t: TestServer;
  let web: WebTestServer;
  let limitedEnv: unknown;
  let openEnv: unknown;

  beforeAll(async () => {
    t = await startTestServer(dialect);
    web = await startWebTestServer();
    limitedEnv = await t.client.beta.environments.create({
      name: "limited",
      config: { type: "cloud", networking: { type: "limited", allowed_hosts: ["allowed.test", "*.allowed.test", "other.test"] } },
    });
    openEnv = await t.client.beta.environments.create({ name: "open", config: { type: "cloud", networking: { type: "unrestricted" } } });
  });
  afterAll(async () => {
    await web?.close();
    await t?.close();
  });

  async function agentWith(config: Record<string, unknown> = {}) {
    return t.client.beta.agents.create({
      name: "fetcher",
      model: "claude-sonnet-4-5",
      tools: [{ type: "agent_toolset_20260401", configs: [{ name: "web_fetch", ...config }] } as never],
    });
  }

  async function fetchWith(
    options: WebFetchOptions,
    input: unknown,
    ctx: { agent?: unknown; environment?: unknown; vaultIds?: string[] } = {},
  ) {
    const agent = ctx.agent ?? (await agentWith());
    const context = toolContext({ storage: t.store.storage, secrets: t.secrets }, agent, {
      environment: ctx.environment ?? limitedEnv,
      vaultIds: ctx.vaultIds ?? [],
    });
    return new WebFetchExecutor(options).execute({ name: "web_fetch", input, toolUseId: "t1" }, context, new AbortController().signal);
  }

  const url = (host: string, path: string) => `http://${host}:${web.port}${path}`;
  const hits = (path: string) => web.requests.filter((r) => r.path === path).length;

  it("is offered only when the agent enables it", async () => {
    const exec = new WebFetchExecutor(LOOPBACK_ALLOWED);
    expect(exec.handles("web_fetch")).toBe(true);
    expect(
      (await exec.listTools(toolContext({ storage: t.store.storage, secrets: t.secrets }, await agentWith()))).map((d) => d.name),
    ).toEqual(["web_fetch"]);
    expect(
      await exec.listTools(toolContext({ storage: t.store.storage, secrets: t.secrets }, await agentWith({ enabled: false }))),
    ).toEqual([]);
    const off = await fetchWith(LOOPBACK_ALLOWED, { url: url("allowed.test", "/text") }, { agent: await agentWith({ enabled: false }) });
    expect(off).toEqual({ isError: true, content: [{ type: "text", text: "web_fetch is not enabled for this agent" }] });
  });

  it("fetches an allowed host and turns HTML into readable text", async () => {
    const result = await fetchWith(LOOPBACK_ALLOWED, { url: url("allowed.test", "/page") });
    expect(result.isError).toBe(false);
    const text = result.content[0]!.text;
    expect(text).toContain(`URL: ${url("allowed.test", "/page")}`);
    expect(text).toContain("Status: 200 OK");
    expect(text).toContain("Title: Test & Page");
    expect(text).toContain("# Hello\n\nFirst para <ok>\n\n- one\n- two\n\nSee the docs (https://example.com/docs).");
    expect(text).not.toContain("var secret");
    expect(text).not.toContain("color:red");
    expect(web.requests.at(-1)!.host).toBe(`allowed.test:${web.port}`);
  });

  it("matches allowed_hosts exactly or by *. wildcard for subdomains only", async () => {
    expect((await fetchWith(LOOPBACK_ALLOWED, { url: url("api.allowed.test", "/text") })).isError).toBe(false);
    const evil = await fetchWith(LOOPBACK_ALLOWED, { url: url("evil-allowed.test", "/text") });
    expect(evil.content[0]!.text).toContain("host evil-allowed.test is not in the environment's networking.allowed_hosts");
  });

  it("refuses a host outside the environment's allowed_hosts without contacting it", async () => {
    const before = web.requests.length;
    const result = await fetchWith(LOOPBACK_ALLOWED, { url: url("blocked.test", "/text") });
    expect(result).toEqual({
      isError: true,
      content: [
        {
          type: "text",
          text: `web_fetch refused http://blocked.test:${web.port}: host blocked.test is not in the environment's networking.allowed_hosts`,
        },
      ],
    });
    expect(web.requests.length).toBe(before);
  });

  it("checks every redirect hop against the policy", async () => {
    const before = hits("/redirect");
    const bad = await fetchWith(LOOPBACK_ALLOWED, {
      url: url("allowed.test", `/redirect?to=${encodeURIComponent(url("blocked.test", "/page"))}`),
    });
    expect(bad.isError).toBe(true);
    expect(bad.content[0]!.text).toContain("host blocked.test is not in the environment's networking.allowed_hosts");
    expect(hits("/redirect")).toBe(before + 1);
    expect(web.requests.some((r) => r.host.startsWith("blocked.test"))).toBe(false);

    const good = await fetchWith(LOOPBACK_ALLOWED, { url: url("allowed.test", "/redirect?to=/text") });
    expect(good.isError).toBe(false);
    expect(good.content[0]!.text).toContain(`URL: ${url("allowed.test", "/text")}`);
    expect(good.content[0]!.text).toContain("plain text body");

    const loops = hits("/loop");
    const loop = await fetchWith(LOOPBACK_ALLOWED, { url: url("allowed.test", "/loop") });
    expect(loop.content[0]!.text).toBe("web_fetch refused: more than 5 redirects");
    expect(hits("/loop")).toBe(loops + 6);

    const scheme = await fetchWith(LOOPBACK_ALLOWED, { url: url("allowed.test", "/redirect?to=file:///etc/passwd") });
    expect(scheme.content[0]!.text).toContain("scheme file is not allowed");
  });

  it("applies the tool's allowed_domains and blocked_domains", async () => {
    const blocked = await agentWith({ blocked_domains: ["allowed.test"] });
    const sub = await fetchWith(LOOPBACK_ALLOWED, { url: url("api.allowed.test", "/text") }, { agent: blocked });
    expect(sub.content[0]!.text).toContain("host api.allowed.test is in web_fetch blocked_domains");
    expect((await fetchWith(LOOPBACK_ALLOWED, { url: url("other.test", "/text") }, { agent: blocked })).isError).toBe(false);

    const only = await agentWith({ allowed_domains: ["allowed.test"] });
    expect((await fetchWith(LOOPBACK_ALLOWED, { url: url("api.allowed.test", "/text") }, { agent: only })).isError).toBe(false);
    const other = await fetchWith(LOOPBACK_ALLOWED, { url: url("other.test", "/text") }, { agent: only });
    expect(other.content[0]!.text).toContain("host other.test is not in web_fetch allowed_domains");
  });

  it("refuses private, loopback, link-local and mixed answers unless the operator allows them", async () => {
    const strict: WebFetchOptions = { resolve };
    const before = web.requests.length;
    const cases: Array<[string, string]> = [
      [url("allowed.test", "/text"), "address 127.0.0.1 is private"],
      [`http://127.0.0.1:${web.port}/text`, "address 127.0.0.1 is private"],
      [`http://0x7f000001:${web.port}/text`, "address 127.0.0.1 is private"],
      [`http://[::1]:${web.port}/text`, "address ::1 is private"],
      [`http://[::ffff:127.0.0.1]:${web.port}/text`, "is private"],
      ["http://169.254.169.254/latest/meta-data/", "address 169.254.169.254 is private"],
      ["http://internal.test/", "address 10.1.2.3 is private"],
      ["http://mixed.test/", "address 192.168.1.1 is private"],
      ["http://metadata.test/", "address ::ffff:169.254.169.254 is private"],
    ];
    for (const [target, reason] of cases) {
      const result = await fetchWith(strict, { url: target }, { environment: openEnv });
      expect(result.isError, target).toBe(true);
      expect(result.content[0]!.text, target).toContain(reason);
    }
    expect(web.requests.length).toBe(before);
    // An allowed_hosts entry does not open the server's own network; only operator configuration does.
    const listed = await t.client.beta.environments.create({
      name: "lists loopback",
      config: { type: "cloud", networking: { type: "limited", allowed_hosts: ["127.0.0.1"] } },
    });
    expect((await fetchWith(strict, { url: `http://127.0.0.1:${web.port}/text` }, { environment: listed })).isError).toBe(true);
    expect((await fetchWith(LOOPBACK_ALLOWED, { url: `http://127.0.0.1:${web.port}/text` }, { environment: listed })).isError).toBe(false);
    const unknown = await fetchWith(strict, { url: "http://nowhere.test/" }, { environment: openEnv });
    expect(unknown.content[0]!.text).toBe("web_fetch could not resolve host nowhere.test");
  });

  it("refuses non-http schemes and malformed input", async () => {
    for (const target of ["file:///etc/passwd", "ftp://allowed.test/x", "data:text/plain,hi", "javascript:alert(1)"]) {
      const result = await fetchWith(LOOPBACK_ALLOWED, { url: target });
      expect(result.isError, target).toBe(true);
      expect(result.content[0]!.text, target).toMatch(/scheme \w+ is not allowed \(http and https only\)/);
    }
    expect((await fetchWith(LOOPBACK_ALLOWED, { url: "not a url" })).content[0]!.text).toBe("web_fetch refused: not a valid absolute URL");
    expect((await fetchWith(LOOPBACK_ALLOWED, {})).content[0]!.text).toMatch(/^input\.url: /);
    const crlf = await fetchWith(LOOPBACK_ALLOWED, { url: url("allowed.test", "/text"), headers: { "x-a": "a\r\nx-b: b" } });
    expect(crlf.content[0]!.text).toBe("input.headers.x-a: must not contain CR, LF or NUL");
    const userinfo = await fetchWith(LOOPBACK_ALLOWED, { url: `http://user:pw@allowed.test:${web.port}/text` });
    expect(userinfo.content[0]!.text).toBe("web_fetch refused: URLs with embedded credentials are not fetched");
  });

  it("caps the bytes read and truncates to max_content_tokens", async () => {
    const capped = await fetchWith({ ...LOOPBACK_ALLOWED, maxResponseBytes: 1000 }, { url: url("allowed.test", "/big") });
    const text = capped.content[0]!.text;
    expect(text).toContain("[response cut off at 1000 bytes]");
    expect(text.split("\n\n")[1]).toBe("x".repeat(1000));

    const small = await agentWith({ max_content_tokens: 10 });
    const cut = await fetchWith(LOOPBACK_ALLOWED, { url: url("allowed.test", "/big") }, { agent: small });
    expect(cut.content[0]!.text.endsWith(`\n\n${"x".repeat(40)}\n[content truncated to about 10 tokens]`)).toBe(true);
  });

  it("reports HTTP errors and binary bodies", async () => {
    const missing = await fetchWith(LOOPBACK_ALLOWED, { url: url("allowed.test", "/missing") });
    expect(missing.isError).toBe(true);
    expect(missing.content[0]!.text).toContain("Status: 404 Not Found");
    const binary = await fetchWith(LOOPBACK_ALLOWED, { url: url("allowed.test", "/binary") });
    expect(binary.content[0]!.text).toContain("[binary content (application/octet-stream), 4 bytes, not shown]");
  });

  it("times out, and rethrows the caller's abort", async () => {
    const slow = await fetchWith({ ...LOOPBACK_ALLOWED, timeoutMs: 200 }, { url: url("allowed.test", "/hang") });
    expect(slow).toEqual({ isError: true, content: [{ type: "text", text: "web_fetch timed out after 200 ms" }] });
    const stuckDns = await fetchWith(
      { resolve: () => new Promise<never>(() => undefined), timeoutMs: 100 },
      { url: url("allowed.test", "/text") },
    );
    expect(stuckDns).toEqual({ isError: true, content: [{ type: "text", text: "web_fetch timed out after 100 ms" }] });

    const controller = new AbortController();
    const agent = await agentWith();
    const ctx = toolContext({ storage: t.store.storage, secrets: t.secrets }, agent, { environment: limitedEnv });
    const waiting = web.requests.filter((r) => r.path === "/hang").length;
    const pending = new WebFetchExecutor(LOOPBACK_ALLOWED)
      .execute({ name: "web_fetch", input: { url: url("other.test", "/hang") }, toolUseId: "t1" }, ctx, controller.signal)
      .then(
        () => null,
        (e: unknown) => e,
      );
    await web.waitForRequests("/hang", waiting + 1);
    const reason = new Error("user.interrupt");
    controller.abort(reason);
    expect(await pending).toBe(reason);
  });

  it("substitutes environment_variable secrets into headers only for the credential's hosts", async () => {
    const vault = await t.client.beta.vaults.create({ display_name: "env secrets" });
    await t.client.beta.vaults.credentials.create(vault.id, {
      auth: {
        type: "environment_variable",
        secret_name: "API_KEY",
        secret_value: SECRET,
        injection_location: { header: true },
        networking: { type: "limited", allowed_hosts: ["allowed.test"] },
      },
    });
    await t.client.beta.vaults.credentials.create(vault.id, {
      auth: {
        type: "environment_variable",
        secret_name: "BODY_ONLY",
        secret_value: "body-only-secret-55aa",
        injection_location: { header: false, body: true },
        networking: { type: "unrestricted" },
      },
    });
    const headers = { "x-api-key": `\${API_KEY}`, authorization: "Bearer $API_KEY", "x-body": `\${BODY_ONLY}` };
    const vaultIds = [vault.id];

    const allowed = await fetchWith(LOOPBACK_ALLOWED, { url: url("allowed.test", "/headers"), headers }, { vaultIds });
    const got = web.requests.at(-1)!.headers;
    expect(got["x-api-key"]).toBe(SECRET);
    expect(got.authorization).toBe(`Bearer ${SECRET}`);
    expect(got["x-body"]).toBe(`\${BODY_ONLY}`);
    expect(allowed.content[0]!.text).not.toContain(SECRET);
    expect(allowed.content[0]!.text).toContain('"x-api-key":"[redacted credential]"');

    await fetchWith(LOOPBACK_ALLOWED, { url: url("other.test", "/headers"), headers }, { vaultIds });
    expect(web.requests.at(-1)!.headers["x-api-key"]).toBe(`\${API_KEY}`);

    // A redirect away from the credential's host: the next hop gets the placeholder, and no Authorization at all.
    const target = encodeURIComponent(url("other.test", "/headers"));
    const hopped = await fetchWith(LOOPBACK_ALLOWED, { url: url("allowed.test", `/redirect?to=${target}`), headers }, { vaultIds });
    expect(web.requests.at(-2)!.headers["x-api-key"]).toBe(SECRET);
    const last = web.requests.at(-1)!;
    expect(last.host).toBe(`other.test:${web.port}`);
    expect(last.headers["x-api-key"]).toBe(`\${API_KEY}`);
    expect(last.headers.authorization).toBeUndefined();
    expect(JSON.stringify(hopped)).not.toContain(SECRET);
  });

  it("reports credentials whose hosts the environment's limited networking does not allow", async () => {
    const vault = await t.client.beta.vaults.create({ display_name: "hosts" });
    const bad = await t.client.beta.vaults.credentials.create(vault.id, {
      auth: {
        type: "environment_variable",
        secret_name: "TOKEN_A",
        secret_value: "value-a-1234",
        networking: { type: "limited", allowed_hosts: ["allowed.test", "x.allowed.test", "*.other.test", "elsewhere.example"] },
      },
    });
    await t.client.beta.vaults.credentials.create(vault.id, {
      auth: {
        type: "environment_variable",
        secret_name: "TOKEN_B",
        secret_value: "value-b-1234",
        networking: { type: "limited", allowed_hosts: ["*.allowed.test"] },
      },
    });
    const errors = await credentialHostErrors({
      storage: t.store.storage,
      secrets: t.secrets,
      vaultIds: [vault.id],
      environment: limitedEnv,
    });
    expect(errors).toEqual([
      {
        type: "credential_host_unreachable_error",
        message: `vault credential ${bad.id} allows host(s) *.other.test, elsewhere.example that the environment's networking does not permit`,
        credential_id: bad.id,
        vault_id: vault.id,
        retry_status: { type: "terminal" },
      },
    ]);
    expect(
      await credentialHostErrors({ storage: t.store.storage, secrets: t.secrets, vaultIds: [vault.id], environment: openEnv }),
    ).toEqual([]);
  });
});
