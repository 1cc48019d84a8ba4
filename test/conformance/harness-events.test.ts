/**
 * The in-sandbox harness's event sink (`POST /v1/sessions/{id}/harness/events`,
 * an OpenMA extension, ADR 0034), through the official SDK's client: only
 * the session's live Work item's sessions token, only when the server leaves
 * the session's brain to the Work item, harness event types only, and a
 * retried post appends nothing twice.
 */
import type Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

const text = (t: string) => ({ type: "user.message" as const, content: [{ type: "text" as const, text: t }] });
const posted = (id: string) => [
  { id: `${id}-run`, type: "session.status_running" },
  { id: `${id}-msg`, type: "agent.message", content: [{ type: "text", text: "hello from the sandbox" }] },
  { id: `${id}-idle`, type: "session.status_idle", stop_reason: { type: "end_turn" } },
];

async function claim(t: TestServer, env: { id: string; environment_key: string }, sessionId: string): Promise<string> {
  const worker = t.clientWith(env.environment_key);
  let work = await worker.beta.environments.work.poll(env.id);
  while (work && work.data.id !== sessionId) work = await worker.beta.environments.work.poll(env.id);
  return (JSON.parse(Buffer.from(String(work?.secret), "base64url").toString("utf8")) as { sessions_token: string }).sessions_token;
}

const statusOf = (p: Promise<unknown>) =>
  p.then(
    () => 200,
    (err: unknown) => (err as InstanceType<typeof Anthropic.APIError>).status,
  );

describe.each(["work_item", "server"] as const)("harness events with OPENMA_SELF_HOSTED_BRAIN=%s", (brain) => {
  let t: TestServer;
  let env: { id: string; environment_key: string };
  let agentId: string;

  beforeAll(async () => {
    t = await startTestServer("sqlite", { OPENMA_SELF_HOSTED_BRAIN: brain });
    agentId = (await t.client.beta.agents.create({ name: "a", model: "claude-sonnet-4-5" })).id;
    env = (await t.client.beta.environments.create({ name: "hosted", config: { type: "self_hosted" } } as never)) as unknown as typeof env;
  });
  afterAll(async () => t?.close());

  it(brain === "work_item" ? "appends what the Work item's harness posts, once" : "refuses them: the server runs the brain", async () => {
    const session = await t.client.beta.sessions.create({ agent: agentId, environment_id: env.id });
    await t.client.beta.sessions.events.send(session.id, { events: [text("hi")] });
    const token = await claim(t, env, session.id);
    const path = `/v1/sessions/${session.id}/harness/events`;
    const harness = t.clientWith(token);
    // The admin key and the environment key are not a harness's credential.
    expect(await statusOf(t.client.post(path, { body: { events: posted("a") } }))).toBe(403);
    expect(await statusOf(t.clientWith(env.environment_key).post(path, { body: { events: posted("a") } }))).toBe(403);
    // User events keep going through the public route.
    expect(await statusOf(harness.post(path, { body: { events: [{ id: "u", ...text("spoofed") }] } }))).toBe(400);
    if (brain === "server") {
      expect(await statusOf(harness.post(path, { body: { events: posted("a") } }))).toBe(400);
      return;
    }
    expect(await statusOf(harness.post(path, { body: { events: posted("a") } }))).toBe(200);
    // A retry of the same post (same harness ids) appends nothing.
    expect(await statusOf(harness.post(path, { body: { events: posted("a") } }))).toBe(200);
    const types: string[] = [];
    for await (const e of t.client.beta.sessions.events.list(session.id)) types.push(e.type);
    expect(types).toEqual(["user.message", "session.status_running", "agent.message", "session.status_idle"]);
    expect((await t.client.beta.sessions.retrieve(session.id)).status).toBe("idle");
    // Another session's token is refused.
    const other = await t.client.beta.sessions.create({ agent: agentId, environment_id: env.id });
    expect(await statusOf(harness.post(`/v1/sessions/${other.id}/harness/events`, { body: { events: posted("b") } }))).toBe(403);
  });
});
