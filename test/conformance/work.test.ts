/**
 * The self-hosted Work API through the official SDK, on both storage
 * backends. The server runs on a ManualClock so leases and reclaim windows are
 * driven by the test, never by waiting.
 */
import { EventEmitter, once } from "node:events";
import Anthropic from "@anthropic-ai/sdk";
import { BetaEnvironmentNotFoundError, BetaInvalidMetadataError } from "@anthropic-ai/sdk/resources/beta/environments/index";
import { BetaHeartbeatPreconditionFailedError } from "@anthropic-ai/sdk/resources/beta/environments/work";
import { type ApiDeps, silentLogger } from "@openma/api";
import { type ChangeBus, type Dialect, ManualClock, newId, type Storage } from "@openma/storage";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { loadConfig } from "../../apps/openma/src/config.ts";
import { type RunningServer, startServer } from "../../apps/openma/src/server.ts";
import { ensureSessionWork } from "../../packages/api/src/session-work.ts";
import { notifyWork, workTopic } from "../../packages/api/src/work-queue.ts";
import { TEST_API_KEY } from "../support/server.ts";

const TTL_SECONDS = 60;

interface ClockedServer {
  store: TestStorage;
  server: RunningServer;
  baseURL: string;
  client: Anthropic;
  clientWith(token: string): Anthropic;
  clock: ManualClock;
  deps: ApiDeps;
  /** Emits a topic name whenever the server subscribes to it (a long-poll started waiting). */
  subscriptions: EventEmitter;
  close(): Promise<void>;
}

/** Like startTestServer, plus an injected clock and a bus that reports subscriptions. */
async function startClockedServer(dialect: Dialect): Promise<ClockedServer> {
  const store = await openTestStorage(dialect);
  const clock = new ManualClock();
  const subscriptions = new EventEmitter();
  const inner = store.storage.bus;
  const bus: ChangeBus = {
    publish: (topic) => inner.publish(topic),
    subscribe: (topic, cb) => {
      const unsubscribe = inner.subscribe(topic, cb);
      subscriptions.emit("subscribed", topic);
      return unsubscribe;
    },
    broadcast: (topic, payload) => inner.broadcast(topic, payload),
    listen: (topic, cb) => inner.listen(topic, cb),
    close: () => inner.close(),
  };
  const storage: Storage = { ...store.storage, bus };
  const config = loadConfig({
    PORT: "0",
    OPENMA_DATA_DIR: store.dataDir,
    OPENMA_API_KEY: TEST_API_KEY,
    OPENMA_WORK_TTL_SECONDS: String(TTL_SECONDS),
    LOG_LEVEL: "silent",
  });
  const server = await startServer(config, { storage, logger: silentLogger, deps: { clock } });
  const deps: ApiDeps = {
    storage,
    clock,
    ids: newId,
    logger: silentLogger,
    configuredApiKeyHashes: new Set(),
    publicBaseUrl: server.url,
    workTtlSeconds: TTL_SECONDS,
    sse: { keepAliveMs: 15_000 },
  };
  return {
    store,
    server,
    baseURL: server.url,
    client: new Anthropic({ baseURL: server.url, apiKey: TEST_API_KEY, maxRetries: 0 }),
    clientWith: (token) => new Anthropic({ baseURL: server.url, apiKey: null, authToken: token, maxRetries: 0 }),
    clock,
    deps,
    subscriptions,
    async close() {
      await server.close();
      await store.cleanup();
    },
  };
}

function decodeSecret(secret: string | null): { sessions_token: string; api_base_url?: string } {
  expect(secret).toBeTypeOf("string");
  return JSON.parse(Buffer.from(secret as string, "base64url").toString("utf8"));
}

