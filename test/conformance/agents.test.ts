/** Agents through the official SDK, on both storage backends. */
import Anthropic from "@anthropic-ai/sdk";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

describe.each(BACKENDS)("agents on %s", (dialect) => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer(dialect);
  });
  afterAll(async () => t?.close());

  it("creates, retrieves, updates with a version bump, lists versions and archives", async () => {
    const agents = t.client.beta.agents;
    const created = await agents.create({
      name: "coder",
      model: "claude-sonnet-4-5",
      system: "be brief",
      tools: [
        { type: "agent_toolset_20260401", configs: [{ name: "bash", permission_policy: { type: "always_ask" } }] },
        { type: "mcp_toolset", mcp_server_name: "docs" },
        { type: "custom", name: "lookup", description: "look up", input_schema: { type: "object", properties: {} } },
      ],
      mcp_servers: [{ type: "url", name: "docs", url: "https://mcp.example.test/mcp" }],
      skills: [{ type: "custom", skill_id: "skill_abc" }],
      metadata: { team: "a" },
    });
    expect(created).toMatchObject({ type: "agent", version: 1, name: "coder", model: { id: "claude-sonnet-4-5" }, archived_at: null });
    expect(created.id).toMatch(/^agent_/);
    expect(created.tools[0]).toMatchObject({
      type: "agent_toolset_20260401",
      default_config: { enabled: true, permission_policy: { type: "always_allow" } },
      configs: [{ type: "bash", name: "bash", enabled: true, permission_policy: { type: "always_ask" } }],
    });
    expect(created.tools[1]).toMatchObject({ default_config: { permission_policy: { type: "always_ask" } } });
    expect(created.skills).toEqual([{ type: "custom", skill_id: "skill_abc", version: "latest" }]);
    expect(created.execution_identity).toEqual({ type: "service_account" });

    expect(await agents.retrieve(created.id)).toEqual(created);

    const same = await agents.update(created.id, { version: 1, name: "coder" });
    expect(same.version).toBe(1);

    const updated = await agents.update(created.id, { version: 1, system: "be thorough", metadata: { team: null, tier: "gold" } });
    expect(updated).toMatchObject({ version: 2, system: "be thorough", metadata: { tier: "gold" } });

    await expect(agents.update(created.id, { version: 1, name: "stale" })).rejects.toBeInstanceOf(Anthropic.ConflictError);

    expect((await agents.retrieve(created.id, { version: 1 })).system).toBe("be brief");
    const versions = [];
    for await (const v of agents.versions.list(created.id)) versions.push(v.version);
    expect(versions).toEqual([2, 1]);

    const archived = await agents.archive(created.id);
    expect(archived.archived_at).not.toBeNull();
    const listed = [];
    for await (const a of agents.list()) listed.push(a.id);
    expect(listed).not.toContain(created.id);
    const withArchived = [];
    for await (const a of agents.list({ include_archived: true })) withArchived.push(a.id);
    expect(withArchived).toContain(created.id);
  });

  it("auto-paginates across pages", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) ids.push((await t.client.beta.agents.create({ name: `a${i}`, model: "claude-haiku-4-5" })).id);
    const seen: string[] = [];
    for await (const a of t.client.beta.agents.list({ limit: 2 })) seen.push(a.id);
    for (const id of ids) expect(seen).toContain(id);
    expect(new Set(seen).size).toBe(seen.length);
  });

  it("maps errors to the SDK's classes with the API error body", async () => {
    const err = await t.client.beta.agents.retrieve("agent_missing").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.NotFoundError);
    const nf = err as InstanceType<typeof Anthropic.NotFoundError>;
    expect(nf.requestID).toMatch(/^req_/);
    expect(nf.error).toMatchObject({ type: "error", error: { type: "not_found_error" } });

    const bad = await t.client.beta.agents.create({ name: "", model: "m" }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(Anthropic.BadRequestError);
    expect((bad as Error).message).toContain("body.name");

    const unauth = await t
      .clientWith("sk-ant-api03-wrong")
      .beta.agents.list()
      .catch((e: unknown) => e);
    expect(unauth).toBeInstanceOf(Anthropic.AuthenticationError);
  });

  it("accepts the admin key as x-api-key too, and reports health", async () => {
    const res = await fetch(`${t.baseURL}/v1/agents?limit=1`, { headers: { "x-api-key": t.apiKey } });
    expect(res.status).toBe(200);
    const health = await (await fetch(`${t.baseURL}/health`)).json();
    expect(health).toMatchObject({ status: "ok", storage: { backend: dialect } });
  });
});
