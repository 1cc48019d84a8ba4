/**
 * The API marks a session pending for the brain in the same transaction as
 * the user event that asks for a turn, only where the execution queue is the
 * session's scheduling authority (one authority per placement), and never for
 * a request it rejects. The brain itself is off here: the queue rows are the
 * observable.
 */
import type Anthropic from "@anthropic-ai/sdk";
import { executionRow } from "@openma/execution/queue";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

const text = (t: string) => ({ type: "user.message" as const, content: [{ type: "text" as const, text: t }] });

describe.each(BACKENDS)("turn requests on %s", (dialect) => {
  let t: TestServer;
  let inSandboxBrain: TestServer;
  let agentId: string;
  beforeAll(async () => {
    t = await startTestServer(dialect);
    inSandboxBrain = await startTestServer(dialect, { OPENMA_SELF_HOSTED_BRAIN: "work_item" });
    agentId = (await t.client.beta.agents.create({ name: "brainy", model: "claude-sonnet-4-5" })).id;
  });
  afterAll(async () => {
    await inSandboxBrain?.close();
    await t?.close();
  });

  const env = async (client: Anthropic, type: "cloud" | "self_hosted") =>
    (await client.beta.environments.create({ name: type, config: { type } as never })).id;
  const row = (server: TestServer, id: string) => executionRow(server.store.storage.db, id);
  const liveWork = (server: TestServer, id: string) =>
    server.store.storage.db.selectFrom("work_items").select("state").where("session_id", "=", id).where("state", "!=", "stopped").execute();

  it("marks a cloud session pending with its initial message, and again with every user event", async () => {
    const session = await t.client.beta.sessions.create({
      agent: agentId,
      environment_id: await env(t.client, "cloud"),
      initial_events: [text("hi")],
    });
    expect(await row(t, session.id)).toMatchObject({ state: "pending", requested_version: 1 });
    await t.client.beta.sessions.events.send(session.id, { events: [text("more"), { type: "user.interrupt" }] });
    expect(await row(t, session.id)).toMatchObject({ state: "pending", requested_version: 2 });
    expect(await liveWork(t, session.id)).toEqual([]);
  });

  it("does not mark a session created without events", async () => {
    const session = await t.client.beta.sessions.create({ agent: agentId, environment_id: await env(t.client, "cloud") });
    expect(await row(t, session.id)).toBeUndefined();
  });

  it("puts a self-hosted session's brain on the execution queue by default, its hands on the Work queue", async () => {
    const session = await t.client.beta.sessions.create({
      agent: agentId,
      environment_id: await env(t.client, "self_hosted"),
      initial_events: [text("hi")],
    });
    expect(await row(t, session.id)).toMatchObject({ state: "pending", requested_version: 1 });
    expect(await liveWork(t, session.id)).toEqual([{ state: "queued" }]);
  });

  it("leaves a self-hosted session to the Work queue when its harness runs in the sandbox (work_item)", async () => {
    const c = inSandboxBrain.client;
    const agent = (await c.beta.agents.create({ name: "in-sandbox", model: "claude-sonnet-4-5" })).id;
    const session = await c.beta.sessions.create({ agent, environment_id: await env(c, "self_hosted"), initial_events: [text("hi")] });
    expect(await row(inSandboxBrain, session.id)).toBeUndefined();
    expect(await liveWork(inSandboxBrain, session.id)).toEqual([{ state: "queued" }]);
    await c.beta.sessions.events.send(session.id, { events: [text("more")] });
    expect(await row(inSandboxBrain, session.id)).toBeUndefined();
  });

  it("changes nothing when the request is rejected", async () => {
    const session = await t.client.beta.sessions.create({
      agent: agentId,
      environment_id: await env(t.client, "cloud"),
      initial_events: [text("hi")],
    });
    const refused = await t.client.beta.sessions.events
      .send(session.id, {
        events: [text("first"), { type: "user.custom_tool_result", custom_tool_use_id: "sevt_missing", content: [] }],
      })
      .catch((e: unknown) => e);
    expect(refused).toMatchObject({ status: 400 });
    expect(await row(t, session.id)).toMatchObject({ requested_version: 1 });
    await t.client.beta.sessions.archive(session.id);
    await expect(t.client.beta.sessions.events.send(session.id, { events: [text("late")] })).rejects.toMatchObject({ status: 400 });
    expect(await row(t, session.id)).toMatchObject({ requested_version: 1 });
  });

  it("forgets the session's queue row when the session is deleted", async () => {
    const session = await t.client.beta.sessions.create({
      agent: agentId,
      environment_id: await env(t.client, "cloud"),
      initial_events: [text("hi")],
    });
    expect(await row(t, session.id)).toBeDefined();
    await t.client.beta.sessions.delete(session.id);
    expect(await row(t, session.id)).toBeUndefined();
  });
});
