/**
 * A rolling restart under load: two `openma serve` processes and one runtime
 * host on one Postgres, behind a load balancer, serve 50 sessions (44 on a
 * cloud environment, 6 on a self-hosted one whose runtime host runs each
 * turn's official worker in a bubblewrap sandbox) while each server in turn
 * gets SIGTERM mid-turn (every session's model request is held by the test's
 * clock at that moment) and is restarted. Every session completes both of
 * its turns; its log has no duplicate and exactly one answer per turn; the
 * scripted model saw exactly one request per turn, so no turn ran twice; and
 * every runtime host run completed. Nothing waits on the wall clock for
 * logic: the model answers when the test advances its clock, and the drains
 * are observed in the servers' output.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import { silentLogger } from "@openma/api";
import type { RuntimeRunResult } from "@openma/host";
import { type RunningRuntimeHost, startRuntimeHost } from "@openma/runtime-host";
import { ManualScheduler, type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Balancer, startBalancer } from "../support/balancer.ts";
import { type ChildServer, startServeProcess } from "../support/child-server.ts";
import { until } from "../support/until.ts";
import { allEvents, createSelfHostedEnvironment, type LoggedEvent } from "../support/worker-e2e.ts";

const MODEL_KEY = "sk-scripted-rolling";
const API_KEY = "sk-ant-api03-rolling-admin-key-0123456789";
const SESSIONS = 50;
const SELF_HOSTED = 6;
const ANSWER_DELAY_MS = 1_000;

describe("a rolling restart of two servers and a runtime host on one Postgres", () => {
  let store: TestStorage;
  let clock: ManualScheduler;
  let model: ScriptedModel;
  let balancer: Balancer;
  let runtimeHost: RunningRuntimeHost | undefined;
  let stateDir: string;
  const children: ChildServer[] = [];
  const runs: Array<{ sessionId: string; result: RuntimeRunResult }> = [];

  beforeAll(async () => {
    store = await openTestStorage("postgres");
    clock = new ManualScheduler();
    model = await startScriptedModel({
      apiKey: MODEL_KEY,
      scheduler: clock,
      script: [{ delay: { first_byte_ms: ANSWER_DELAY_MS }, response: "answered", times: 10 * SESSIONS }],
    });
    balancer = await startBalancer([]);
    stateDir = await mkdtemp(join(tmpdir(), "openma-rolling-rh-"));
  });
  afterAll(async () => {
    await runtimeHost?.close();
    for (const c of children) await c.kill9();
    await balancer?.close();
    await model?.close();
    await store?.cleanup();
    await rm(stateDir, { recursive: true, force: true });
  });

  async function serve(): Promise<ChildServer> {
    const child = await startServeProcess({
      apiKey: API_KEY,
      postgres: store,
      env: {
        OPENMA_BRAIN: "on",
        OPENMA_SANDBOX: "none",
        OPENMA_AUTO_PROVISION: "off",
        OPENMA_SCHEDULER: "off",
        OPENMA_MODEL_BASE_URL: model.url,
        OPENMA_MODEL_API_KEY: MODEL_KEY,
        // Room for every session's turn at once, so all of them are in flight when a server is stopped.
        OPENMA_EXECUTION_CONCURRENCY: String(SESSIONS),
        OPENMA_DRAIN_TIMEOUT_MS: "600000",
        LOG_LEVEL: "info",
      },
    });
    children.push(child);
    balancer.upstreams.push(Number(new URL(child.baseURL).port));
    return child;
  }

  /**
   * SIGTERM while `held` model requests wait on the clock: the balancer stops sending it new connections (its
   * `/ready` says draining), the clock releases the requests, it exits 0, and a fresh server takes its place.
   */
  async function restart(server: ChildServer, held: number): Promise<ChildServer> {
    await clock.untilSleeping(held);
    server.signal("SIGTERM");
    await server.waitForOutput(/"msg":"draining/);
    expect((await fetch(`${server.baseURL}/ready`)).status).toBe(503);
    balancer.upstreams.splice(balancer.upstreams.indexOf(Number(new URL(server.baseURL).port)), 1);
    clock.advance(ANSWER_DELAY_MS);
    expect(await server.exited).toBe(0);
    return serve();
  }

  // Only bounds a broken run: 50 sessions through two restarts on a loaded CI machine can take over the default minute.
  const BROKEN_RUN_MS = 240_000;
  const answered = (events: LoggedEvent[]) => events.filter((e) => e.type === "agent.message").length;
  const requestsOf = (sessionId: string) =>
    model.requests.filter((r) => (r.body as { metadata?: { user_id?: string } }).metadata?.user_id === sessionId).length;

  it("completes every session's turns exactly once while each server in turn is restarted", async () => {
    let a = await serve();
    let b = await serve();
    const client = new Anthropic({ baseURL: balancer.url, apiKey: API_KEY, maxRetries: 4 });
    const send = (sessionId: string, text: string) =>
      client.beta.sessions.events.send(sessionId, { events: [{ type: "user.message", content: [{ type: "text", text }] }] });

    const cloud = (await client.beta.environments.create({ name: "cloud" })).id;
    const selfHosted = await createSelfHostedEnvironment(client, "rolling-self-hosted");
    runtimeHost = await startRuntimeHost({
      driver: "bubblewrap",
      apiUrl: balancer.url,
      environmentId: selfHosted.id,
      environmentKey: selfHosted.key,
      storage: store.storage,
      stateDir,
      logger: silentLogger,
      concurrency: SELF_HOSTED,
      workerMaxIdleMs: 200,
      onResult: (ticket, result) => runs.push({ sessionId: ticket.sessionId, result }),
    });
    const agent = (await client.beta.agents.create({ name: "rolling", model: "claude-test-1" })).id;
    const sessions: string[] = [];
    for (let i = 0; i < SESSIONS; i += 1) {
      const environment_id = i < SESSIONS - SELF_HOSTED ? cloud : selfHosted.id;
      sessions.push((await client.beta.sessions.create({ agent, environment_id })).id);
    }

    // Turn 1 of every session; A is stopped while all of them wait for the model.
    await Promise.all(sessions.map((id) => send(id, "first")));
    a = await restart(a, SESSIONS);
    await until(
      async () => (await Promise.all(sessions.map(async (id) => answered(await allEvents(client, id))))).every((n) => n === 1),
      "every first turn",
      BROKEN_RUN_MS,
    );

    // Turn 2; now B is stopped mid-turn.
    await Promise.all(sessions.map((id) => send(id, "second")));
    b = await restart(b, SESSIONS);
    await until(
      async () => {
        const logs = await Promise.all(sessions.map((id) => allEvents(client, id)));
        return logs.every((events) => answered(events) === 2 && events.at(-1)?.type === "session.status_idle");
      },
      "every second turn",
      BROKEN_RUN_MS,
    );

    for (const id of sessions) {
      const events = await allEvents(client, id);
      expect(new Set(events.map((e) => e.id)).size).toBe(events.length);
      expect(events.filter((e) => e.type === "user.message")).toHaveLength(2);
      expect(answered(events)).toBe(2);
      expect(events.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "end_turn" } });
      // One model request per turn: no turn was run twice, by either server.
      expect(requestsOf(id)).toBe(2);
    }
    // The runtime host served the self-hosted sessions' work through both restarts: once every Work item has
    // stopped, each had one run, every run completed, and every self-hosted session had at least one.
    const workItems = () =>
      store.storage.db.selectFrom("work_items").select(["state"]).where("environment_id", "=", selfHosted.id).execute();
    await until(
      async () => {
        const items = await workItems();
        return items.length > 0 && items.every((w) => w.state === "stopped") && runs.length === items.length;
      },
      "the self-hosted sessions' Work to stop",
      BROKEN_RUN_MS,
    );
    expect(runs.filter((r) => r.result.type !== "completed").map((r) => r.result)).toEqual([]);
    expect(new Set(runs.map((r) => r.sessionId))).toEqual(new Set(sessions.slice(SESSIONS - SELF_HOSTED)));

    for (const server of [a, b]) {
      server.signal("SIGTERM");
      expect(await server.exited).toBe(0);
    }
  }, 600_000);
});
