/**
 * The work queue below the HTTP layer: long-poll waiting, race-free enqueue,
 * claims, lease CAS, and the sweep of stopping items whose holder vanished.
 */
import { ManualClock, newId, toIso } from "@openma/storage";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { type ApiDeps, silentLogger } from "./context.ts";
import { ApiError } from "./errors.ts";
import { appendEvents } from "./event-log.ts";
import { ensureSessionWork, stopSessionWork } from "./session-work.ts";
import { ackWork, claimWork, heartbeatWork, NO_HEARTBEAT, queueStats, renderWork, stopWork, waitForWork, workTopic } from "./work-queue.ts";

describe("waitForWork", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  function fakeBus() {
    const listeners = new Set<() => void>();
    return {
      subscribe: (cb: () => void) => {
        listeners.add(cb);
        return () => listeners.delete(cb);
      },
      publish: () => {
        for (const cb of listeners) cb();
      },
      listeners,
    };
  }

  it("returns at once when the first try finds work, and without blocking when blockMs is 0", async () => {
    const bus = fakeBus();
    expect(await waitForWork({ subscribe: bus.subscribe, claim: async () => "item", blockMs: 999 })).toBe("item");
    const claim = vi.fn(async () => null);
    expect(await waitForWork({ subscribe: bus.subscribe, claim, blockMs: 0 })).toBeNull();
    expect(claim).toHaveBeenCalledTimes(1);
    expect(bus.listeners.size).toBe(0);
  });

  it("tries again on a wake-up and gives up at the deadline without another try", async () => {
    vi.useFakeTimers();
    const bus = fakeBus();
    const results: Array<string | null> = [null, null, "late"];
    const claim = vi.fn(async () => results.shift() ?? null);
    const waiting = waitForWork({ subscribe: bus.subscribe, claim, blockMs: 500 });
    await vi.advanceTimersByTimeAsync(100);
    expect(claim).toHaveBeenCalledTimes(1);
    bus.publish();
    await vi.advanceTimersByTimeAsync(0);
    expect(claim).toHaveBeenCalledTimes(2);
    await vi.advanceTimersByTimeAsync(400);
    expect(await waiting).toBeNull();
    expect(claim).toHaveBeenCalledTimes(2);
    expect(bus.listeners.size).toBe(0);
  });

  it("notices a wake-up that arrives while a try is running", async () => {
    vi.useFakeTimers();
    const bus = fakeBus();
    let calls = 0;
    const claim = async () => {
      calls++;
      if (calls === 1) {
        bus.publish(); // an enqueue committed between the read and the wait
        return null;
      }
      return "found";
    };
    expect(await waitForWork({ subscribe: bus.subscribe, claim, blockMs: 500 })).toBe("found");
  });

  it("stops waiting when the client goes away", async () => {
    const bus = fakeBus();
    const controller = new AbortController();
    const waiting = waitForWork({ subscribe: bus.subscribe, claim: async () => null, blockMs: 60_000, signal: controller.signal });
    controller.abort();
    expect(await waiting).toBeNull();
    expect(bus.listeners.size).toBe(0);
  });
});

