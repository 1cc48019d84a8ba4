/**
 * An agent's `multiagent` configuration through the official SDK, on both
 * storage backends: both request forms resolve to the shapes the SDK's
 * response types declare (roster entries pinned to versions, every
 * `multiagent_20261001` member spelled out), updates merge level by level,
 * and broken rosters are 400s naming the field.
 */
import Anthropic from "@anthropic-ai/sdk";
import type { BetaManagedAgentsMultiagent } from "@anthropic-ai/sdk/resources/beta/sessions/sessions";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

describe.each(BACKENDS)("agent multiagent config on %s", (dialect) => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer(dialect);
  });
  afterAll(async () => t?.close());

  async function worker(name: string) {
    return t.client.beta.agents.create({ name, model: "claude-haiku-4-5" });
  }

  it("resolves a coordinator roster to pinned versions, self and advisors included", async () => {
    const a = await worker("researcher");
    const b = await worker("writer");
    await t.client.beta.agents.update(b.id, { version: 1, system: "write well" });
    const lead = await t.client.beta.agents.create({
      name: "lead",
      model: "claude-sonnet-4-5",
      multiagent: {
        type: "coordinator",
        agents: [a.id, { type: "agent", id: b.id, version: 1 }, { type: "self" }, { type: "advisor", model: "claude-opus-4-1" }],
      },
    });
    const expected: BetaManagedAgentsMultiagent = {
      type: "coordinator",
      agents: [
        { type: "agent", id: a.id, version: 1 },
        { type: "agent", id: b.id, version: 1 },
        { type: "agent", id: lead.id, version: 1 },
        { type: "advisor", model: "claude-opus-4-1" },
      ],
    };
    expect(lead.multiagent).toEqual(expected);
    expect((await t.client.beta.agents.retrieve(lead.id)).multiagent).toEqual(expected);
    // Cleared with null: the agent is single-threaded again, in a new version.
    const cleared = await t.client.beta.agents.update(lead.id, { version: 1, multiagent: null });
    expect(cleared).toMatchObject({ version: 2, multiagent: null });
  });

  it("fills multiagent_20261001 defaults and merges updates level by level", async () => {
    const a = await worker("helper");
    const created = await t.client.beta.agents.create({
      name: "orchestrator",
      model: "claude-sonnet-4-5",
      multiagent: { type: "multiagent_20261001", subagents: { type: "enabled", predefined_agents: [a.id] } },
    });
    const resolved: BetaManagedAgentsMultiagent = {
      type: "multiagent_20261001",
      advisor: { type: "disabled" },
      subagents: { type: "enabled", inline_agents: { type: "enabled" }, predefined_agents: [{ type: "agent", id: a.id, version: 1 }] },
      workflows: { type: "enabled", inline_agents: { type: "enabled" }, predefined_agents: [] },
    };
    expect(created.multiagent).toEqual(resolved);

    // Omitted keys keep their stored values; a member of the stored type merges; null takes the default.
    const merged = await t.client.beta.agents.update(created.id, {
      version: 1,
      multiagent: {
        type: "multiagent_20261001",
        advisor: { type: "enabled", model: "claude-opus-4-1" },
        subagents: { type: "enabled", inline_agents: { type: "disabled" } },
        workflows: { type: "disabled" },
      },
    });
    expect(merged.multiagent).toEqual({
      type: "multiagent_20261001",
      advisor: { type: "enabled", model: "claude-opus-4-1" },
      subagents: { type: "enabled", inline_agents: { type: "disabled" }, predefined_agents: [{ type: "agent", id: a.id, version: 1 }] },
      workflows: { type: "disabled" },
    });
    const reset = await t.client.beta.agents.update(created.id, {
      version: 2,
      multiagent: { type: "multiagent_20261001", workflows: null },
    });
    expect(reset.multiagent).toMatchObject({
      advisor: { type: "enabled", model: "claude-opus-4-1" },
      workflows: { type: "enabled", inline_agents: { type: "enabled" }, predefined_agents: [] },
    });
  });

  it("rejects broken rosters with a 400 naming the field", async () => {
    const nested = await t.client.beta.agents.create({
      name: "nested",
      model: "claude-haiku-4-5",
      multiagent: { type: "coordinator", agents: [{ type: "self" }] },
    });
    const archived = await worker("gone");
    await t.client.beta.agents.archive(archived.id);
    const ok = await worker("fine");
    const cases: Array<[Anthropic.Beta.Agents.AgentCreateParams["multiagent"], RegExp]> = [
      [{ type: "coordinator", agents: ["agent_missing"] }, /multiagent\.agents\[0\]: agent agent_missing was not found/],
      [{ type: "coordinator", agents: [{ type: "agent", id: ok.id, version: 9 }] }, /version 9 was not found/],
      [{ type: "coordinator", agents: [nested.id] }, /depth limit is 1/],
      [{ type: "coordinator", agents: [archived.id] }, /is archived/],
      [{ type: "coordinator", agents: [ok.id, { type: "agent", id: ok.id }] }, /listed twice/],
      [{ type: "coordinator", agents: [{ type: "self" }, { type: "self" }] }, /at most one self/],
      [{ type: "coordinator", agents: [] }, /agents/],
      [
        { type: "multiagent_20261001", workflows: { type: "enabled", inline_agents: { type: "disabled" } } },
        /multiagent\.workflows: with inline_agents disabled, predefined_agents must name at least one agent/,
      ],
      [{ type: "multiagent_20261001", advisor: { type: "enabled" } } as never, /advisor/],
    ];
    for (const [multiagent, message] of cases) {
      const err = await t.client.beta.agents.create({ name: "bad", model: "claude-haiku-4-5", multiagent }).catch((e: unknown) => e);
      expect(err, JSON.stringify(multiagent)).toBeInstanceOf(Anthropic.BadRequestError);
      expect((err as InstanceType<typeof Anthropic.BadRequestError>).message).toMatch(message);
    }
  });
});
