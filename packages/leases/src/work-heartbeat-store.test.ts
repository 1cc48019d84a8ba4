/**
 * Holding an Environment Work item with the one lease controller, against the
 * real server through the official SDK (both backends): claim (poll, ack,
 * first beat), renewal by heartbeat CAS, loss on 412 and on a stop request,
 * release by force-stop, transient network failures. Virtual time drives the
 * controller; the server's own clock is real but never waited on.
 */
import Anthropic from "@anthropic-ai/sdk";
import { BACKENDS } from "@openma/storage/testing";
import { ManualScheduler } from "@openma/time";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../../../test/support/server.ts";
import { holdLease, type LeasePolicy, type LeaseStore, type RenewResult } from "./controller.ts";
import { claimWorkItem, NO_HEARTBEAT, STOP_REQUESTED, sessionsTokenOf, type WorkApi, WorkHeartbeatStore } from "./work-heartbeat-store.ts";

/** Wraps a store so a test can await each renewal's result. */
function observed<L>(store: LeaseStore<L>) {
  const results: RenewResult<L>[] = [];
  const waiters: Array<() => void> = [];
  const wrapped: LeaseStore<L> = {
    async renew(lease, signal) {
      const result = await store.renew(lease, signal);
      results.push(result);
      for (const w of waiters.splice(0)) w();
      return result;
    },
    release: (lease, signal) => store.release(lease, signal),
  };
  /** Resolves with renewal `n` (1-based) once the controller has acted on it. */
  const renewal = async (n: number): Promise<RenewResult<L>> => {
    while (results.length < n) await new Promise<void>((resolve) => waiters.push(resolve));
    // Let the controller's continuation (adopt the value, cancel the timeout, schedule the next sleep) run first.
    await new Promise<void>((resolve) => setImmediate(resolve));
    return results[n - 1] as RenewResult<L>;
  };
  return { store: wrapped, renewal };
}

const policy: LeasePolicy = { renewEveryMs: 10_000, safetyMarginMs: 5_000, renewTimeoutMs: 5_000 };
const TTL_SECONDS = 60;

describe.each(BACKENDS)("work heartbeat store on %s", (dialect) => {
  let t: TestServer;
  let agentId: string;
  beforeAll(async () => {
    t = await startTestServer(dialect, { OPENMA_WORK_TTL_SECONDS: String(TTL_SECONDS) });
    agentId = (await t.client.beta.agents.create({ name: "hands", model: "claude-sonnet-4-5" })).id;
  });
  afterAll(async () => t?.close());

  /** A self-hosted environment with one queued item (a session with a first message). */
  async function queuedItem() {
    const env = (await t.client.beta.environments.create({ name: "fleet", config: { type: "self_hosted" } })) as unknown as {
      id: string;
      environment_key: string;
    };
    const session = await t.client.beta.sessions.create({
      agent: agentId,
      environment_id: env.id,
      initial_events: [{ type: "user.message", content: [{ type: "text", text: "hello" }] }],
    } as Anthropic.Beta.Sessions.SessionCreateParams);
    return { environmentId: env.id, fleet: t.clientWith(env.environment_key).beta.environments.work, sessionId: session.id };
  }

  async function claim(clock: ManualScheduler) {
    const { environmentId, fleet, sessionId } = await queuedItem();
    const claimed = await claimWorkItem({
      fleet,
      environmentId,
      holderFor: (token) => t.clientWith(token).beta.environments.work,
      scheduler: clock,
      workerId: "runtime-host-1",
    });
    if (!claimed) throw new Error("nothing was claimed");
    return { ...claimed, environmentId, sessionId };
  }

  const retrieve = (environmentId: string, workId: string) =>
    t.client.beta.environments.work.retrieve(workId, { environment_id: environmentId });

  it("claims with poll, ack and a first beat, then renews by heartbeat CAS", async () => {
    const clock = new ManualScheduler(0);
    const c = await claim(clock);
    expect(c.work.data).toEqual({ type: "session", id: c.sessionId });
    expect(c.sessionsToken).toMatch(/^sk-ant-req-/);
    expect(c.claimed.lease.lastHeartbeat).not.toBe(NO_HEARTBEAT);
    expect(c.claimed.expiresAt).toBe(TTL_SECONDS * 1000);
    expect(await retrieve(c.environmentId, c.work.id)).toMatchObject({
      state: "active",
      latest_heartbeat_at: c.claimed.lease.lastHeartbeat,
    });

    const spy = observed(c.store);
    const held = holdLease(spy.store, c.claimed, policy, clock);
    await clock.untilSleeping();
    clock.advance(policy.renewEveryMs);
    expect(await spy.renewal(1)).toMatchObject({ type: "renewed", expiresAt: policy.renewEveryMs + TTL_SECONDS * 1000 });
    expect(held.current.lastHeartbeat).not.toBe(c.claimed.lease.lastHeartbeat);
    expect(held.signal.aborted).toBe(false);
    const item = await retrieve(c.environmentId, c.work.id);
    expect(item.latest_heartbeat_at).toBe(held.current.lastHeartbeat);

    await expect(held.release()).resolves.toEqual({ type: "released" });
    expect(await retrieve(c.environmentId, c.work.id)).toMatchObject({ state: "stopped" });
    // Releasing an item that is already stopped (a 409) is still a release.
    await expect(c.store.release(held.current, new AbortController().signal)).resolves.toBeUndefined();
  });

  it("loses the lease on a 412 when another holder beat first, and does not stop the item", async () => {
    const clock = new ManualScheduler(0);
    const c = await claim(clock);
    const held = holdLease(c.store, c.claimed, policy, clock);
    // Another holder (e.g. after a reclaim) advanced the CAS value.
    await t.clientWith(c.sessionsToken).beta.environments.work.heartbeat(c.work.id, {
      environment_id: c.environmentId,
      expected_last_heartbeat: c.claimed.lease.lastHeartbeat,
    });
    await clock.untilSleeping();
    clock.advance(policy.renewEveryMs);
    await expect(held.ended).resolves.toEqual({ type: "lost", reason: "heartbeat precondition failed: another holder has the lease" });
    expect(held.signal.aborted).toBe(true);
    expect((await retrieve(c.environmentId, c.work.id)).state).toBe("active");
  });

  it("loses the lease when the item is being stopped", async () => {
    const clock = new ManualScheduler(0);
    const c = await claim(clock);
    const held = holdLease(c.store, c.claimed, policy, clock);
    await t.client.beta.environments.work.stop(c.work.id, { environment_id: c.environmentId, force: false });
    await clock.untilSleeping();
    clock.advance(policy.renewEveryMs);
    await expect(held.ended).resolves.toEqual({ type: "lost", reason: STOP_REQUESTED });
    // The holder winds down and force-stops, as the official worker does.
    await c.store.release(held.current, new AbortController().signal);
    expect((await retrieve(c.environmentId, c.work.id)).state).toBe("stopped");
  });

  it("treats an unreachable server as transient and declares loss only before expiry", async () => {
    const clock = new ManualScheduler(0);
    const c = await claim(clock);
    const offline = new Anthropic({ baseURL: "http://127.0.0.1:9", apiKey: null, authToken: c.sessionsToken, maxRetries: 0 });
    const store = new WorkHeartbeatStore(offline.beta.environments.work, clock);
    const result = await store.renew(c.claimed.lease, new AbortController().signal);
    expect(result.type).toBe("transient");
    const spy = observed(store);
    const held = holdLease(spy.store, c.claimed, policy, clock);
    // Renewals at 10, 20, 30, 40, 50 s fail; the one at 55 s (expiry minus the margin) is the last chance.
    for (let n = 1; n <= 6; n++) {
      await clock.untilSleeping();
      clock.advance(clock.pending[0] ?? 0);
      expect((await spy.renewal(n)).type).toBe("transient");
    }
    await expect(held.ended).resolves.toEqual({ type: "lost", reason: "could not renew before expiry" });
    expect(clock.now()).toBe(c.claimed.expiresAt - policy.safetyMarginMs);
  });

  it("rejects a sessions token of another item as lost (fatal 4xx)", async () => {
    const clock = new ManualScheduler(0);
    const a = await claim(clock);
    const b = await claim(clock);
    const wrong = new WorkHeartbeatStore(t.clientWith(b.sessionsToken).beta.environments.work, clock);
    expect(await wrong.renew(a.claimed.lease, new AbortController().signal)).toEqual({
      type: "lost",
      reason: "heartbeat rejected with status 403",
    });
  });
});

