/** Deployments and deployment runs through the official SDK, on both storage backends; scheduled runs under a manual clock. */
import Anthropic from "@anthropic-ai/sdk";
import { ManualClock } from "@openma/storage";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { automationDeps, testScheduler } from "../support/automation.ts";
import { startTestServer, type TestServer } from "../support/server.ts";

async function errorOf(p: Promise<unknown>): Promise<InstanceType<typeof Anthropic.APIError>> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(Anthropic.APIError);
  return err as InstanceType<typeof Anthropic.APIError>;
}

const START = Date.parse("2026-03-02T08:59:30.000Z");
const HELLO = [{ type: "user.message" as const, content: [{ type: "text" as const, text: "Where is my order #1234?" }] }];

describe.each(BACKENDS)("deployments on %s", (dialect) => {
  let t: TestServer;
  let clock: ManualClock;
  let agentId: string;
  let envId: string;
  beforeAll(async () => {
    clock = new ManualClock(START);
    t = await startTestServer(dialect, { OPENMA_SCHEDULER: "off", OPENMA_WEBHOOKS: "off" }, { clock });
    agentId = (await t.client.beta.agents.create({ name: "support", model: "claude-sonnet-4-5" })).id;
    envId = (await t.client.beta.environments.create({ name: "cloud" })).id;
  });
  afterAll(async () => t?.close());

  it("creates, retrieves, updates, lists, pauses, unpauses and archives a deployment", async () => {
    const deployments = t.client.beta.deployments;
    const created = await deployments.create({
      agent: agentId,
      environment_id: envId,
      initial_events: HELLO,
      name: "orders",
      description: "answers order questions",
      metadata: { team: "support" },
      schedule: { type: "cron", expression: "0 9 * * 1-5", timezone: "America/Los_Angeles" },
    });
    expect(created).toMatchObject({
      type: "deployment",
      name: "orders",
      description: "answers order questions",
      agent: { type: "agent", id: agentId, version: 1 },
      environment_id: envId,
      initial_events: HELLO,
      metadata: { team: "support" },
      resources: [],
      vault_ids: [],
      status: "active",
      paused_reason: null,
      archived_at: null,
      schedule: { type: "cron", expression: "0 9 * * 1-5", timezone: "America/Los_Angeles", last_run_at: null },
    });
    expect(created.id).toMatch(/^depl_/);
    // 09:00 in Los Angeles on weekdays: 17:00 UTC in March before DST (Mar 8), then 16:00 UTC.
    expect(created.schedule?.upcoming_runs_at).toEqual([
      "2026-03-02T17:00:00.000Z",
      "2026-03-03T17:00:00.000Z",
      "2026-03-04T17:00:00.000Z",
      "2026-03-05T17:00:00.000Z",
      "2026-03-06T17:00:00.000Z",
    ]);
    expect(await deployments.retrieve(created.id)).toEqual(created);

    clock.advance(1000);
    const updated = await deployments.update(created.id, { name: "orders-v2", metadata: { team: null, tier: "gold" }, description: "" });
    expect(updated).toMatchObject({ name: "orders-v2", metadata: { tier: "gold" }, description: null });
    expect(updated.updated_at > created.updated_at).toBe(true);
    expect(await deployments.update(created.id, {})).toEqual(updated);

    const paused = await deployments.pause(created.id);
    expect(paused).toMatchObject({ status: "paused", paused_reason: { type: "manual" } });
    expect((paused.schedule?.upcoming_runs_at ?? []).length).toBe(5);
    const pausedIds: string[] = [];
    for await (const d of deployments.list({ status: "paused" })) pausedIds.push(d.id);
    expect(pausedIds).toEqual([created.id]);
    const unpaused = await deployments.unpause(created.id);
    expect(unpaused).toMatchObject({ status: "active", paused_reason: null });

    const archived = await deployments.archive(created.id);
    expect(archived).toMatchObject({ status: "active" });
    expect(archived.archived_at).not.toBeNull();
    expect(archived.schedule?.upcoming_runs_at).toEqual([]);
    expect((await deployments.archive(created.id)).archived_at).toBe(archived.archived_at);
    const live: string[] = [];
    for await (const d of deployments.list()) live.push(d.id);
    expect(live).not.toContain(created.id);
    const all: string[] = [];
    for await (const d of deployments.list({ include_archived: true })) all.push(d.id);
    expect(all).toContain(created.id);
    expect((await errorOf(deployments.update(created.id, { name: "x" }))).status).toBe(400);
    expect((await errorOf(deployments.pause(created.id))).status).toBe(400);
    expect((await errorOf(deployments.run(created.id))).status).toBe(400);
  });

  it("rejects bad input with 400 naming the field and unknown ids with 404", async () => {
    const deployments = t.client.beta.deployments;
    const base = { agent: agentId, environment_id: envId, initial_events: HELLO, name: "bad" };
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ schedule: { type: "cron", expression: "@daily", timezone: "UTC" } }, /schedule.*5 fields/],
      [{ schedule: { type: "cron", expression: "0 0 L * *", timezone: "UTC" } }, /schedule.*unsupported syntax/],
      [{ schedule: { type: "cron", expression: "0 9 * * *", timezone: "Mars/Olympus" } }, /schedule.*IANA/],
      [{ initial_events: [] }, /initial_events/],
      [{ agent: "agent_missing" }, /agent/],
      [{ environment_id: "env_missing" }, /environment_id/],
      [{ vault_ids: ["vlt_missing"] }, /vault_ids/],
    ];
    for (const [patch, message] of cases) {
      const err = await errorOf(deployments.create({ ...base, ...patch } as never));
      expect(err.status).toBe(400);
      expect(err.message).toMatch(message);
    }
    expect(await errorOf(deployments.retrieve("depl_missing"))).toBeInstanceOf(Anthropic.NotFoundError);
    expect(await errorOf(t.client.beta.deploymentRuns.retrieve("drun_missing"))).toBeInstanceOf(Anthropic.NotFoundError);
    expect((await errorOf(deployments.list({ status: "paused", include_archived: true }))).status).toBe(400);
  });

  it("runs now: each run an immutable record of the session it created, or of the failure", async () => {
    const deployment = await t.client.beta.deployments.create({
      agent: agentId,
      environment_id: envId,
      initial_events: HELLO,
      name: "manual",
    });
    const run = await t.client.beta.deployments.run(deployment.id);
    expect(run).toMatchObject({
      type: "deployment_run",
      deployment_id: deployment.id,
      agent: { type: "agent", id: agentId, version: 1 },
      error: null,
      trigger_context: { type: "manual" },
    });
    expect(run.id).toMatch(/^drun_/);
    const session = await t.client.beta.sessions.retrieve(run.session_id as string);
    expect(session).toMatchObject({ environment_id: envId, agent: { id: agentId, version: 1 } });
    expect((session as unknown as { deployment_id: string }).deployment_id).toBe(deployment.id);
    expect((await t.client.beta.sessions.list({ deployment_id: deployment.id })).data.map((s) => s.id)).toEqual([session.id]);
    expect((await t.client.beta.sessions.list({ deployment_id: "depl_none" })).data).toEqual([]);
    const events: string[] = [];
    for await (const e of t.client.beta.sessions.events.list(session.id)) events.push(e.type);
    expect(events).toEqual(["user.message"]);
    expect(await t.client.beta.deploymentRuns.retrieve(run.id)).toEqual(run);

    // A paused deployment still runs on demand; an archived environment makes the run a recorded failure.
    await t.client.beta.deployments.pause(deployment.id);
    const env2 = await t.client.beta.environments.create({ name: "doomed" });
    await t.client.beta.deployments.update(deployment.id, { environment_id: env2.id });
    await t.client.beta.environments.archive(env2.id);
    const failed = await t.client.beta.deployments.run(deployment.id);
    expect(failed).toMatchObject({ session_id: null, error: { type: "environment_archived_error" }, trigger_context: { type: "manual" } });

    const runs: string[] = [];
    for await (const r of t.client.beta.deploymentRuns.list({ deployment_id: deployment.id })) runs.push(r.id);
    expect(runs).toEqual([failed.id, run.id]);
    const errored: string[] = [];
    for await (const r of t.client.beta.deploymentRuns.list({ deployment_id: deployment.id, has_error: true })) errored.push(r.id);
    expect(errored).toEqual([failed.id]);
    const manual: string[] = [];
    for await (const r of t.client.beta.deploymentRuns.list({ deployment_id: deployment.id, trigger_type: "schedule" })) manual.push(r.id);
    expect(manual).toEqual([]);
    const none = await t.client.beta.deploymentRuns.list({ deployment_id: "depl_missing" });
    expect(none.data).toEqual([]);
  });

  it("fires a schedule once per occurrence, at most one catch-up after downtime, none while paused", async () => {
    const deps = automationDeps(t.store.storage, clock);
    const scheduler = testScheduler(deps);
    const deployment = await t.client.beta.deployments.create({
      agent: agentId,
      environment_id: envId,
      initial_events: HELLO,
      name: "minutely",
      schedule: { type: "cron", expression: "*/5 * * * *", timezone: "UTC" },
    });
    const scheduledRuns = async () => {
      const out: string[] = [];
      for await (const r of t.client.beta.deploymentRuns.list({ deployment_id: deployment.id, trigger_type: "schedule" })) {
        out.push((r.trigger_context as { scheduled_at: string }).scheduled_at);
      }
      return out.reverse();
    };
    const at = (iso: string) => Date.parse(iso) - clock.now();
    clock.advance(at("2026-03-02T08:59:59.000Z"));
    expect((await scheduler.tick()).fired).toBe(0);
    clock.advance(at("2026-03-02T09:00:00.000Z"));
    expect((await scheduler.tick()).fired).toBe(1);
    clock.advance(at("2026-03-02T09:04:59.000Z"));
    expect((await scheduler.tick()).fired).toBe(0);
    clock.advance(at("2026-03-02T09:05:00.000Z"));
    expect((await scheduler.tick()).fired).toBe(1);
    expect((await scheduler.tick()).fired).toBe(0);
    expect(await scheduledRuns()).toEqual(["2026-03-02T09:00:00.000Z", "2026-03-02T09:05:00.000Z"]);

    // Down for 32 minutes: six occurrences missed, one catch-up run (the newest), then the schedule resumes.
    clock.advance(at("2026-03-02T09:37:00.000Z"));
    expect((await scheduler.tick()).fired).toBe(1);
    expect((await scheduler.tick()).fired).toBe(0);
    clock.advance(at("2026-03-02T09:40:00.000Z"));
    await scheduler.tick();
    expect((await scheduledRuns()).slice(1)).toEqual(["2026-03-02T09:05:00.000Z", "2026-03-02T09:35:00.000Z", "2026-03-02T09:40:00.000Z"]);
    const current = await t.client.beta.deployments.retrieve(deployment.id);
    expect(current.schedule?.last_run_at).toBe("2026-03-02T09:40:00.000Z");

    // Paused across two occurrences, unpaused between them and the next: nothing fires for the paused time.
    await t.client.beta.deployments.pause(deployment.id);
    clock.advance(at("2026-03-02T09:51:00.000Z"));
    await scheduler.tick();
    await t.client.beta.deployments.unpause(deployment.id);
    await scheduler.tick();
    clock.advance(at("2026-03-02T09:55:00.000Z"));
    await scheduler.tick();
    expect((await scheduledRuns()).slice(4)).toEqual(["2026-03-02T09:55:00.000Z"]);
  });

  it("pauses a schedule whose agent was archived, recording the failed run", async () => {
    const deps = automationDeps(t.store.storage, clock);
    const scheduler = testScheduler(deps);
    const agent = await t.client.beta.agents.create({ name: "short-lived", model: "claude-sonnet-4-5" });
    const deployment = await t.client.beta.deployments.create({
      agent: agent.id,
      environment_id: envId,
      initial_events: HELLO,
      name: "orphan",
      schedule: { type: "cron", expression: "* * * * *", timezone: "UTC" },
    });
    await t.client.beta.agents.archive(agent.id);
    clock.advance(60_000);
    await scheduler.tick();
    const runs = await t.client.beta.deploymentRuns.list({ deployment_id: deployment.id });
    expect(runs.data).toHaveLength(1);
    expect(runs.data[0]).toMatchObject({
      session_id: null,
      error: { type: "agent_archived_error" },
      trigger_context: { type: "schedule" },
    });
    expect(await t.client.beta.deployments.retrieve(deployment.id)).toMatchObject({
      status: "paused",
      paused_reason: { type: "error", error: { type: "agent_archived_error" } },
    });
    clock.advance(60_000);
    await scheduler.tick();
    expect((await t.client.beta.deploymentRuns.list({ deployment_id: deployment.id })).data).toHaveLength(1);
  });
});