describe.each(BACKENDS)("work queue on %s", (dialect) => {
  let store: TestStorage;
  let deps: ApiDeps;
  let clock: ManualClock;
  const env = "env_test";

  beforeAll(async () => {
    store = await openTestStorage(dialect);
    clock = new ManualClock();
    deps = {
      storage: store.storage,
      clock,
      ids: newId,
      logger: silentLogger,
      configuredApiKeyHashes: new Set(),
      publicBaseUrl: undefined,
      workTtlSeconds: 30,
      sse: { keepAliveMs: 15_000 },
    };
  });
  afterAll(async () => store?.cleanup());

  const enqueue = (sessionId: string) => store.storage.db.transaction().execute((trx) => ensureSessionWork(trx, deps, env, sessionId));
  const liveItems = (sessionId: string) =>
    store.storage.db
      .selectFrom("work_items")
      .select(["id", "state"])
      .where("session_id", "=", sessionId)
      .where("state", "!=", "stopped")
      .execute();

  it("creates exactly one live item per session under concurrent enqueues", async () => {
    const sessionId = newId("sesn");
    const results = await Promise.all(Array.from({ length: 8 }, () => enqueue(sessionId)));
    expect(results.filter((r) => r.created)).toHaveLength(1);
    expect(new Set(results.map((r) => r.workId)).size).toBe(1);
    expect(await liveItems(sessionId)).toHaveLength(1);
  });

  it("hands one item to exactly one of several concurrent pollers", async () => {
    const environmentId = newId("env");
    await store.storage.db.transaction().execute((trx) => ensureSessionWork(trx, deps, environmentId, newId("sesn")));
    const claims = await Promise.all(
      Array.from({ length: 6 }, () => claimWork(deps, environmentId, { reclaimOlderThanMs: 5000, workerId: undefined })),
    );
    expect(claims.filter((c) => c !== null)).toHaveLength(1);
  });

  it("hands out the trace context of the request that created the item, and none without one", async () => {
    const environmentId = newId("env");
    const enqueueIn = (sessionId: string, traceparent?: string) =>
      store.storage.db.transaction().execute((trx) => ensureSessionWork(trx, deps, environmentId, sessionId, traceparent));
    const claimed = async () => {
      const claim = await claimWork(deps, environmentId, { reclaimOlderThanMs: 5000, workerId: undefined });
      if (!claim) throw new Error("no work item to claim");
      return renderWork(claim.row);
    };
    const first = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const traced = newId("sesn");
    await enqueueIn(traced, first);
    // A later request finds the item live: the item stays in the first request's trace.
    await enqueueIn(traced, "00-11111111111111111111111111111111-2222222222222222-01");
    expect(await claimed()).toMatchObject({ data: { id: traced }, traceparent: first });
    await enqueueIn(newId("sesn"));
    expect(await claimed()).not.toHaveProperty("traceparent");
  });

  it("stops gracefully or by force, and enqueues anew once the item is stopped", async () => {
    const unpolled = newId("sesn");
    const { workId: w1 } = await enqueue(unpolled);
    await store.storage.db.transaction().execute((trx) => stopSessionWork(trx, deps, unpolled, { force: false }));
    // Nobody was handed the item, so there is nobody to wait for.
    expect(await liveItems(unpolled)).toEqual([]);
    const again = await enqueue(unpolled);
    expect(again.created).toBe(true);
    expect(again.workId).not.toBe(w1);

    const held = newId("sesn");
    const environmentId = newId("env");
    const { workId } = await store.storage.db.transaction().execute((trx) => ensureSessionWork(trx, deps, environmentId, held));
    expect(await claimWork(deps, environmentId, { reclaimOlderThanMs: 5000, workerId: "w" })).not.toBeNull();
    await ackWork(deps, environmentId, workId);
    await store.storage.db.transaction().execute((trx) => stopSessionWork(trx, deps, held, { force: false }));
    expect(await liveItems(held)).toEqual([{ id: workId, state: "stopping" }]);
    // While the holder's lease runs, the stopping item stays the session's live item.
    expect(await store.storage.db.transaction().execute((trx) => ensureSessionWork(trx, deps, environmentId, held))).toEqual({
      workId,
      created: false,
    });
    // Once the lease is gone nobody will ever stop it: the next enqueue finishes it off.
    clock.advance(91_000);
    const fresh = await store.storage.db.transaction().execute((trx) => ensureSessionWork(trx, deps, environmentId, held));
    expect(fresh.created).toBe(true);

    await store.storage.db.transaction().execute((trx) => stopSessionWork(trx, deps, held, { force: true }));
    expect(await liveItems(held)).toEqual([]);
    await expect(stopWork(deps, environmentId, fresh.workId, true)).rejects.toMatchObject({ status: 409 });
  });

  it("never hands out the same last_heartbeat twice, even on a frozen clock", async () => {
    const environmentId = newId("env");
    const { workId } = await store.storage.db.transaction().execute((trx) => ensureSessionWork(trx, deps, environmentId, newId("sesn")));
    await ackWork(deps, environmentId, workId);
    const opts = (expected: string) => ({ expected, desiredTtlSeconds: undefined });
    const first = await heartbeatWork(deps, environmentId, workId, opts(NO_HEARTBEAT));
    const second = await heartbeatWork(deps, environmentId, workId, opts(first.last_heartbeat));
    expect(second.last_heartbeat > first.last_heartbeat).toBe(true);
    const stale = await heartbeatWork(deps, environmentId, workId, opts(first.last_heartbeat)).catch((e: unknown) => e);
    expect(stale).toBeInstanceOf(ApiError);
    expect((stale as ApiError).status).toBe(412);
    // Omitting the expectation beats against the current value.
    const third = await heartbeatWork(deps, environmentId, workId, { expected: undefined, desiredTtlSeconds: 5 });
    expect(third).toMatchObject({ lease_extended: true, state: "active", ttl_seconds: 5 });
  });

  describe("stopping items whose holder vanished", () => {
    const TTL_MS = 30_000; // deps.workTtlSeconds
    const claimOpts = { reclaimOlderThanMs: 5000, workerId: "w" };

    /** A session row as the sessions routes would have created it (the requeue reads its status and log). */
    async function newSession(environmentId: string): Promise<string> {
      const id = newId("sesn");
      const now = toIso(clock.now());
      await store.storage.db
        .insertInto("sessions")
        .values({
          id,
          agent_id: "agent_test",
          agent_version: 1,
          environment_id: environmentId,
          status: "running",
          body: "{}",
          last_seq: 0,
          created_at: now,
          updated_at: now,
          archived_at: null,
        })
        .execute();
      return id;
    }

    /** A user message, then the enqueue the events route does for it. */
    async function say(environmentId: string, sessionId: string, text: string) {
      await appendEvents(deps, sessionId, [{ type: "user.message", fields: { content: [{ type: "text", text }] }, dedupeKey: null }]);
      return store.storage.db.transaction().execute((trx) => ensureSessionWork(trx, deps, environmentId, sessionId));
    }

    /** A session with a message whose item a worker claimed, acked and heartbeat (its lease runs TTL_MS from now). */
    async function heldSession(environmentId: string) {
      const sessionId = await newSession(environmentId);
      const { workId } = await say(environmentId, sessionId, "first");
      const claimed = await claimWork(deps, environmentId, claimOpts);
      expect(claimed?.row.id).toBe(workId);
      await ackWork(deps, environmentId, workId);
      const beat = await heartbeatWork(deps, environmentId, workId, { expected: NO_HEARTBEAT, desiredTtlSeconds: undefined });
      expect(beat).toMatchObject({ lease_extended: true, ttl_seconds: TTL_MS / 1000 });
      return { sessionId, workId, beat };
    }

    const itemOf = (workId: string) =>
      store.storage.db.selectFrom("work_items").select(["state", "stopped_at"]).where("id", "=", workId).executeTakeFirstOrThrow();

    it("stops the item once its lease has run out, not before, and enqueues the input it did not serve", async () => {
      const environmentId = newId("env");
      const held = await heldSession(environmentId);
      // Input lands while the item is held (it stays the live item), then the session is interrupted.
      expect(await say(environmentId, held.sessionId, "while held")).toEqual({ workId: held.workId, created: false });
      await store.storage.db.transaction().execute((trx) => stopSessionWork(trx, deps, held.sessionId, { force: false }));
      // The holder dies here: no further heartbeat, no stop.

      clock.advance(TTL_MS - 1);
      expect(await claimWork(deps, environmentId, claimOpts)).toBeNull();
      expect(await queueStats(deps, environmentId)).toMatchObject({ depth: 0 });
      expect(await itemOf(held.workId)).toEqual({ state: "stopping", stopped_at: null });

      clock.advance(1);
      const next = await claimWork(deps, environmentId, claimOpts);
      expect(await itemOf(held.workId)).toEqual({ state: "stopped", stopped_at: toIso(clock.now()) });
      expect(next?.row).toMatchObject({ session_id: held.sessionId, state: "queued" });
      expect(next?.row.id).not.toBe(held.workId);
      // The dead holder's last beat now only reports the stop.
      expect(
        await heartbeatWork(deps, environmentId, held.workId, { expected: held.beat.last_heartbeat, desiredTtlSeconds: undefined }),
      ).toMatchObject({ lease_extended: false, state: "stopped" });
    });

    it("leaves the stopping item of a holder whose lease still runs to that holder", async () => {
      const environmentId = newId("env");
      const dead = await heldSession(environmentId);
      clock.advance(TTL_MS / 2);
      const live = await heldSession(environmentId);
      for (const { sessionId } of [dead, live]) {
        await say(environmentId, sessionId, "while held");
        await store.storage.db.transaction().execute((trx) => stopSessionWork(trx, deps, sessionId, { force: false }));
      }

      clock.advance(TTL_MS / 2);
      // Stats sweep as well: the dead holder's session shows up as waiting work, the live one does not,
      // and long-polling workers are woken for it.
      const publish = vi.spyOn(store.storage.bus, "publish");
      try {
        expect(await queueStats(deps, environmentId)).toMatchObject({ depth: 1 });
        expect(publish).toHaveBeenCalledWith(workTopic(environmentId));
      } finally {
        publish.mockRestore();
      }
      expect((await itemOf(dead.workId)).state).toBe("stopped");
      expect((await itemOf(live.workId)).state).toBe("stopping");
      expect((await liveItems(dead.sessionId)).map((i) => i.state)).toEqual(["queued"]);

      // The live holder learns of the stop and stops its item itself, which requeues its session's input.
      expect(
        await heartbeatWork(deps, environmentId, live.workId, { expected: live.beat.last_heartbeat, desiredTtlSeconds: undefined }),
      ).toMatchObject({
        state: "stopping",
      });
      expect((await stopWork(deps, environmentId, live.workId, true)).state).toBe("stopped");
      expect((await liveItems(live.sessionId)).map((i) => i.state)).toEqual(["queued"]);
    });

    it("gives an unacked hand-out the reclaim window, and enqueues nothing when the session needs no work", async () => {
      const environmentId = newId("env");
      const sessionId = await newSession(environmentId);
      const { workId } = await say(environmentId, sessionId, "first");
      expect((await claimWork(deps, environmentId, claimOpts))?.row.id).toBe(workId);
      await stopWork(deps, environmentId, workId, false);
      // The worker may still ack what it was handed, so its hand-out counts as held for the reclaim window.
      clock.advance(claimOpts.reclaimOlderThanMs - 1);
      expect(await claimWork(deps, environmentId, claimOpts)).toBeNull();
      expect((await itemOf(workId)).state).toBe("stopping");

      clock.advance(1);
      expect(await claimWork(deps, environmentId, claimOpts)).toBeNull();
      expect((await itemOf(workId)).state).toBe("stopped");
      // The stop was asked for, and no input arrived after the item's watermark: nothing is owed.
      expect(await liveItems(sessionId)).toEqual([]);
    });
  });
});