describe.each(BACKENDS)("work on %s", (dialect) => {
  let t: ClockedServer;
  let envId: string;
  let envKey: string;
  let fleet: Anthropic;

  beforeAll(async () => {
    t = await startClockedServer(dialect);
  });
  afterAll(async () => t?.close());

  async function newEnvironment() {
    // `environment_key` is an OpenMA extension field the SDK's type does not know.
    const env = (await t.client.beta.environments.create({
      name: "fleet",
      config: { type: "self_hosted" },
    })) as Anthropic.Beta.BetaEnvironment & {
      environment_key: string;
    };
    return { id: env.id, key: env.environment_key };
  }

  beforeEach(async () => {
    ({ id: envId, key: envKey } = await newEnvironment());
    fleet = t.clientWith(envKey);
  });

  async function enqueue(environmentId = envId, sessionId = newId("sesn")) {
    const result = await t.deps.storage.db.transaction().execute((trx) => ensureSessionWork(trx, t.deps, environmentId, sessionId));
    await notifyWork(t.deps, environmentId);
    return { ...result, sessionId };
  }

  async function pollOne(opts: Anthropic.Beta.Environments.WorkPollParams = {}) {
    const work = await fleet.beta.environments.work.poll(envId, opts);
    expect(work).not.toBeNull();
    const item = work as Anthropic.Beta.Environments.BetaSelfHostedWork;
    return { item, token: decodeSecret(item.secret).sessions_token };
  }

  it("polls, acks, heartbeats and stops one item", async () => {
    const { workId, sessionId } = await enqueue();
    const { item, token } = await pollOne({ "Anthropic-Worker-ID": "worker-1" });
    expect(item).toMatchObject({
      type: "work",
      id: workId,
      environment_id: envId,
      data: { type: "session", id: sessionId },
      state: "queued",
      metadata: {},
      acknowledged_at: null,
      started_at: null,
      latest_heartbeat_at: null,
      stop_requested_at: null,
      stopped_at: null,
    });
    const secret = decodeSecret(item.secret);
    expect(secret.sessions_token).toMatch(/^sk-ant-req-/);
    expect(secret.api_base_url).toBe(t.baseURL);

    const work = fleet.beta.environments.work;
    const acked = await work.ack(workId, { environment_id: envId });
    expect(acked).toMatchObject({ state: "starting", secret: null });
    expect(acked.acknowledged_at).toBe(new Date(t.clock.now()).toISOString());
    expect((await work.ack(workId, { environment_id: envId })).state).toBe("starting"); // a retried ack is harmless

    const worker = t.clientWith(token).beta.environments.work;
    const first = await worker.heartbeat(workId, { environment_id: envId, expected_last_heartbeat: "NO_HEARTBEAT" });
    expect(first).toEqual({
      type: "work_heartbeat",
      last_heartbeat: new Date(t.clock.now()).toISOString(),
      lease_extended: true,
      state: "active",
      ttl_seconds: TTL_SECONDS,
    });
    t.clock.advance(1000);
    const second = await worker.heartbeat(workId, { environment_id: envId, expected_last_heartbeat: first.last_heartbeat });
    expect(second.last_heartbeat).not.toBe(first.last_heartbeat);
    const shorter = await worker.heartbeat(workId, {
      environment_id: envId,
      expected_last_heartbeat: second.last_heartbeat,
      desired_ttl_seconds: 10,
    });
    expect(shorter.ttl_seconds).toBe(10);
    const clamped = await worker.heartbeat(workId, {
      environment_id: envId,
      expected_last_heartbeat: shorter.last_heartbeat,
      desired_ttl_seconds: 1000,
    });
    expect(clamped.ttl_seconds).toBe(TTL_SECONDS);

    const stale = await worker
      .heartbeat(workId, { environment_id: envId, expected_last_heartbeat: first.last_heartbeat })
      .catch((e: unknown) => e);
    expect(stale).toBeInstanceOf(BetaHeartbeatPreconditionFailedError);
    expect(stale).toBeInstanceOf(Anthropic.PreconditionFailedError);
    expect((stale as BetaHeartbeatPreconditionFailedError).details.current_state).toEqual({
      last_heartbeat: clamped.last_heartbeat,
      lease_extended: false,
      state: "active",
      ttl_seconds: TTL_SECONDS,
    });
    const again = await worker
      .heartbeat(workId, { environment_id: envId, expected_last_heartbeat: "NO_HEARTBEAT" })
      .catch((e: unknown) => e);
    expect(again).toBeInstanceOf(BetaHeartbeatPreconditionFailedError);

    const retrieved = await t.client.beta.environments.work.retrieve(workId, { environment_id: envId });
    expect(retrieved).toMatchObject({ state: "active", secret: null, latest_heartbeat_at: clamped.last_heartbeat });
    expect(retrieved.started_at).toBe(first.last_heartbeat);

    const stopping = await worker.stop(workId, { environment_id: envId });
    expect(stopping).toMatchObject({ state: "stopping", stopped_at: null });
    expect(stopping.stop_requested_at).not.toBeNull();
    // Stopping items report their state without comparing the lease.
    const told = await worker.heartbeat(workId, { environment_id: envId, expected_last_heartbeat: "not-the-last-one" });
    expect(told).toEqual({
      type: "work_heartbeat",
      last_heartbeat: clamped.last_heartbeat,
      lease_extended: false,
      state: "stopping",
      ttl_seconds: TTL_SECONDS,
    });

    const stopped = await worker.stop(workId, { environment_id: envId, force: true });
    expect(stopped).toMatchObject({ state: "stopped", stop_requested_at: stopping.stop_requested_at });
    expect(stopped.stopped_at).not.toBeNull();

    const twice = await worker.stop(workId, { environment_id: envId, force: true }).catch((e: unknown) => e);
    expect(twice).toBeInstanceOf(Anthropic.ConflictError);
    expect((twice as InstanceType<typeof Anthropic.ConflictError>).headers.get("x-should-retry")).toBe("false");
    // The token died with the item everywhere else.
    await expect(worker.heartbeat(workId, { environment_id: envId })).rejects.toBeInstanceOf(Anthropic.AuthenticationError);
    await expect(work.ack(workId, { environment_id: envId })).rejects.toBeInstanceOf(Anthropic.ConflictError);
  });

  it("serves the SDK's own WorkPoller: poll, ack, yield, stop", async () => {
    const a = await enqueue();
    t.clock.advance(1);
    const b = await enqueue();
    const seen: Array<{ id: string; state: string; token: string }> = [];
    const poller = t.client.beta.environments.work.poller({
      environmentId: envId,
      environmentKey: envKey,
      workerId: "sdk-poller",
      drain: true,
      blockMs: null,
    });
    for await (const item of poller) seen.push({ id: item.id, state: item.state, token: decodeSecret(item.secret).sessions_token });
    expect(seen.map((s) => s.id)).toEqual([a.workId, b.workId]);
    for (const { id } of seen) {
      // Acked before it was yielded, stopped (gracefully) after the loop body.
      const item = await t.client.beta.environments.work.retrieve(id, { environment_id: envId });
      expect(item.acknowledged_at).not.toBeNull();
      expect(item.state).toBe("stopping");
    }
    expect(await t.client.beta.environments.work.stats(envId)).toMatchObject({ depth: 0, pending: 0, workers_polling: 1 });
  });

  it("answers an empty poll with 204, which the SDK returns as null", async () => {
    expect(await fleet.beta.environments.work.poll(envId)).toBeNull();
    expect(await fleet.beta.environments.work.poll(envId, { block_ms: 1 })).toBeNull();
    const res = await fetch(`${t.baseURL}/v1/environments/${envId}/work/poll`, { headers: { authorization: `Bearer ${envKey}` } });
    expect(res.status).toBe(204);
    expect(await res.text()).toBe("");
    const tooLong = await fleet.beta.environments.work.poll(envId, { block_ms: 1000 }).catch((e: unknown) => e);
    expect(tooLong).toBeInstanceOf(Anthropic.BadRequestError);
    expect((tooLong as Error).message).toContain("query.block_ms");
  });

  it("wakes a blocked poll when work is enqueued", async () => {
    const waiting = once(t.subscriptions, "subscribed", { signal: AbortSignal.timeout(5000) });
    const polled = fleet.beta.environments.work.poll(envId, { block_ms: 999 });
    const [topic] = await waiting;
    expect(topic).toBe(workTopic(envId));
    const { workId } = await enqueue();
    const item = await polled;
    expect(item?.id).toBe(workId);
  });

  it("reclaims an item that was not acked in time, rotating its token", async () => {
    const { workId } = await enqueue();
    const first = await pollOne();
    expect(await fleet.beta.environments.work.poll(envId)).toBeNull(); // handed out, not yet reclaimable

    t.clock.advance(5001);
    const second = await pollOne();
    expect(second.item.id).toBe(workId);
    expect(second.token).not.toBe(first.token);
    await expect(
      t
        .clientWith(first.token)
        .beta.environments.work.heartbeat(workId, { environment_id: envId, expected_last_heartbeat: "NO_HEARTBEAT" }),
    ).rejects.toBeInstanceOf(Anthropic.AuthenticationError);

    const third = await pollOne({ reclaim_older_than_ms: 0 });
    expect(third.item.id).toBe(workId);
    await expect(t.clientWith(second.token).beta.environments.work.ack(workId, { environment_id: envId })).rejects.toBeInstanceOf(
      Anthropic.AuthenticationError,
    );
    const acked = await t.clientWith(third.token).beta.environments.work.ack(workId, { environment_id: envId });
    expect(acked.state).toBe("starting");
    t.clock.advance(60_000);
    expect(await fleet.beta.environments.work.poll(envId)).toBeNull(); // acked items are not reclaimed by the ack window
  });

  it("offers an item again when its lease expires", async () => {
    const { workId } = await enqueue();
    const first = await pollOne();
    await fleet.beta.environments.work.ack(workId, { environment_id: envId });

    // Before the first beat the lease is 90 s, as the worker assumes.
    t.clock.advance(89_000);
    expect(await fleet.beta.environments.work.poll(envId)).toBeNull();
    t.clock.advance(2000);
    const second = await pollOne();
    expect(second.item).toMatchObject({ id: workId, state: "queued", acknowledged_at: null });
    await expect(
      t
        .clientWith(first.token)
        .beta.environments.work.heartbeat(workId, { environment_id: envId, expected_last_heartbeat: "NO_HEARTBEAT" }),
    ).rejects.toBeInstanceOf(Anthropic.AuthenticationError);

    // After a beat the lease is the reported ttl.
    const worker = t.clientWith(second.token).beta.environments.work;
    await worker.ack(workId, { environment_id: envId });
    const beat = await worker.heartbeat(workId, { environment_id: envId, expected_last_heartbeat: "NO_HEARTBEAT" });
    t.clock.advance((beat.ttl_seconds - 1) * 1000);
    expect(await fleet.beta.environments.work.poll(envId)).toBeNull();
    t.clock.advance(2000);
    const third = await pollOne();
    expect(third.item.id).toBe(workId);
    // The previous holder is fenced even with the environment key: its lease state was reset.
    const lost = await fleet.beta.environments.work
      .heartbeat(workId, { environment_id: envId, expected_last_heartbeat: beat.last_heartbeat })
      .catch((e: unknown) => e);
    expect(lost).toBeInstanceOf(BetaHeartbeatPreconditionFailedError);
    expect((lost as BetaHeartbeatPreconditionFailedError).details.current_state).toMatchObject({ state: "queued", last_heartbeat: null });
  });

  it("returns the exact 412 body on a lost lease", async () => {
    const { workId } = await enqueue();
    await pollOne();
    const res = await fetch(
      `${t.baseURL}/v1/environments/${envId}/work/${workId}/heartbeat?expected_last_heartbeat=2020-01-01T00:00:00.000Z`,
      {
        method: "POST",
        headers: { authorization: `Bearer ${envKey}` },
      },
    );
    expect(res.status).toBe(412);
    const body = await res.json();
    expect(body).toEqual({
      type: "error",
      error: {
        type: "invalid_request_error",
        message: expect.any(String),
        details: {
          error_code: "heartbeat_precondition_failed",
          current_state: { last_heartbeat: null, lease_extended: false, state: "queued", ttl_seconds: TTL_SECONDS },
        },
      },
      request_id: res.headers.get("request-id"),
    });
  });

  it("lists an environment's items for its key only, with auto-pagination", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await enqueue()).workId);
    const seen: string[] = [];
    for await (const item of fleet.beta.environments.work.list(envId, { limit: 2 })) {
      expect(item.secret).toBeNull();
      seen.push(item.id);
    }
    expect(seen).toEqual([...ids].reverse());

    await expect(t.client.beta.environments.work.list(envId)).rejects.toBeInstanceOf(Anthropic.PermissionDeniedError);
    const { token } = await pollOne();
    await expect(t.clientWith(token).beta.environments.work.list(envId)).rejects.toBeInstanceOf(Anthropic.PermissionDeniedError);
    const other = await newEnvironment();
    await expect(t.clientWith(other.key).beta.environments.work.list(envId)).rejects.toBeInstanceOf(Anthropic.PermissionDeniedError);
  });

  it("retrieves and updates an item with the API key only", async () => {
    const { workId } = await enqueue();
    const admin = t.client.beta.environments.work;
    const updated = await admin.update(workId, { environment_id: envId, metadata: { a: "1", b: "2" } });
    expect(updated).toMatchObject({ id: workId, metadata: { a: "1", b: "2" }, secret: null });
    const patched = await admin.update(workId, { environment_id: envId, metadata: { a: null, c: "3" } });
    expect(patched.metadata).toEqual({ b: "2", c: "3" });
    expect((await admin.retrieve(workId, { environment_id: envId })).metadata).toEqual({ b: "2", c: "3" });

    const tooLong = await admin.update(workId, { environment_id: envId, metadata: { k: "x".repeat(600) } }).catch((e: unknown) => e);
    expect(tooLong).toBeInstanceOf(BetaInvalidMetadataError);

    await expect(fleet.beta.environments.work.retrieve(workId, { environment_id: envId })).rejects.toBeInstanceOf(
      Anthropic.PermissionDeniedError,
    );
    await expect(fleet.beta.environments.work.update(workId, { environment_id: envId, metadata: {} })).rejects.toBeInstanceOf(
      Anthropic.PermissionDeniedError,
    );
    const { token } = await pollOne();
    await expect(t.clientWith(token).beta.environments.work.retrieve(workId, { environment_id: envId })).rejects.toBeInstanceOf(
      Anthropic.PermissionDeniedError,
    );

    await expect(admin.retrieve(workId, { environment_id: "env_missing" })).rejects.toBeInstanceOf(BetaEnvironmentNotFoundError);
    await expect(admin.retrieve("work_missing", { environment_id: envId })).rejects.toBeInstanceOf(Anthropic.NotFoundError);
    await expect(admin.stop("work_missing", { environment_id: envId })).rejects.toBeInstanceOf(Anthropic.NotFoundError);
    // Ids that could never have been minted (a NUL breaks Postgres text) are simply not found.
    await expect(admin.retrieve("work_\u0000", { environment_id: envId })).rejects.toBeInstanceOf(Anthropic.NotFoundError);
    await expect(fleet.beta.environments.work.ack("work_\u0000", { environment_id: envId })).rejects.toBeInstanceOf(
      Anthropic.NotFoundError,
    );
    const nul = await fleet.beta.environments.work
      .heartbeat(workId, { environment_id: envId, expected_last_heartbeat: "\u0000" })
      .catch((e: unknown) => e);
    expect(nul).toBeInstanceOf(Anthropic.BadRequestError);
  });

  it("enforces the accept-matrix and the credential's scope", async () => {
    const { workId } = await enqueue();
    const other = await newEnvironment();
    const { workId: otherWork } = await enqueue(other.id);

    await expect(t.client.beta.environments.work.poll(envId)).rejects.toBeInstanceOf(Anthropic.PermissionDeniedError);
    await expect(t.clientWith(other.key).beta.environments.work.poll(envId)).rejects.toBeInstanceOf(Anthropic.PermissionDeniedError);
    await expect(t.client.beta.environments.work.ack(workId, { environment_id: envId })).rejects.toBeInstanceOf(
      Anthropic.PermissionDeniedError,
    );
    await expect(t.client.beta.environments.work.heartbeat(workId, { environment_id: envId })).rejects.toBeInstanceOf(
      Anthropic.PermissionDeniedError,
    );
    await expect(t.clientWith(other.key).beta.environments.work.ack(workId, { environment_id: envId })).rejects.toBeInstanceOf(
      Anthropic.PermissionDeniedError,
    );

    const { token } = await pollOne();
    const holder = t.clientWith(token).beta.environments.work;
    await expect(holder.poll(envId)).rejects.toBeInstanceOf(Anthropic.PermissionDeniedError);
    await expect(holder.ack(otherWork, { environment_id: other.id })).rejects.toBeInstanceOf(Anthropic.PermissionDeniedError);
    await expect(holder.stop(otherWork, { environment_id: other.id })).rejects.toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect((await holder.ack(workId, { environment_id: envId })).state).toBe("starting");

    // The API key may stop any item; the environment key only its environment's.
    await expect(t.clientWith(other.key).beta.environments.work.stop(workId, { environment_id: envId })).rejects.toBeInstanceOf(
      Anthropic.PermissionDeniedError,
    );
    expect((await t.clientWith(other.key).beta.environments.work.stop(otherWork, { environment_id: other.id, force: true })).state).toBe(
      "stopped",
    );
    expect((await t.client.beta.environments.work.stop(workId, { environment_id: envId, force: true })).state).toBe("stopped");
    await expect(holder.stop(workId, { environment_id: envId })).rejects.toBeInstanceOf(Anthropic.ConflictError);
  });

  it("reports queue stats", async () => {
    const stats = t.client.beta.environments.work.stats;
    expect(await t.client.beta.environments.work.stats(envId)).toEqual({
      type: "work_queue_stats",
      depth: 0,
      pending: 0,
      oldest_queued_at: null,
      workers_polling: 0,
      sandboxes: [],
    });
    expect(stats).toBeTypeOf("function");
    const a = await enqueue();
    t.clock.advance(1000);
    await enqueue();
    t.clock.advance(1000);
    await enqueue();
    await pollOne({ "Anthropic-Worker-ID": "w-1" }); // takes the oldest
    expect(await fleet.beta.environments.work.poll(envId, { "Anthropic-Worker-ID": "w-2" })).not.toBeNull();
    await fleet.beta.environments.work.poll(envId, { "Anthropic-Worker-ID": "w-2" });
    expect(await t.client.beta.environments.work.stats(envId)).toMatchObject({ depth: 0, pending: 3, workers_polling: 2 });

    t.clock.advance(5001);
    const later = await fleet.beta.environments.work.stats(envId);
    expect(later).toMatchObject({ depth: 3, pending: 0, workers_polling: 2 });
    expect(later.oldest_queued_at).toBe((await t.client.beta.environments.work.retrieve(a.workId, { environment_id: envId })).created_at);
    t.clock.advance(30_000);
    expect((await t.client.beta.environments.work.stats(envId)).workers_polling).toBe(0);

    await expect(t.client.beta.environments.work.stats("env_missing")).rejects.toBeInstanceOf(BetaEnvironmentNotFoundError);
    const other = await newEnvironment();
    await expect(t.clientWith(other.key).beta.environments.work.stats(envId)).rejects.toBeInstanceOf(Anthropic.PermissionDeniedError);
  });

  it("force-stops live work when the environment is deleted", async () => {
    const { workId } = await enqueue();
    const { token } = await pollOne();
    await t.client.beta.environments.delete(envId);
    const row = await t.deps.storage.db
      .selectFrom("work_items")
      .select(["state", "stopped_at"])
      .where("id", "=", workId)
      .executeTakeFirstOrThrow();
    expect(row.state).toBe("stopped");
    expect(row.stopped_at).not.toBeNull();
    await expect(t.clientWith(token).beta.environments.work.heartbeat(workId, { environment_id: envId })).rejects.toBeInstanceOf(
      Anthropic.AuthenticationError,
    );
    await expect(fleet.beta.environments.work.poll(envId)).rejects.toBeInstanceOf(Anthropic.AuthenticationError);
  });

  it("keeps one live item per session and validates heartbeat parameters", async () => {
    const sessionId = newId("sesn");
    const first = await enqueue(envId, sessionId);
    const second = await enqueue(envId, sessionId);
    expect(first.created).toBe(true);
    expect(second).toMatchObject({ workId: first.workId, created: false });

    const { token } = await pollOne();
    const worker = t.clientWith(token).beta.environments.work;
    const bad = await worker.heartbeat(first.workId, { environment_id: envId, desired_ttl_seconds: 0 }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(Anthropic.BadRequestError);
    expect((bad as Error).message).toContain("query.desired_ttl_seconds");
    await worker.stop(first.workId, { environment_id: envId, force: true });
    const third = await enqueue(envId, sessionId);
    expect(third.created).toBe(true);
    expect(third.workId).not.toBe(first.workId);
  });
});
