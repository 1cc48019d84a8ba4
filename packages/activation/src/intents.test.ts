import { ManualClock } from "@openma/storage";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterEach, describe, expect, it } from "vitest";
import { type ActivationClaim, idempotencyKeyFor, SqlActivationIntentStore } from "./intents.ts";

const TTL = 30_000;
const input = (eventId: string) => ({
  eventId,
  environmentId: "env_1",
  workspaceId: "wrk_1",
  sessionId: `sesn_${eventId}`,
  maxAttempts: 3,
  deadlineAtMs: Date.parse("2026-01-01T01:00:00.000Z"),
});

describe.each(BACKENDS)("SQL activation intents on %s", (dialect) => {
  let t: TestStorage;
  afterEach(async () => t?.cleanup());

  async function open() {
    t = await openTestStorage(dialect);
    const clock = new ManualClock();
    return { clock, store: new SqlActivationIntentStore(t.storage.db, { clock }) };
  }

  async function claimed(store: SqlActivationIntentStore, ownerId: string, eventId?: string): Promise<ActivationClaim> {
    const result = await store.claim({ ownerId, leaseTtlMs: TTL, ...(eventId ? { eventId } : {}) });
    if (result.type !== "claimed") throw new Error(`expected a claim, got ${result.type}`);
    return result.claim;
  }

  it("enqueues once per event with one idempotency key for the intent's whole life", async () => {
    const { store } = await open();
    const first = await store.enqueue(input("evt_a"));
    expect(first).toMatchObject({
      type: "inserted",
      intent: { state: "pending", attemptCount: 0, idempotencyKey: idempotencyKeyFor("evt_a") },
    });
    expect(first.intent.idempotencyKey).toMatch(/^act-[0-9a-f]{48}$/);
    expect(await store.enqueue(input("evt_a"))).toMatchObject({ type: "existing", intent: { eventId: "evt_a" } });
    expect(idempotencyKeyFor("evt_b")).not.toBe(first.intent.idempotencyKey);
    await expect(store.enqueue({ ...input("evt_c"), sessionId: "" })).rejects.toThrow(/sessionId/);
    await expect(store.enqueue({ ...input("evt_c"), maxAttempts: 0 })).rejects.toThrow(/maxAttempts/);
  });

  it("claims under a lease that renews while live, fences a stale holder out after takeover, and completes once", async () => {
    const { clock, store } = await open();
    await store.enqueue(input("evt_a"));
    const a = await claimed(store, "owner_a");
    expect(a).toMatchObject({ ownerId: "owner_a", generation: 1, intent: { attemptCount: 1 } });
    expect(await store.claim({ ownerId: "owner_b", leaseTtlMs: TTL })).toEqual({ type: "empty" });

    clock.advance(TTL - 1);
    expect(await store.renew(a, TTL)).toEqual({ type: "renewed", expiresAtMs: clock.now() + TTL });
    clock.advance(TTL);
    expect(await store.renew(a, TTL)).toEqual({ type: "lost" });

    const b = await claimed(store, "owner_b");
    expect(b).toMatchObject({ generation: 2, intent: { attemptCount: 2, idempotencyKey: a.intent.idempotencyKey } });
    // The stale holder can write nothing any more, even a late renewal inside its old window.
    expect(await store.complete(a, "mvm_stale")).toEqual({ type: "lost" });
    expect(await store.retry(a, { nextAttemptAtMs: clock.now(), error: "x" })).toEqual({ type: "lost" });
    expect(await store.complete(b, "mvm_1")).toEqual({ type: "completed" });
    expect(await store.complete(b, "mvm_1")).toEqual({ type: "lost" });
    expect(await store.get("evt_a")).toMatchObject({ state: "completed", runtimeId: "mvm_1" });
    expect(await store.claim({ ownerId: "owner_c", leaseTtlMs: TTL })).toEqual({ type: "empty" });
  });

  it("retries after the delay, then exhausts after maxAttempts; a past deadline exhausts without a launch", async () => {
    const { clock, store } = await open();
    await store.enqueue(input("evt_a"));
    for (let attempt = 1; attempt <= 2; attempt++) {
      const c = await claimed(store, "owner_a");
      expect(c.intent.attemptCount).toBe(attempt);
      expect(await store.retry(c, { nextAttemptAtMs: clock.now() + 1000, error: `boom ${attempt}` })).toEqual({ type: "released" });
      expect(await store.claim({ ownerId: "owner_a", leaseTtlMs: TTL })).toEqual({ type: "empty" });
      clock.advance(1000);
    }
    const last = await claimed(store, "owner_a");
    expect(await store.retry(last, { nextAttemptAtMs: clock.now() + 1000, error: "boom 3" })).toEqual({ type: "exhausted" });
    expect(await store.get("evt_a")).toMatchObject({ state: "exhausted", lastError: "boom 3", attemptCount: 3 });

    await store.enqueue({ ...input("evt_late"), deadlineAtMs: clock.now() + 10 });
    clock.advance(10);
    expect(await store.claim({ ownerId: "owner_a", leaseTtlMs: TTL })).toEqual({ type: "empty" });
    expect(await store.get("evt_late")).toMatchObject({ state: "exhausted", attemptCount: 0 });

    // A holder that crashed on its last attempt leaves an intent that expires into exhausted, not into a fourth launch.
    await store.enqueue({ ...input("evt_crash"), maxAttempts: 1 });
    await claimed(store, "owner_dead");
    clock.advance(TTL);
    expect(await store.claim({ ownerId: "owner_a", leaseTtlMs: TTL })).toEqual({ type: "empty" });
    expect(await store.counts()).toEqual({ pending: 0, completed: 0, exhausted: 3, cancelled: 0 });
  });

  it("claims a named intent or one of an environment, releases without delay, and cancels a pending one", async () => {
    const { store } = await open();
    await store.enqueue(input("evt_a"));
    await store.enqueue({ ...input("evt_b"), environmentId: "env_2" });
    expect(await store.claim({ ownerId: "o", leaseTtlMs: TTL, eventId: "evt_missing" })).toEqual({ type: "empty" });
    const b = await claimed(store, "o", "evt_b");
    expect(b.intent.environmentId).toBe("env_2");
    await store.release(b);
    const again = await store.claim({ ownerId: "o", leaseTtlMs: TTL, environmentId: "env_2" });
    expect(again).toMatchObject({ type: "claimed", claim: { generation: 2 } });
    expect(await store.cancel("evt_b")).toBe(true);
    if (again.type === "claimed") expect(await store.complete(again.claim, "mvm_x")).toEqual({ type: "lost" });
    expect(await store.cancel("evt_b")).toBe(false);
    expect(await store.counts()).toMatchObject({ pending: 1, cancelled: 1 });
  });

  it("hands each of many intents to exactly one of many concurrent claimers", async () => {
    const { store } = await open();
    for (let i = 0; i < 20; i++) await store.enqueue(input(`evt_${String(i).padStart(2, "0")}`));
    const seen: string[] = [];
    await Promise.all(
      Array.from({ length: 4 }, async (_, w) => {
        for (;;) {
          const r = await store.claim({ ownerId: `owner_${w}`, leaseTtlMs: TTL });
          if (r.type === "empty") {
            if ((await store.counts()).pending === 0 || seen.length === 20) return;
            continue;
          }
          seen.push(r.claim.intent.eventId);
          expect(await store.complete(r.claim, `mvm_${r.claim.intent.eventId}`)).toEqual({ type: "completed" });
        }
      }),
    );
    expect(seen.sort()).toEqual(Array.from({ length: 20 }, (_, i) => `evt_${String(i).padStart(2, "0")}`));
  });
});
