/**
 * The activation worker over the real SQL intent store (SQLite here; the
 * store's own tests run both backends) with a launcher that is idempotent by
 * key like the provider's, and time moved by hand.
 */
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { ManualScheduler } from "@openma/time";
import { afterEach, describe, expect, it } from "vitest";
import { SqlActivationIntentStore } from "./intents.ts";
import { ActivationWorker, type LaunchInput, type MicrovmLauncherPort } from "./worker.ts";

const TTL = 30_000;
const RENEW = 10_000;
const event = (id: string) => ({ eventId: id, environmentId: "env_1", workspaceId: "wrk_1", sessionId: `sesn_${id}` });

/** Idempotent by key, like RunMicrovm's clientToken; each launch can be held open by the test. */
class FakeLauncher implements MicrovmLauncherPort {
  readonly calls: LaunchInput[] = [];
  readonly byKey = new Map<string, string>();
  readonly destroyed: string[] = [];
  failNext: string | null = null;
  gate: Promise<void> | null = null;
  #entered: (() => void) | null = null;

  entered(): Promise<void> {
    return new Promise((resolve) => {
      this.#entered = resolve;
    });
  }

  async launch(input: LaunchInput): Promise<{ runtimeId: string }> {
    this.calls.push(input);
    if (!this.byKey.has(input.idempotencyKey)) this.byKey.set(input.idempotencyKey, `mvm_${this.byKey.size + 1}`);
    this.#entered?.();
    if (this.gate) await this.gate;
    if (this.failNext !== null) {
      const message = this.failNext;
      this.failNext = null;
      throw new Error(message);
    }
    return { runtimeId: this.byKey.get(input.idempotencyKey) as string };
  }

  async destroy(input: { runtimeId: string }): Promise<void> {
    this.destroyed.push(input.runtimeId);
  }
}

/** Lets the event loop turn until `done()` holds (no wall-clock wait: the work is in-process I/O). */
async function settled(done: () => boolean): Promise<void> {
  for (let i = 0; i < 10_000 && !done(); i++) await new Promise((r) => setImmediate(r));
  if (!done()) throw new Error("never settled");
}

describe("the activation worker", () => {
  let t: TestStorage;
  afterEach(async () => t?.cleanup());

  async function open() {
    t = await openTestStorage("sqlite");
    const scheduler = new ManualScheduler();
    const store = new SqlActivationIntentStore(t.storage.db, { clock: scheduler });
    const launcher = new FakeLauncher();
    const worker = (ownerId: string) =>
      new ActivationWorker({ store, launcher, ownerId, leaseTtlMs: TTL, renewEveryMs: RENEW, retryDelayMs: 1000, scheduler });
    return { scheduler, store, launcher, worker };
  }

  function gated(launcher: FakeLauncher): () => void {
    let open!: () => void;
    launcher.gate = new Promise((resolve) => {
      open = resolve;
    });
    return () => {
      launcher.gate = null;
      open();
    };
  }

  it("renews the claim while the launch is pending, then records the VM", async () => {
    const { scheduler, store, launcher, worker } = await open();
    const release = gated(launcher);
    const entered = launcher.entered();
    const outcome = worker("owner_a").activate(event("evt_1"));
    await entered;
    // Three renewals while RunMicrovm is still pending carry the lease past its first expiry.
    for (let i = 0; i < 3; i++) {
      await settled(() => scheduler.pending.includes(RENEW) && !scheduler.pending.includes(RENEW / 2));
      scheduler.advance(RENEW);
    }
    await settled(() => scheduler.pending.includes(RENEW) && !scheduler.pending.includes(RENEW / 2));
    expect(await store.claim({ ownerId: "owner_b", leaseTtlMs: TTL })).toEqual({ type: "empty" });
    release();
    expect(await outcome).toEqual({ type: "launched", eventId: "evt_1", runtimeId: "mvm_1" });
    expect(await store.get("evt_1")).toMatchObject({ state: "completed", runtimeId: "mvm_1" });
    expect(launcher.calls).toHaveLength(1);
    expect(launcher.calls[0]).toMatchObject({ activationId: "evt_1", generation: 1, attempt: 1 });
  });

  it("deduplicates concurrent deliveries of one event into one launch", async () => {
    const { launcher, worker } = await open();
    const outcomes = await Promise.all([worker("owner_a").activate(event("evt_1")), worker("owner_b").activate(event("evt_1"))]);
    expect(outcomes.map((o) => o.type).sort()).toEqual(["launched", "not_claimed"]);
    expect(launcher.calls).toHaveLength(1);
  });

  it("retries a failed launch after the delay with the intent's same idempotency key", async () => {
    const { scheduler, store, launcher, worker } = await open();
    launcher.failNext = "injected RunMicrovm failure";
    const w = worker("owner_a");
    expect(await w.activate(event("evt_1"))).toEqual({ type: "retrying", eventId: "evt_1", error: "injected RunMicrovm failure" });
    expect(await w.reconcile()).toEqual([]);
    scheduler.advance(1000);
    expect(await w.reconcile()).toEqual([{ type: "launched", eventId: "evt_1", runtimeId: "mvm_1" }]);
    expect(launcher.calls.map((c) => [c.generation, c.idempotencyKey])).toEqual([
      [1, launcher.calls[0]?.idempotencyKey],
      [2, launcher.calls[0]?.idempotencyKey],
    ]);
    expect(await store.get("evt_1")).toMatchObject({ state: "completed", attemptCount: 2 });
  });

  it("destroys the VM as an orphan when the claim was lost during launch and the intent no longer wants it", async () => {
    const { scheduler, store, launcher, worker } = await open();
    const release = gated(launcher);
    const entered = launcher.entered();
    const outcome = worker("owner_a").activate(event("evt_1"));
    await entered;
    // The session ended while its VM was launching; the next renewal finds the claim gone.
    expect(await store.cancel("evt_1")).toBe(true);
    await settled(() => scheduler.pending.includes(RENEW));
    scheduler.advance(RENEW);
    release();
    expect(await outcome).toEqual({ type: "orphan_destroyed", eventId: "evt_1", runtimeId: "mvm_1" });
    expect(launcher.destroyed).toEqual(["mvm_1"]);
  });

  it("keeps the VM when a successor adopted it under the same key after the lease expired mid-launch", async () => {
    const { scheduler, store, launcher, worker } = await open();
    const release = gated(launcher);
    const entered = launcher.entered();
    // A stalled holder: its renewals cannot reach the store until the lease has expired.
    const stalled = worker("owner_a");
    const first = stalled.activate(event("evt_1"));
    await entered;
    scheduler.advance(TTL);
    release();
    const successor = await worker("owner_b").reconcile();
    expect(successor).toEqual([{ type: "launched", eventId: "evt_1", runtimeId: "mvm_1" }]);
    expect(await first).toEqual({ type: "lost", eventId: "evt_1", runtimeId: "mvm_1" });
    expect(launcher.destroyed).toEqual([]);
    expect(new Set(launcher.calls.map((c) => c.idempotencyKey)).size).toBe(1);
    expect(await store.get("evt_1")).toMatchObject({ state: "completed", runtimeId: "mvm_1" });
  });

  it("rejects a renewal interval that is not below the TTL", async () => {
    const { store, launcher } = await open();
    expect(() => new ActivationWorker({ store, launcher, ownerId: "o", leaseTtlMs: 10, renewEveryMs: 10 })).toThrow(/renewEveryMs/);
  });
});
