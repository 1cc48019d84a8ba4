/** The execution queue's SQL transitions, on both backends. */
import { hashSecret, newId } from "@openma/storage";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimNext, type ExecutionClaim, executionRow, forgetSession, releaseClaim, renewClaim, requestTurn } from "./queue.ts";

const TTL = 30_000;

describe.each(BACKENDS)("execution queue on %s", (dialect) => {
  let t: TestStorage;
  let now = 1_000_000;
  beforeAll(async () => {
    t = await openTestStorage(dialect);
  });
  afterAll(async () => t?.cleanup());

  const db = () => t.storage.db;
  const request = (sessionId: string, at = now) =>
    db()
      .transaction()
      .execute((trx) => requestTurn(trx, sessionId, at));
  const claim = (at = now) => claimNext(db(), dialect, { nowMs: at, ttlMs: TTL, ownerPrefix: "test" });
  const row = async (sessionId: string) => {
    const r = await executionRow(db(), sessionId);
    if (!r) throw new Error(`no execution row for ${sessionId}`);
    return r;
  };
  /** Claims until the given session comes up (other tests' rows may be ahead in the queue). */
  async function claimOf(sessionId: string, at = now): Promise<ExecutionClaim> {
    const others: ExecutionClaim[] = [];
    try {
      for (let i = 0; i < 100; i++) {
        const c = await claim(at);
        if (!c) break;
        if (c.sessionId === sessionId) return c;
        others.push(c);
      }
      throw new Error(`session ${sessionId} was not claimable`);
    } finally {
      for (const o of others) await releaseClaim(db(), o, { type: "requeue" });
    }
  }

  it("keeps the trace context of the first request since the last claim", async () => {
    const id = newId("sesn");
    const tp = (n: number) => `00-${String(n).padStart(32, "0")}-${String(n).padStart(16, "0")}-01`;
    const requestTraced = (traceparent: string | null) =>
      db()
        .transaction()
        .execute((trx) => requestTurn(trx, id, now, traceparent));
    await requestTraced(tp(1));
    // Coalesced into the pending turn: the first request's context stays.
    await requestTraced(tp(2));
    const first = await claimOf(id);
    expect(first.traceparent).toBe(tp(1));
    // Input during the turn asks for the next one, whose trace is the first such request's.
    await requestTraced(tp(3));
    await requestTraced(tp(4));
    expect(await releaseClaim(db(), first, { type: "settle" })).toBe("pending");
    const second = await claimOf(id);
    expect(second.traceparent).toBe(tp(3));
    expect(await releaseClaim(db(), second, { type: "settle" })).toBe("idle");
    // An untraced request: the next turn does not reuse the last one's context.
    await requestTraced(null);
    const third = await claimOf(id);
    expect(third.traceparent).toBeNull();
    await releaseClaim(db(), third, { type: "settle" });
  });

  it("claims a pending session once, storing only a hash of the token", async () => {
    const id = newId("sesn");
    await request(id);
    expect(await row(id)).toMatchObject({ state: "pending", requested_version: 1, claimed_version: 0, attempts: 0 });
    const c = await claimOf(id);
    expect(c).toMatchObject({ sessionId: id, generation: 1, expiresAt: now + TTL, attempts: 1 });
    expect(c.ownerId).toMatch(/^test:exo_/);
    const stored = await row(id);
    expect(stored).toMatchObject({ state: "running", owner_id: c.ownerId, token_hash: hashSecret(c.token), claimed_version: 1 });
    expect(JSON.stringify(stored)).not.toContain(c.token);
    // Held and unexpired: nobody else can take it.
    for (let i = 0; i < 20; i++) {
      const other = await claim();
      if (!other) break;
      expect(other.sessionId).not.toBe(id);
      await releaseClaim(db(), other, { type: "requeue" });
    }
  });

  it("takes exactly one row per claim", async () => {
    const ids = Array.from({ length: 3 }, () => newId("sesn"));
    for (const id of ids) await request(id);
    const c = await claim();
    expect(c).not.toBeNull();
    const owned = await db()
      .selectFrom("session_executions")
      .select("session_id")
      .where("owner_id", "=", c?.ownerId ?? "")
      .execute();
    expect(owned).toEqual([{ session_id: c?.sessionId }]);
    if (c) await releaseClaim(db(), c, { type: "settle" });
  });

  it("gives each of several concurrent claimers a different session", async () => {
    const ids = Array.from({ length: 6 }, () => newId("sesn"));
    for (const id of ids) await request(id);
    const claims = (await Promise.all(Array.from({ length: 24 }, () => claim()))).filter((c) => c !== null);
    const mine = claims.filter((c) => ids.includes(c.sessionId));
    // Every claimed session has exactly one winner, whatever the interleaving.
    expect(new Set(claims.map((c) => c.sessionId)).size).toBe(claims.length);
    for (const c of claims) expect((await row(c.sessionId)).owner_id).toBe(c.ownerId);
    for (const c of claims) await releaseClaim(db(), c, { type: "settle" });
    expect(mine.length).toBeGreaterThan(0);
  });

  it("renews only with the current owner and token, and only before expiry", async () => {
    const id = newId("sesn");
    await request(id);
    const c = await claimOf(id);
    expect(await renewClaim(db(), c, now + 10_000, TTL)).toBe(now + 10_000 + TTL);
    expect(await renewClaim(db(), { ...c, token: "sxt_forged" }, now + 10_000, TTL)).toBeNull();
    expect(await renewClaim(db(), { ...c, ownerId: "someone-else" }, now + 10_000, TTL)).toBeNull();
    expect(await renewClaim(db(), c, now + 10_000 + TTL, TTL)).toBeNull(); // expired: too late
  });

  it("reclaims an expired lease with a new generation; the old holder is fenced out", async () => {
    const id = newId("sesn");
    await request(id);
    const crashed = await claimOf(id);
    const later = now + TTL;
    const reclaimed = await claimOf(id, later);
    expect(reclaimed).toMatchObject({ generation: 2, attempts: 2 });
    expect(reclaimed.ownerId).not.toBe(crashed.ownerId);
    expect(await renewClaim(db(), crashed, later, TTL)).toBeNull();
    expect(await releaseClaim(db(), crashed, { type: "settle" })).toBeNull();
    expect((await row(id)).owner_id).toBe(reclaimed.ownerId);
    expect(await releaseClaim(db(), reclaimed, { type: "settle" })).toBe("idle");
    expect(await row(id)).toMatchObject({ state: "idle", owner_id: reclaimed.ownerId, token_hash: null, expires_at_ms: 0, attempts: 0 });
  });

  it("goes straight back to pending when input arrived during the turn", async () => {
    const id = newId("sesn");
    await request(id);
    const c = await claimOf(id);
    await request(id, now + 5); // a user event while running
    expect(await row(id)).toMatchObject({ state: "running", requested_version: 2, claimed_version: 1 });
    expect(await releaseClaim(db(), c, { type: "settle" })).toBe("pending");
    const next = await claimOf(id);
    expect(await releaseClaim(db(), next, { type: "settle" })).toBe("idle");
    await request(id, now + 10);
    expect(await row(id)).toMatchObject({ state: "pending", requested_version: 3, requested_at_ms: now + 10 });
  });

  it("requeues, retries after a backoff, and gives up", async () => {
    const id = newId("sesn");
    await request(id);
    const first = await claimOf(id);
    expect(await releaseClaim(db(), first, { type: "retry", availableAtMs: now + 2_000, error: "x".repeat(5000) })).toBe("pending");
    const stored = await row(id);
    expect(stored).toMatchObject({ state: "pending", available_at_ms: now + 2_000, attempts: 1 });
    expect(stored.last_error?.length).toBeLessThanOrEqual(1000);
    await expect(claimOf(id, now + 1_999)).rejects.toThrow(/not claimable/);
    const second = await claimOf(id, now + 2_000);
    expect(second.attempts).toBe(2);
    expect(await releaseClaim(db(), second, { type: "requeue" })).toBe("pending");
    const third = await claimOf(id, now + 2_000);
    expect(third.attempts).toBe(3); // a requeue without new input keeps counting
    expect(await releaseClaim(db(), third, { type: "hand_back" })).toBe("pending");
    expect(await row(id)).toMatchObject({ attempts: 2 }); // a graceful shutdown does not count
    const fourth = await claimOf(id, now + 2_000);
    expect(fourth.attempts).toBe(3);
    expect(await releaseClaim(db(), fourth, { type: "give_up", error: "too many" })).toBe("idle");
    expect(await row(id)).toMatchObject({ state: "idle", attempts: 0, last_error: "too many" });
    // New input is a fresh start, even after a backoff.
    await request(id, now + 3_000);
    expect(await row(id)).toMatchObject({ state: "pending", available_at_ms: 0, attempts: 0 });
  });

  it("forgets a deleted session; its holder then loses the lease", async () => {
    const id = newId("sesn");
    await request(id);
    const c = await claimOf(id);
    await db()
      .transaction()
      .execute((trx) => forgetSession(trx, id));
    expect(await executionRow(db(), id)).toBeUndefined();
    expect(await renewClaim(db(), c, now + 1, TTL)).toBeNull();
    expect(await releaseClaim(db(), c, { type: "settle" })).toBeNull();
  });

  it("requests atomically with the caller's transaction", async () => {
    const id = newId("sesn");
    await expect(
      db()
        .transaction()
        .execute(async (trx) => {
          await requestTurn(trx, id, now);
          throw new Error("the event append failed");
        }),
    ).rejects.toThrow("the event append failed");
    expect(await executionRow(db(), id)).toBeUndefined();
    now += 1;
  });
});
