/**
 * Webhook endpoints through the official SDK (`beta.organization.webhooks`)
 * and deliveries the SDK's `beta.webhooks.unwrap()` verifies, on both
 * storage backends: a receiver that fails the first deliveries still gets
 * every event exactly once (after dedupe by `webhook-id`), in order per
 * session; a receiver that always fails ends in the dead-letter, visible
 * through the API and the log. Time is a manual clock started at the wall
 * clock (unwrap checks the signed timestamp against the wall clock). Each
 * event type the server sends is triggered and received once, typed by the
 * SDK's own event union.
 */
import Anthropic from "@anthropic-ai/sdk";
import type { BetaWebhookEvent, BetaWebhookEventData } from "@anthropic-ai/sdk/resources/beta/webhooks";
import { appendEvents, type EventDraft } from "@openma/api";
import { ManualClock } from "@openma/storage";
import { BACKENDS } from "@openma/storage/testing";
import { ManualScheduler } from "@openma/time";
import { WebhookDeliveryWorker } from "@openma/webhooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { automationDeps, inProcessClient } from "../support/automation.ts";
import { startTestServer, type TestServer } from "../support/server.ts";
import { receiver } from "../support/webhook-receiver.ts";

const BETA = { headers: { "anthropic-beta": "webhooks-2026-10-07" } };

async function errorOf(p: Promise<unknown>): Promise<InstanceType<typeof Anthropic.APIError>> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(Anthropic.APIError);
  return err as InstanceType<typeof Anthropic.APIError>;
}

const status = (type: string, key: string): EventDraft => ({
  type,
  fields: type === "session.status_idle" ? { stop_reason: { type: "end_turn" } } : {},
  dedupeKey: key,
});

