import { ManualScheduler } from "@openma/time";
import { describe, expect, it } from "vitest";
import { holdLease, isLeaseLostError, type LeasePolicy, type LeaseStore, type RenewResult } from "./controller.ts";

const policy: LeasePolicy = { renewEveryMs: 10_000, safetyMarginMs: 2_000, renewTimeoutMs: 5_000 };
const TTL = 30_000;

/** A store whose renewals are answered by the test, one at a time. */
class ScriptedStore implements LeaseStore<string> {
  renewals: string[] = [];
  released: string[] = [];
  private answers: Array<(r: RenewResult<string>) => void> = [];
  private waiting: Array<() => void> = [];
  releaseFails = false;

  renew(lease: string, signal: AbortSignal): Promise<RenewResult<string>> {
    this.renewals.push(lease);
    for (const w of this.waiting.splice(0)) w();
    return new Promise((resolve) => {
      this.answers.push(resolve);
      signal.addEventListener("abort", () => resolve({ type: "transient", error: "aborted" }), { once: true });
    });
  }
  async release(lease: string): Promise<void> {
    this.released.push(lease);
    if (this.releaseFails) throw new Error("database unavailable");
  }
  /** Resolves when renewal number `n` (1-based) has been requested. */
  untilRenewal(n: number): Promise<void> {
    if (this.renewals.length >= n) return Promise.resolve();
    return new Promise((resolve) => this.waiting.push(() => (this.renewals.length >= n ? resolve() : this.untilRenewal(n).then(resolve))));
  }
  answer(result: RenewResult<string>): void {
    const next = this.answers.shift();
    if (!next) throw new Error("no renewal is waiting");
    next(result);
  }
}

async function settle(): Promise<void> {
  for (let i = 0; i < 10; i++) await Promise.resolve();
}

describe("holdLease", () => {
  it("renews on schedule, adopts the renewed value, and releases the latest value", async () => {
    const clock = new ManualScheduler(0);
    const store = new ScriptedStore();
    const held = holdLease(store, { lease: "t1", expiresAt: TTL }, policy, clock);
    await clock.untilSleeping();
    clock.advance(10_000);
    await store.untilRenewal(1);
    expect(store.renewals).toEqual(["t1"]);
    store.answer({ type: "renewed", lease: "t2", expiresAt: 10_000 + TTL });
    await settle();
    expect(held.current).toBe("t2");
    expect(held.signal.aborted).toBe(false);
    await expect(held.release()).resolves.toEqual({ type: "released" });
    expect(store.released).toEqual(["t2"]);
    expect(held.signal.aborted).toBe(true);
    await expect(held.release()).resolves.toEqual({ type: "released" });
    expect(store.released).toHaveLength(1);
  });

  it("ends at once when the store reports the lease lost, aborting the protected work", async () => {
    const clock = new ManualScheduler(0);
    const store = new ScriptedStore();
    const held = holdLease(store, { lease: "t1", expiresAt: TTL }, policy, clock);
    await clock.untilSleeping();
    clock.advance(10_000);
    await store.untilRenewal(1);
    store.answer({ type: "lost", reason: "reclaimed by another host" });
    await expect(held.ended).resolves.toEqual({ type: "lost", reason: "reclaimed by another host" });
    expect(held.signal.aborted).toBe(true);
    expect(isLeaseLostError(held.signal.reason)).toBe(true);
    // A lost lease is not released: another holder owns it now.
    await held.release();
    expect(store.released).toEqual([]);
  });

  it("rides out transient failures, but declares loss before the recorded expiry", async () => {
    const clock = new ManualScheduler(0);
    const store = new ScriptedStore();
    const held = holdLease(store, { lease: "t1", expiresAt: TTL }, policy, clock);
    for (const at of [10_000, 20_000]) {
      await clock.untilSleeping();
      clock.advance(at - clock.now());
      await store.untilRenewal(store.renewals.length + 1);
      store.answer({ type: "transient", error: "connection reset" });
      await settle();
      expect(held.signal.aborted).toBe(false);
    }
    // The next sleep is cut short at expiry - margin (28 s), not the regular 30 s.
    await clock.untilSleeping();
    clock.advance(8_000);
    await store.untilRenewal(3);
    store.answer({ type: "transient", error: "connection reset" });
    await expect(held.ended).resolves.toEqual({ type: "lost", reason: "could not renew before expiry" });
    expect(clock.now()).toBe(28_000);
  });

  it("abandons a renewal that hangs past its timeout", async () => {
    const clock = new ManualScheduler(0);
    const store = new ScriptedStore();
    const held = holdLease(store, { lease: "t1", expiresAt: TTL }, { ...policy, renewEveryMs: 25_000 }, clock);
    await clock.untilSleeping();
    clock.advance(25_000);
    await store.untilRenewal(1);
    await clock.untilSleeping(); // the renewal's timeout
    clock.advance(5_000);
    await expect(held.ended).resolves.toEqual({ type: "lost", reason: "could not renew before expiry" });
  });

  it("treats a store that throws as a failed lease", async () => {
    const clock = new ManualScheduler(0);
    const store: LeaseStore<string> = {
      renew: async () => {
        throw new Error("boom");
      },
      release: async () => {},
    };
    const held = holdLease(store, { lease: "t1", expiresAt: TTL }, policy, clock);
    await clock.untilSleeping();
    clock.advance(10_000);
    await expect(held.ended).resolves.toEqual({ type: "failed", error: "boom" });
    expect(held.signal.aborted).toBe(true);
  });

  it("refuses to hold a lease that is already inside its safety margin", async () => {
    const clock = new ManualScheduler(0);
    const held = holdLease(new ScriptedStore(), { lease: "t1", expiresAt: 1_000 }, policy, clock);
    await expect(held.ended).resolves.toEqual({ type: "lost", reason: "claimed lease was already expiring" });
  });

  it("still ends as released when the release statement fails (the lease then just expires)", async () => {
    const clock = new ManualScheduler(0);
    const store = new ScriptedStore();
    store.releaseFails = true;
    const held = holdLease(store, { lease: "t1", expiresAt: TTL }, policy, clock);
    await expect(held.release()).resolves.toEqual({ type: "released" });
    expect(held.signal.aborted).toBe(true);
  });
});
