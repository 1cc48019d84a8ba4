/**
 * The stopping-item gap of the self-hosted flow, through the official SDK:
 * a user message that arrives while a worker still holds its item (stopping,
 * or about to stop after its idle countdown) finds that item live and gets no
 * new one. When the item reaches `stopped`, a new item is enqueued (in the
 * same transaction) iff the session has work-bearing input the item did not
 * serve and no ending idle has answered it since.
 */
import type Anthropic from "@anthropic-ai/sdk";
import { appendEvents } from "@openma/api";
import { newId, systemClock } from "@openma/storage";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

const text = (t: string) => ({ type: "user.message" as const, content: [{ type: "text" as const, text: t }] });

describe.each(BACKENDS)("work after a stopped item on %s", (dialect) => {
  let t: TestServer;
  let agentId: string;
  beforeAll(async () => {
    t = await startTestServer(dialect);
    agentId = (await t.client.beta.agents.create({ name: "hands", model: "claude-sonnet-4-5" })).id;
  });
  afterAll(async () => t?.close());

  /** A self-hosted session with a first message, and a worker that polled, acked and heartbeat its item. */
  async function heldSession() {
    const env = (await t.client.beta.environments.create({ name: "fleet", config: { type: "self_hosted" } })) as unknown as {
      id: string;
      environment_key: string;
    };
    const fleet = t.clientWith(env.environment_key).beta.environments.work;
    const session = await t.client.beta.sessions.create({ agent: agentId, environment_id: env.id, initial_events: [text("first")] });
    const item = await poll(fleet, env.id);
    if (!item) throw new Error("no item for the new session");
    await fleet.ack(item.id, { environment_id: env.id });
    const token = JSON.parse(Buffer.from(item.secret ?? "", "base64url").toString("utf8")).sessions_token as string;
    const worker = t.clientWith(token).beta.environments.work;
    await worker.heartbeat(item.id, { environment_id: env.id, expected_last_heartbeat: "NO_HEARTBEAT" });
    return { environmentId: env.id, fleet, sessionId: session.id, item, worker };
  }

  const poll = (fleet: Anthropic["beta"]["environments"]["work"], environmentId: string) => fleet.poll(environmentId);
  const answer = (sessionId: string, stopReason: "end_turn" | "requires_action") =>
    appendEvents({ storage: t.store.storage, clock: systemClock, ids: newId }, sessionId, [
      { type: "session.status_idle", fields: { stop_reason: { type: stopReason } }, dedupeKey: null },
    ]);

  it("enqueues a new item for a message that arrived while the item was stopping", async () => {
    const s = await heldSession();
    await t.client.beta.environments.work.stop(s.item.id, { environment_id: s.environmentId, force: false });
    await t.client.beta.sessions.events.send(s.sessionId, { events: [text("while stopping")] });
    expect(await poll(s.fleet, s.environmentId)).toBeNull(); // the stopping item is still the live one
    // The worker learns of the stop and force-stops its item on the way out.
    expect((await s.worker.stop(s.item.id, { environment_id: s.environmentId, force: true })).state).toBe("stopped");
    const next = await poll(s.fleet, s.environmentId);
    expect(next).toMatchObject({ data: { type: "session", id: s.sessionId }, state: "queued" });
    expect(next?.id).not.toBe(s.item.id);
  });

  it("enqueues a new item for a message that arrived while the worker was winding down an active item", async () => {
    const s = await heldSession();
    await answer(s.sessionId, "end_turn");
    // The worker's idle countdown ran out; a message lands during its teardown, while the item is still active.
    await t.client.beta.sessions.events.send(s.sessionId, { events: [text("during teardown")] });
    await s.worker.stop(s.item.id, { environment_id: s.environmentId, force: true });
    expect(await poll(s.fleet, s.environmentId)).toMatchObject({ data: { id: s.sessionId } });
  });

  it("enqueues nothing when every message was answered by an ending idle", async () => {
    const s = await heldSession();
    await t.client.beta.sessions.events.send(s.sessionId, { events: [text("second")] });
    await answer(s.sessionId, "end_turn");
    await s.worker.stop(s.item.id, { environment_id: s.environmentId, force: true });
    expect(await poll(s.fleet, s.environmentId)).toBeNull();
  });

  it("enqueues a new item when the last answer still waits for hands (requires_action)", async () => {
    const s = await heldSession();
    await t.client.beta.sessions.events.send(s.sessionId, { events: [text("second")] });
    await answer(s.sessionId, "requires_action");
    await s.worker.stop(s.item.id, { environment_id: s.environmentId, force: true });
    expect(await poll(s.fleet, s.environmentId)).toMatchObject({ data: { id: s.sessionId } });
  });

  it("enqueues nothing for input the item was created with or received before anyone took it", async () => {
    const env = (await t.client.beta.environments.create({ name: "fleet", config: { type: "self_hosted" } })) as unknown as {
      id: string;
      environment_key: string;
    };
    const fleet = t.clientWith(env.environment_key).beta.environments.work;
    const session = await t.client.beta.sessions.create({ agent: agentId, environment_id: env.id, initial_events: [text("first")] });
    // Still queued: whoever takes it reads the whole log, this message included.
    await t.client.beta.sessions.events.send(session.id, { events: [text("second")] });
    const [item] = await listItems(env.id, session.id);
    expect(item?.state).toBe("queued");
    await t.client.beta.environments.work.stop(item?.id ?? "", { environment_id: env.id, force: true });
    expect(await poll(fleet, env.id)).toBeNull();
  });

  it("enqueues nothing for an archived session", async () => {
    const s = await heldSession();
    await t.client.beta.sessions.events.send(s.sessionId, { events: [text("second")] });
    await t.client.beta.sessions.archive(s.sessionId);
    await s.worker.stop(s.item.id, { environment_id: s.environmentId, force: true });
    expect(await poll(s.fleet, s.environmentId)).toBeNull();
  });

  const listItems = (environmentId: string, sessionId: string) =>
    t.store.storage.db
      .selectFrom("work_items")
      .select(["id", "state"])
      .where("environment_id", "=", environmentId)
      .where("session_id", "=", sessionId)
      .execute();
});