describe("work heartbeat store responses", () => {
  const lease = { environmentId: "env_1", workId: "work_1", lastHeartbeat: "2026-01-01T00:00:00.000Z" };
  const signal = new AbortController().signal;
  const answering = (answer: () => Promise<unknown>): WorkApi => ({
    heartbeat: () => answer() as ReturnType<WorkApi["heartbeat"]>,
    stop: () => answer(),
  });
  const httpError = (status: number) => Object.assign(new Error(`status ${status}`), { status });

  it("maps each response to renewed, lost or transient", async () => {
    const clock = new ManualScheduler(1_000);
    const beat = (fields: object) =>
      new WorkHeartbeatStore(
        answering(async () => ({ last_heartbeat: "b2", lease_extended: true, state: "active", ttl_seconds: 30, ...fields })),
        clock,
      );
    expect(await beat({}).renew(lease, signal)).toEqual({ type: "renewed", lease: { ...lease, lastHeartbeat: "b2" }, expiresAt: 31_000 });
    expect(await beat({ lease_extended: false }).renew(lease, signal)).toMatchObject({ type: "lost" });
    expect(await beat({ state: "stopped" }).renew(lease, signal)).toEqual({ type: "lost", reason: STOP_REQUESTED });
    expect(await beat({ ttl_seconds: 0 }).renew(lease, signal)).toMatchObject({ type: "lost" });
    for (const status of [408, 409, 429, 500, 503]) {
      const store = new WorkHeartbeatStore(
        answering(() => Promise.reject(httpError(status))),
        clock,
      );
      expect(await store.renew(lease, signal)).toEqual({ type: "transient", error: `heartbeat failed with status ${status}` });
    }
    for (const status of [400, 401, 404]) {
      const store = new WorkHeartbeatStore(
        answering(() => Promise.reject(httpError(status))),
        clock,
      );
      expect(await store.renew(lease, signal)).toEqual({ type: "lost", reason: `heartbeat rejected with status ${status}` });
    }
  });

  it("propagates a failed stop other than 409 (the controller then lets the lease expire)", async () => {
    const store = new WorkHeartbeatStore(
      answering(() => Promise.reject(httpError(500))),
      new ManualScheduler(0),
    );
    await expect(store.release(lease, signal)).rejects.toThrow("status 500");
  });

  it("decodes the item secret in base64url or base64, and nothing else", () => {
    const json = JSON.stringify({ sessions_token: "sk-ant-req-abc?>" });
    expect(sessionsTokenOf(Buffer.from(json).toString("base64url"))).toBe("sk-ant-req-abc?>");
    expect(sessionsTokenOf(Buffer.from(json).toString("base64"))).toBe("sk-ant-req-abc?>");
    expect(sessionsTokenOf(null)).toBeNull();
    expect(sessionsTokenOf("not base64 json")).toBeNull();
    expect(sessionsTokenOf(Buffer.from(JSON.stringify({ sessions_token: "" })).toString("base64url"))).toBeNull();
  });
});
