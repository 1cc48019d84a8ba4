/**
 * claimSandboxOwner over the real owner table (SQLite) and virtual time: the
 * record exists before anything is started and its lease is renewed while
 * held; release deletes it, abandon lets it lapse; a record taken away (or a
 * database that stops answering) ends the lease, after which the handle
 * refuses to use or rebind the sandbox.
 */
import type { SandboxOwnershipPort } from "@openma/contract";
import { SqlSandboxOwnership } from "@openma/storage/sandbox-owners";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { ManualScheduler } from "@openma/time";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimSandboxOwner } from "./sandbox-owner.ts";
import { settle } from "./testing/rig.ts";

const TTL = 6_000;
const signal = new AbortController().signal;
const scope = { environmentId: "env_owner", sessionId: "warm-pool:wp_1" };
const session = { environmentId: "env_owner", sessionId: "sesn_owner" };

describe("claimSandboxOwner", () => {
  let storage: TestStorage;
  beforeAll(async () => {
    storage = await openTestStorage("sqlite");
  });
  afterAll(async () => storage?.cleanup());

  function parts(port?: (inner: SandboxOwnershipPort) => SandboxOwnershipPort) {
    const scheduler = new ManualScheduler(Date.parse("2026-03-01T00:00:00.000Z"));
    const table = new SqlSandboxOwnership(storage.storage.db, { clock: scheduler });
    const lost: unknown[] = [];
    const claim = () =>
      claimSandboxOwner({
        port: port ? port(table) : table,
        deployment: "dep_owner",
        driver: "fake",
        scope,
        leaseTtlMs: TTL,
        idleMs: 60_000,
        scheduler,
        onLost: (end) => lost.push(end),
      });
    return { scheduler, table, lost, claim };
  }

  it("holds the record while renewing it, rebinds it to a session, and deletes it on release", async () => {
    const { scheduler, table, lost, claim } = parts();
    const owner = await claim();
    const [record] = await table.get({ ids: [owner.id], signal });
    expect(record).toMatchObject({ scope, driver: "fake", deployment: "dep_owner", lease: null });
    expect(await owner.attach({ provider: "fake", runtimeId: "rt_1" })).toBe(true);
    for (let t = 0; t < 3 * TTL; t += 1_000) {
      scheduler.advance(1_000);
      await settle();
    }
    // Renewed: still live well past its first expiry.
    expect((await table.get({ ids: [owner.id], signal }))[0]!.leaseExpiresAt).toBeGreaterThan(scheduler.now());
    expect(await owner.touch(60_000)).toBe(true);
    expect(await owner.rebind(session, 60_000)).toBe(true);
    expect((await table.get({ ids: [owner.id], signal }))[0]).toMatchObject({ scope: session });
    await owner.release();
    expect(owner.signal.aborted).toBe(true);
    expect(await table.get({ ids: [owner.id], signal })).toEqual([]);
    expect(lost).toEqual([]);
  });

  it("lets the record lapse on abandon", async () => {
    const { scheduler, table, claim } = parts();
    const owner = await claim();
    await owner.abandon();
    expect((await table.get({ ids: [owner.id], signal }))[0]!.leaseExpiresAt).toBeLessThanOrEqual(scheduler.now());
  });

  it("a record taken away ends the lease: the handle no longer uses or rebinds the sandbox", async () => {
    const { scheduler, table, lost, claim } = parts();
    const owner = await claim();
    await table.abandon({ id: owner.id, signal });
    while (!owner.signal.aborted) {
      scheduler.advance(1_000);
      await settle();
    }
    await settle();
    expect(lost).toEqual([{ type: "lost", reason: "owner lease expired" }]);
    expect(await owner.touch(60_000)).toBe(false);
    expect(await owner.rebind(session, 60_000)).toBe(false);
  });

  it("a database that stops answering: touch trusts the lease, renewals give up before expiry", async () => {
    let down = false;
    const broken = () => Promise.reject(new Error("connection reset"));
    const { scheduler, lost, claim } = parts(
      (inner) =>
        // The calls a handle makes, on the real table but for the two that meet the broken connection.
        ({
          claim: (input) => inner.claim(input),
          attach: (input) => inner.attach(input),
          renew: (input) => (down ? broken() : inner.renew(input)),
          touch: (input) => (down ? broken() : inner.touch(input)),
          rebind: (input) => inner.rebind(input),
          release: (input) => inner.release(input),
          abandon: (input) => inner.abandon(input),
        }) as Pick<SandboxOwnershipPort, "claim" | "attach" | "renew" | "touch" | "rebind" | "release" | "abandon"> as SandboxOwnershipPort,
    );
    const owner = await claim();
    down = true;
    expect(await owner.touch(60_000)).toBe(true);
    while (!owner.signal.aborted) {
      scheduler.advance(500);
      await settle();
    }
    await settle();
    expect(lost).toHaveLength(1);
    expect(lost[0]).not.toEqual({ type: "released" });
  });
});
