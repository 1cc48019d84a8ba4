/**
 * `openma serve` runs the webhook delivery worker: with nothing but the
 * server's own loops (real time, polled with a generous deadline), a
 * session's creation reaches a local receiver, signed so that the SDK's
 * `unwrap()` accepts it.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";
import { until } from "../support/until.ts";
import { receiver } from "../support/webhook-receiver.ts";

describe("openma serve's automation loops", () => {
  let t: TestServer;
  let hook: Awaited<ReturnType<typeof receiver>>;
  beforeAll(async () => {
    hook = await receiver(1);
    t = await startTestServer("sqlite", { OPENMA_WEBHOOK_ALLOW_PRIVATE_TARGETS: "1", OPENMA_WEBHOOK_RETRY_BASE_MS: "10" });
  });
  afterAll(async () => {
    await t?.close();
    await hook?.close();
  });

  it("delivers a webhook through a first failure", async () => {
    const endpoint = await t.client.beta.organization.webhooks.create({ url: hook.url, enabled_events: ["session.created"] as never });
    const agent = await t.client.beta.agents.create({ name: "wired", model: "claude-sonnet-4-5" });
    const env = await t.client.beta.environments.create({ name: "cloud" });
    const session = await t.client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    await until(async () => hook.received.length > 0, "the webhook delivery", 60_000);
    const [first] = hook.received;
    const event = t.client.beta.webhooks.unwrap(first?.body ?? "", { headers: first?.headers ?? {}, key: endpoint.signing_secret });
    expect(event.data).toMatchObject({ type: "session.created", id: session.id });
  });
});
