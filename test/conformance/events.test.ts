/** Session events (send, list) through the official SDK, on both storage backends. */
import Anthropic from "@anthropic-ai/sdk";
import type { BetaManagedAgentsSessionEvent } from "@anthropic-ai/sdk/resources/beta/sessions/events";
import { newId, systemClock } from "@openma/storage";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { appendEvents, type EventLogDeps } from "../../packages/api/src/event-log.ts";
import { startTestServer, type TestServer } from "../support/server.ts";

const text = (t: string) => ({ type: "user.message" as const, content: [{ type: "text" as const, text: t }] });

describe.each(BACKENDS)("session events on %s", (dialect) => {
  let t: TestServer;
  let deps: EventLogDeps;
  let agentId: string;
  let cloudEnv: string;
  let hosted: { id: string; environment_key: string };

  beforeAll(async () => {
    t = await startTestServer(dialect);
    deps = { storage: t.store.storage, clock: systemClock, ids: newId };
    agentId = (await t.client.beta.agents.create({ name: "a", model: "claude-sonnet-4-5" })).id;
    cloudEnv = (await t.client.beta.environments.create({ name: "cloud" })).id;
    hosted = (await t.client.beta.environments.create({ name: "hosted", config: { type: "self_hosted" } })) as unknown as typeof hosted;
  });
  afterAll(async () => t?.close());

  const errorOf = (p: Promise<unknown>) =>
    p.then(
      () => {
        throw new Error("expected the request to fail");
      },
      (err: unknown) => err as InstanceType<typeof Anthropic.APIError>,
    );
  const newSession = async (environmentId = cloudEnv) =>
    (await t.client.beta.sessions.create({ agent: agentId, environment_id: environmentId })).id;
  const listAll = async (sessionId: string, params: Parameters<typeof t.client.beta.sessions.events.list>[1] = {}) => {
    const out: BetaManagedAgentsSessionEvent[] = [];
    for await (const e of t.client.beta.sessions.events.list(sessionId, params)) out.push(e);
    return out;
  };
  /** What the agent loop will do: append an agent event straight to the log. */
  const agentEvent = async (sessionId: string, type: string, fields: Record<string, unknown>) =>
    (await appendEvents(deps, sessionId, [{ type, fields, dedupeKey: null }])).events[0]?.id ?? "";

  it("sends every user event type and echoes the created events", async () => {
    const id = await newSession();
    const toolUse = await agentEvent(id, "agent.tool_use", { name: "bash", input: { command: "ls" }, evaluated_permission: "ask" });
    const customUse = await agentEvent(id, "agent.custom_tool_use", { name: "lookup", input: {} });
    const sent = await t.client.beta.sessions.events.send(id, {
      events: [
        {
          type: "user.message",
          content: [
            { type: "text", text: "look" },
            { type: "image", source: { type: "url", url: "https://example.test/a.png" } },
            { type: "document", source: { type: "text", media_type: "text/plain", data: "doc" }, title: "t" },
          ],
        },
        { type: "user.tool_confirmation", tool_use_id: toolUse, result: "deny", deny_message: "no" },
        { type: "user.custom_tool_result", custom_tool_use_id: customUse, content: [{ type: "text", text: "42" }] },
        { type: "user.interrupt" },
        { type: "user.define_outcome", description: "done", rubric: { type: "text", content: "r" }, max_iterations: 5 },
        text("then"),
        { type: "system.message", content: [{ type: "text", text: "be careful" }] },
      ],
    });
    const data = sent.data ?? [];
    expect(data.map((e) => e.type)).toEqual([
      "user.message",
      "user.tool_confirmation",
      "user.custom_tool_result",
      "user.interrupt",
      "user.define_outcome",
      "user.message",
      "system.message",
    ]);
    for (const e of data) {
      expect(e.id).toMatch(/^sevt_/);
      expect(Date.parse(String(e.processed_at))).not.toBeNaN();
    }
    expect(data[1]).toMatchObject({ tool_use_id: toolUse, result: "deny", deny_message: "no" });
    expect(data[2]).toMatchObject({ custom_tool_use_id: customUse, is_error: false, content: [{ type: "text", text: "42" }] });
    expect(data[4]).toMatchObject({ description: "done", max_iterations: 5, rubric: { type: "text", content: "r" } });
    const listed = await listAll(id);
    expect(listed.slice(2)).toEqual(data);
  });

  it("enforces the system.message and confirmation rules with 400s", async () => {
    const id = await newSession();
    const sys = { type: "system.message" as const, content: [{ type: "text" as const, text: "s" }] };
    const cases: Array<[Parameters<typeof t.client.beta.sessions.events.send>[1]["events"], string]> = [
      [[sys], "system.message must directly follow"],
      [[text("a"), sys, sys], "at most one system.message"],
      [[text("a"), sys, text("b")], "must be the last event"],
      [[{ type: "user.interrupt" }, sys], "must directly follow"],
      [[{ type: "user.tool_confirmation", tool_use_id: "sevt_x", result: "allow", deny_message: "m" }], "body.events[0].deny_message"],
      [[{ type: "user.tool_confirmation", tool_use_id: "sevt_unknown", result: "allow" }], "events[0].tool_use_id"],
      [[{ type: "user.custom_tool_result", custom_tool_use_id: "sevt_unknown" }], "events[0].custom_tool_use_id"],
      [[{ type: "user.message", content: [] }], "body.events[0].content"],
      [[{ type: "user.define_outcome", description: "d", rubric: { type: "text", content: "r" }, max_iterations: 21 }], "max_iterations"],
      [[{ type: "agent.message", content: [] } as never], "body.events[0].type"],
      [[], "body.events"],
    ];
    for (const [events, message] of cases) {
      const err = await errorOf(t.client.beta.sessions.events.send(id, { events }));
      expect(err, message).toBeInstanceOf(Anthropic.BadRequestError);
      expect(err.message).toContain(message);
    }
    expect(await listAll(id)).toEqual([]); // nothing was appended by a rejected request
    const ok = await t.client.beta.sessions.events.send(id, { events: [text("a"), sys] });
    expect(ok.data).toHaveLength(2);
  });

  it("accepts user.tool_result only on self-hosted sessions, idempotently per tool_use_id", async () => {
    const cloud = await newSession();
    const cloudUse = await agentEvent(cloud, "agent.tool_use", { name: "bash", input: {} });
    const refused = await errorOf(
      t.client.beta.sessions.events.send(cloud, { events: [{ type: "user.tool_result", tool_use_id: cloudUse, content: [] }] }),
    );
    expect(refused).toBeInstanceOf(Anthropic.BadRequestError);
    expect(refused.message).toContain("self_hosted");

    const id = await newSession(hosted.id);
    const use = await agentEvent(id, "agent.tool_use", { name: "bash", input: { command: "echo hi" } });
    const worker = t.clientWith(hosted.environment_key).beta.sessions.events;
    const result = {
      type: "user.tool_result" as const,
      tool_use_id: use,
      is_error: false,
      content: [{ type: "text" as const, text: "hi" }],
    };
    const first = await worker.send(id, { events: [result] });
    const retried = await worker.send(id, { events: [{ ...result, content: [{ type: "text", text: "different" }] }] });
    expect(retried.data).toEqual(first.data);
    expect((await listAll(id, { types: ["user.tool_result"] })).map((e) => e.id)).toEqual([first.data?.[0]?.id]);

    const unknown = await errorOf(worker.send(id, { events: [{ type: "user.tool_result", tool_use_id: "sevt_nope" }] }));
    expect(unknown.status).toBe(400);
    const wrongKind = await errorOf(worker.send(id, { events: [{ type: "user.tool_result", tool_use_id: first.data?.[0]?.id ?? "" }] }));
    expect(wrongKind.status).toBe(400);

    const custom = await agentEvent(id, "agent.custom_tool_use", { name: "lookup", input: {} });
    const answer = { type: "user.custom_tool_result" as const, custom_tool_use_id: custom };
    const [a, b] = await Promise.all([worker.send(id, { events: [answer] }), worker.send(id, { events: [answer, answer] })]);
    const ids = new Set([...(a.data ?? []), ...(b.data ?? [])].map((e) => e.id));
    expect(ids.size).toBe(1);
    expect(await listAll(id, { types: ["user.custom_tool_result"] })).toHaveLength(1);
  });

  it("lists chronologically by default with cursors, order, types and created_at filters", async () => {
    const id = await newSession();
    for (let i = 0; i < 7; i++) await t.client.beta.sessions.events.send(id, { events: [text(`m${i}`)] });
    await t.client.beta.sessions.update(id, { title: "t" });
    const all = await listAll(id, { limit: 2 });
    expect(all.map((e) => e.type)).toEqual([...Array(7).fill("user.message"), "session.updated"]);
    expect(all.map((e) => (e as { content?: Array<{ text: string }> }).content?.[0]?.text).slice(0, 7)).toEqual(
      Array.from({ length: 7 }, (_, i) => `m${i}`),
    );
    const desc = await listAll(id, { order: "desc", limit: 3 });
    expect(desc.map((e) => e.id)).toEqual(all.map((e) => e.id).reverse());
    expect((await listAll(id, { types: ["session.updated"] })).map((e) => e.id)).toEqual([all[7]?.id]);
    expect(await listAll(id, { types: ["agent.message", "session.error"] })).toEqual([]);
    expect((await t.client.beta.sessions.events.list(id, { limit: 1000 })).data).toHaveLength(8);

    const last = all[7] as { processed_at: string };
    expect((await listAll(id, { "created_at[gte]": last.processed_at })).map((e) => e.id)).toContain(all[7]?.id);
    expect(await listAll(id, { "created_at[gt]": last.processed_at })).toEqual([]);
    const firstAt = (all[0] as { processed_at: string }).processed_at;
    expect(await listAll(id, { "created_at[lt]": firstAt })).toEqual([]);
    expect((await listAll(id, { "created_at[lte]": last.processed_at })).length).toBe(8);

    for (const [params, field] of [
      [{ types: ["session.deleted"] }, "query.types"],
      [{ types: ["nope"] }, "query.types"],
      [{ limit: 1001 }, "query.limit"],
      [{ limit: 0 }, "query.limit"],
      [{ order: "up" }, "query.order"],
      [{ "created_at[gt]": "yesterday" }, "query.created_at[gt]"],
      [{ page: "garbage" }, "page"],
    ] as const) {
      const err = await errorOf(t.client.beta.sessions.events.list(id, params as never));
      expect(err, field).toBeInstanceOf(Anthropic.BadRequestError);
      expect(err.message).toContain(field);
    }
  });

  it("scopes environment keys and sessions tokens, 404s unknown sessions and refuses terminated ones", async () => {
    const cloud = await newSession();
    const worker = t.clientWith(hosted.environment_key).beta.sessions.events;
    expect(await errorOf(worker.list(cloud))).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect(await errorOf(worker.send(cloud, { events: [text("x")] }))).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect(await errorOf(t.client.beta.sessions.events.list("sesn_missing"))).toBeInstanceOf(Anthropic.NotFoundError);
    expect(await errorOf(t.client.beta.sessions.events.send("sesn_missing", { events: [text("x")] }))).toBeInstanceOf(
      Anthropic.NotFoundError,
    );
    expect(await errorOf(t.clientWith("sk-ant-oat01-unknown").beta.sessions.events.list(cloud))).toBeInstanceOf(
      Anthropic.AuthenticationError,
    );

    const id = await newSession(hosted.id);
    await t.client.beta.sessions.events.send(id, { events: [text("work")] });
    let work = await t.clientWith(hosted.environment_key).beta.environments.work.poll(hosted.id);
    while (work && work.data.id !== id) work = await t.clientWith(hosted.environment_key).beta.environments.work.poll(hosted.id);
    const token = (JSON.parse(Buffer.from(String(work?.secret), "base64url").toString("utf8")) as { sessions_token: string })
      .sessions_token;
    const runner = t.clientWith(token).beta.sessions.events;
    expect((await runner.list(id)).data.map((e) => e.type)).toEqual(["user.message"]);
    expect(await errorOf(runner.list(cloud))).toBeInstanceOf(Anthropic.PermissionDeniedError);

    await t.client.beta.sessions.archive(cloud);
    const late = await errorOf(t.client.beta.sessions.events.send(cloud, { events: [text("late")] }));
    expect(late).toBeInstanceOf(Anthropic.BadRequestError);
    expect((await listAll(cloud)).map((e) => e.type)).toEqual(["session.status_terminated"]);
  });
});