describe.each(BACKENDS)("webhooks on %s", (dialect) => {
  let t: TestServer;
  let clock: ManualClock;
  beforeAll(async () => {
    clock = new ManualClock(Date.now());
    t = await startTestServer(
      dialect,
      { OPENMA_SCHEDULER: "off", OPENMA_WEBHOOKS: "off", OPENMA_WEBHOOK_ALLOW_PRIVATE_TARGETS: "1" },
      { clock },
    );
  });
  afterAll(async () => t?.close());

  it("manages endpoints: the signing secret only at create and regenerate", async () => {
    const hooks = t.client.beta.organization.webhooks;
    const created = await hooks.create({
      url: "https://hooks.example.com/openma",
      enabled_events: ["session.status_idled", "deployment_run.failed"] as never,
      name: "ops",
      description: "pager",
    });
    expect(created).toMatchObject({
      url: "https://hooks.example.com/openma",
      name: "ops",
      description: "pager",
      state: "enabled",
      disabled_reason: "",
    });
    expect(created.signing_secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    const { signing_secret: _secret, ...rest } = created;
    const fetched = await hooks.retrieve(created.id);
    expect(fetched).toEqual(rest);
    expect(JSON.stringify(fetched)).not.toContain("whsec_");

    const updated = await hooks.update(created.id, { state: "disabled", enabled_events: [] });
    expect(updated).toMatchObject({ state: "disabled", enabled_events: ["session.status_idled", "deployment_run.failed"] });
    const regenerated = await hooks.regenerateSigningSecret(created.id);
    expect(regenerated.signing_secret).toMatch(/^whsec_/);
    expect(regenerated.signing_secret).not.toBe(created.signing_secret);

    const more = [];
    for (let i = 0; i < 3; i++)
      more.push((await hooks.create({ url: `https://hooks.example.com/${i}`, enabled_events: ["session.created"] as never })).id);
    const listed: string[] = [];
    for await (const e of hooks.list({ limit: 2 })) listed.push(e.id);
    expect(listed.slice(0, 4)).toEqual([...more].reverse().concat(created.id));
    const asc: string[] = [];
    for await (const e of hooks.list({ limit: 2, order: "asc" })) asc.push(e.id);
    expect(asc.indexOf(created.id)).toBeLessThan(asc.indexOf(more[0] as string));

    expect(await hooks.delete(created.id)).toEqual({ id: created.id, type: "webhook_endpoint_deleted" });
    expect(await errorOf(hooks.retrieve(created.id))).toBeInstanceOf(Anthropic.NotFoundError);
    for (const id of more) await hooks.delete(id);

    expect((await errorOf(hooks.create({ url: "https://x.example.com", enabled_events: ["no.such_event"] as never }))).status).toBe(400);
    expect((await errorOf(hooks.create({ url: "ftp://x.example.com", enabled_events: ["session.created"] as never }))).status).toBe(400);
    // Without the beta header the API does not exist.
    const bare = await fetch(`${t.baseURL}/v1/organizations/webhooks`, { headers: { "x-api-key": t.apiKey } });
    expect(bare.status).toBe(404);
  });

  it("refuses loopback, private and link-local targets unless the operator allows them", async () => {
    const deps = automationDeps(t.store.storage, clock, t.apiKey);
    const strict = inProcessClient({ ...deps, webhooks: { allowPrivateTargets: false } }, t.apiKey).beta.organization.webhooks;
    for (const url of [
      "https://127.0.0.1/x",
      "https://localhost/x",
      "https://169.254.169.254/latest",
      "https://10.1.2.3/",
      "https://[::1]/",
      "http://hooks.example.com/",
    ]) {
      const err = await errorOf(strict.create({ url, enabled_events: ["session.created"] as never }));
      expect(err.status).toBe(400);
      expect(err.message).toMatch(/url:/);
    }
    const ok = await strict.create({ url: "https://hooks.example.com/x", enabled_events: ["session.created"] as never });
    await strict.delete(ok.id);
  });

  it("delivers every event exactly once, in order per session, through failures; a dead receiver is dead-lettered", async () => {
    const flaky = await receiver(3);
    const dead = await receiver(Number.POSITIVE_INFINITY);
    const warnings: object[] = [];
    try {
      const hooks = t.client.beta.organization.webhooks;
      const types = [
        "session.created",
        "session.status_run_started",
        "session.status_idled",
        "deployment_run.started",
        "deployment_run.succeeded",
      ];
      const good = await hooks.create({ url: flaky.url, enabled_events: types as never });
      const bad = await hooks.create({ url: dead.url, enabled_events: ["session.created"] as never });

      const agent = await t.client.beta.agents.create({ name: "hooked", model: "claude-sonnet-4-5" });
      const env = await t.client.beta.environments.create({ name: "cloud" });
      const deps = automationDeps(t.store.storage, clock);
      const sessions: string[] = [];
      for (let i = 0; i < 3; i++) sessions.push((await t.client.beta.sessions.create({ agent: agent.id, environment_id: env.id })).id);
      // Interleaved status changes, as concurrent turns produce them (the harness appends through the same log).
      for (let turn = 1; turn <= 2; turn++) {
        for (const id of sessions) await appendEvents(deps, id, [status("session.status_running", `r${turn}`)]);
        for (const id of sessions) await appendEvents(deps, id, [status("session.status_idle", `i${turn}`)]);
      }
      const deployment = await t.client.beta.deployments.create({
        agent: agent.id,
        environment_id: env.id,
        name: "hooked",
        initial_events: [{ type: "user.message", content: [{ type: "text", text: "hi" }] }],
      });
      const run = await t.client.beta.deployments.run(deployment.id);

      const worker = new WebhookDeliveryWorker({
        db: t.store.storage.db,
        clock,
        scheduler: new ManualScheduler(),
        logger: { info() {}, warn: (o) => warnings.push(o) },
        allowPrivateTargets: true,
        maxAttempts: 4,
        baseDelayMs: 1000,
      });
      expect(worker.backoffMs(1)).toBe(1000);
      expect(worker.backoffMs(3)).toBe(4000);
      const pending = async () =>
        Number(
          (
            await t.store.storage.db
              .selectFrom("webhook_deliveries")
              .select((eb) => eb.fn.countAll<number>().as("n"))
              .where("state", "=", "pending")
              .executeTakeFirstOrThrow()
          ).n,
        );
      for (let i = 0; i < 100 && (await pending()) > 0; i++) {
        await worker.runOnce();
        clock.advance(1000);
      }
      expect(await pending()).toBe(0);

      // Every delivery verifies with the SDK; deduped by webhook-id, each event arrived once.
      const byId = new Map<string, { type: string; id: string }>();
      for (const r of flaky.received) {
        const event = t.client.beta.webhooks.unwrap(r.body, { headers: r.headers, key: good.signing_secret });
        expect(event.type).toBe("event");
        expect(event.id).toBe(r.headers["webhook-id"]);
        expect(event.data).toMatchObject({ organization_id: expect.any(String), workspace_id: expect.any(String) });
        expect(t.client.beta.webhooks.parseUnverified(r.body)).toEqual(event);
        if (!byId.has(event.id)) byId.set(event.id, { type: event.data.type, id: event.data.id });
        expect(() => t.client.beta.webhooks.unwrap(r.body, { headers: r.headers, key: bad.signing_secret })).toThrow();
      }
      const expectedEvents = await t.store.storage.db
        .selectFrom("webhook_deliveries")
        .select(["event_id", "state"])
        .where("endpoint_id", "=", good.id)
        .execute();
      expect(expectedEvents.every((d) => d.state === "delivered")).toBe(true);
      expect(new Set(byId.keys())).toEqual(new Set(expectedEvents.map((d) => d.event_id)));
      expect(flaky.received.length).toBe(byId.size);
      // The refused attempts were real deliveries too (a receiver may have processed one and failed to answer):
      // each verifies, its retry repeats its webhook-id, and folding every request by webhook-id leaves each event once.
      expect(flaky.requests.length).toBe(byId.size + 3);
      const refused = flaky.requests.slice(0, 3);
      for (const r of refused) {
        const event = t.client.beta.webhooks.unwrap(r.body, { headers: r.headers, key: good.signing_secret });
        expect(byId.has(event.id)).toBe(true);
        expect(flaky.received.filter((a) => a.headers["webhook-id"] === event.id).map((a) => a.body)).toEqual([r.body]);
      }
      const folded = new Map(flaky.requests.map((r) => [r.headers["webhook-id"], r.body]));
      expect(new Set(folded.keys())).toEqual(new Set(byId.keys()));

      const arrivedFor = (id: string) => [...byId.values()].filter((e) => e.id === id).map((e) => e.type);
      const arrivalOrder = flaky.received.map((r) => JSON.parse(r.body) as { data: { type: string; id: string } });
      for (const id of sessions) {
        expect(arrivalOrder.filter((e) => e.data.id === id).map((e) => e.data.type)).toEqual([
          "session.created",
          "session.status_run_started",
          "session.status_idled",
          "session.status_run_started",
          "session.status_idled",
        ]);
      }
      expect(arrivedFor(run.id)).toEqual(["deployment_run.started", "deployment_run.succeeded"]);
      expect(arrivedFor(run.session_id as string)).toEqual(["session.created"]);

      // The dead receiver: every attempt failed, the cap reached, the deliveries dead-lettered and visible.
      const listing = (await t.client.get(`/v1/organizations/webhooks/${bad.id}/deliveries`, { query: { state: "dead" }, ...BETA })) as {
        data: { state: string; attempts: number; last_error: string; event_type: string }[];
      };
      expect(listing.data).toHaveLength(4);
      for (const d of listing.data)
        expect(d).toMatchObject({ state: "dead", attempts: 4, last_error: "HTTP 500", event_type: "session.created" });
      expect(dead.received).toHaveLength(0);
      expect(warnings.filter((w) => JSON.stringify(w).includes(bad.id) || JSON.stringify(w).includes(dead.url))).toHaveLength(4);
    } finally {
      await flaky.close();
      await dead.close();
    }
  });

  it("sends the lifecycle events of agents, environments, memory stores and sessions, and a session's log events, each once and in order", async () => {
    const sink = await receiver(1);
    try {
      const b = t.client.beta;
      // In log order: the update, an outcome, a thread's life, a stop at the budget, the archive.
      const sessionEvents = [
        "session.updated",
        "session.outcome_evaluation_ended",
        "session.thread_created",
        "session.thread_idled",
        "session.thread_terminated",
        "session.budget_reached",
        "session.archived",
      ] as const;
      const types = [
        "agent.created",
        "agent.updated",
        "agent.archived",
        "environment.created",
        "environment.updated",
        "environment.archived",
        "environment.deleted",
        "memory_store.created",
        "memory_store.archived",
        "memory_store.deleted",
        ...sessionEvents,
        "session.deleted",
      ] as const satisfies readonly BetaWebhookEventData["type"][];
      // The SDK types `enabled_events` with the organization-level types only; the server takes every type it defines.
      const endpoint = await b.organization.webhooks.create({ url: sink.url, enabled_events: [...types] as never });

      const agent = await b.agents.create({ name: "lifecycle", model: "claude-sonnet-4-5" });
      await b.agents.update(agent.id, { version: agent.version, name: "lifecycle 2" });
      await b.agents.update(agent.id, { name: "lifecycle 2" }); // no change: no new version, no event
      await b.agents.archive(agent.id);
      await b.agents.archive(agent.id); // already archived: no event
      const env = await b.environments.create({ name: "lifecycle" });
      await b.environments.update(env.id, { name: "lifecycle 2" });
      await b.environments.archive(env.id);
      const doomedEnv = await b.environments.create({ name: "doomed" });
      await b.environments.delete(doomedEnv.id);
      const store = await b.memoryStores.create({ name: "notes" });
      await b.memoryStores.archive(store.id);
      const doomedStore = await b.memoryStores.create({ name: "doomed" });
      await b.memoryStores.delete(doomedStore.id);
      // A failed change sends nothing: its transaction rolled back.
      expect((await errorOf(b.environments.delete(doomedEnv.id))).status).toBe(404);

      const liveAgent = await b.agents.create({ name: "live", model: "claude-sonnet-4-5" });
      const liveEnv = await b.environments.create({ name: "live" });
      const session = await b.sessions.create({ agent: liveAgent.id, environment_id: liveEnv.id });
      await b.sessions.update(session.id, { title: "renamed" });
      // The log events the harness appends (through this same log) for an outcome, a thread and a stop at the budget.
      const thread = { session_thread_id: "sthr_webhooks", agent_name: "helper" };
      const deps = automationDeps(t.store.storage, clock);
      await appendEvents(deps, session.id, [
        { type: "user.define_outcome", fields: { outcome_id: "outc_1", description: "done", max_iterations: 3 }, dedupeKey: "o0" },
        {
          type: "span.outcome_evaluation_end",
          fields: {
            outcome_id: "outc_1",
            outcome_evaluation_start_id: "sevt_start",
            iteration: 0,
            result: "satisfied",
            explanation: "ok",
            usage: { input_tokens: 1, output_tokens: 1, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
          },
          dedupeKey: "o1",
        },
        {
          type: "session.thread_created",
          fields: { ...thread, workflow_run_id: null },
          dedupeKey: "t0",
          threadId: thread.session_thread_id,
        },
        {
          type: "session.thread_status_idle",
          fields: { ...thread, stop_reason: { type: "end_turn" }, stop_details: null },
          dedupeKey: "t1",
          threadId: thread.session_thread_id,
        },
        { type: "session.thread_status_terminated", fields: thread, dedupeKey: "t2", threadId: thread.session_thread_id },
        { type: "session.status_idle", fields: { stop_reason: { type: "end_turn" } }, dedupeKey: "i1" },
        { type: "session.status_idle", fields: { stop_reason: { type: "budget_reached" } }, dedupeKey: "i2" },
      ]);
      await b.sessions.archive(session.id);
      const doomedSession = await b.sessions.create({ agent: liveAgent.id, environment_id: liveEnv.id });
      await b.sessions.delete(doomedSession.id);

      const worker = new WebhookDeliveryWorker({
        db: t.store.storage.db,
        clock,
        scheduler: new ManualScheduler(),
        logger: { info() {}, warn() {} },
        allowPrivateTargets: true,
        maxAttempts: 4,
        baseDelayMs: 1000,
      });
      const pending = async () =>
        (
          await t.store.storage.db
            .selectFrom("webhook_deliveries")
            .select("id")
            .where("endpoint_id", "=", endpoint.id)
            .where("state", "=", "pending")
            .execute()
        ).length;
      for (let i = 0; i < 100 && (await pending()) > 0; i++) {
        await worker.runOnce();
        clock.advance(1000);
      }
      expect(await pending()).toBe(0);

      const events: BetaWebhookEvent[] = sink.received.map((r) =>
        b.webhooks.unwrap(r.body, { headers: r.headers, key: endpoint.signing_secret }),
      );
      expect(new Set(events.map((e) => e.id)).size).toBe(events.length);
      const of = (id: string) => events.filter((e) => e.data.id === id).map((e) => e.data.type);
      expect(of(agent.id)).toEqual(["agent.created", "agent.updated", "agent.archived"]);
      expect(of(env.id)).toEqual(["environment.created", "environment.updated", "environment.archived"]);
      expect(of(doomedEnv.id)).toEqual(["environment.created", "environment.deleted"]);
      expect(of(store.id)).toEqual(["memory_store.created", "memory_store.archived"]);
      expect(of(doomedStore.id)).toEqual(["memory_store.created", "memory_store.deleted"]);
      expect(of(liveAgent.id)).toEqual(["agent.created"]);
      expect(of(liveEnv.id)).toEqual(["environment.created"]);
      expect(of(session.id)).toEqual(sessionEvents);
      expect(of(doomedSession.id)).toEqual(["session.deleted"]);
      expect(new Set(events.map((e) => e.data.type))).toEqual(new Set(types));
      for (const { data } of events) {
        expect(data).toMatchObject({ organization_id: "org_openma", workspace_id: "wrkspc_default" });
        // Narrowed by the SDK's union: the thread events name their thread.
        if (data.type === "session.thread_created" || data.type === "session.thread_idled" || data.type === "session.thread_terminated")
          expect(data.session_thread_id).toBe(thread.session_thread_id);
        else expect(data).not.toHaveProperty("session_thread_id");
      }
    } finally {
      await sink.close();
    }
  });
});
