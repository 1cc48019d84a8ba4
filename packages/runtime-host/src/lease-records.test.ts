/**
 * The lease records of a runtime host on a driver that cannot list (ADR
 * 0028), over the real owner table (SQLite): a runtime acquired by one
 * process and never terminated (the process died) is reaped by the next
 * process of the same host from its record; a terminated one leaves no
 * record; another host's records are not touched; a reap that fails keeps
 * the record for the next start.
 */
import type { ManagedSandboxLease, OrphanReapInput, SandboxCapabilities } from "@openma/contract";
import { systemClock } from "@openma/storage";
import { SqlSandboxOwnership } from "@openma/storage/sandbox-owners";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { recordLeases } from "./lease-records.ts";
import type { RemoteSandboxDriver } from "./remote.ts";

const CAPABILITIES = {
  provider: "cloudflare-bridge",
  lifecycle: { suspendResume: "unsupported", hardTerminate: "supported", orphanReap: "host_managed" },
  facts: { has: [], lacks: ["provider_listing"] },
  credentialEgress: { enforcement: "unsupported" },
} as SandboxCapabilities;

/** A provider that holds runtimes by id and lists nothing, as the bridge. */
class Provider {
  readonly live = new Set<string>();
  readonly reaped: string[] = [];
  failReaps = false;
  #next = 0;

  driver(): RemoteSandboxDriver {
    const never = () => {
      throw new Error("not used");
    };
    return {
      capabilities: CAPABILITIES,
      acquire: async (input) => {
        if (input.idempotencyKey === "refused") return { type: "unavailable", reason: "no", retryable: false };
        const runtimeId = `rt${++this.#next}`;
        this.live.add(runtimeId);
        return { type: "acquired", lease: { provider: CAPABILITIES.provider, runtimeId } };
      },
      heartbeat: async () => ({ type: "alive" }),
      suspend: never,
      terminate: async ({ lease }) => {
        this.live.delete(lease.runtimeId);
        return { type: "terminated" };
      },
      inspect: async () => ({ state: "running" }),
      reap: async ({ lease }: OrphanReapInput) => {
        if (this.failReaps) return { type: "failed", error: "bridge down" };
        this.reaped.push(lease.runtimeId);
        return this.live.delete(lease.runtimeId) ? { type: "reaped" } : { type: "not_found" };
      },
      listOwned: async () => ({ type: "listed", runtimes: [] }),
      toolSandbox: never,
      processes: never,
      close: async () => {},
    };
  }
}

const scope = { environmentId: "env_lr", sessionId: "sess_lr" };
const fence = { scope, ownerId: "owner_lr", generation: 1, expiresAt: Date.now() + 60_000 };
const acquireInput = (idempotencyKey: string) => ({
  scope,
  fence,
  plan: undefined as never,
  workspace: { bindingId: "ws", strategy: "ephemeral" as const, mountPath: "/workspace" as const },
  outputs: null,
  idempotencyKey,
  signal: AbortSignal.timeout(10_000),
});

describe("a runtime host's lease records for a driver with no listing", () => {
  let t: TestStorage;
  let store: SqlSandboxOwnership;
  beforeEach(async () => {
    t = await openTestStorage("sqlite");
    store = new SqlSandboxOwnership(t.storage.db, { clock: systemClock });
  });
  afterEach(async () => {
    await t.cleanup();
  });

  const acquired = async (sandbox: RemoteSandboxDriver, key: string): Promise<ManagedSandboxLease> => {
    const got = await sandbox.acquire(acquireInput(key));
    if (got.type !== "acquired") throw new Error(got.reason);
    return got.lease;
  };

  it("lets the host's next process reap what a dead one acquired, and leaves no record of what was terminated", async () => {
    const provider = new Provider();
    const first = recordLeases(provider.driver(), { store, deployment: "rh-host1" });
    const other = recordLeases(provider.driver(), { store, deployment: "rh-host2" });
    const left = await acquired(first.sandbox, "a");
    const ended = await acquired(first.sandbox, "b");
    const othersHost = await acquired(other.sandbox, "c");
    expect(await first.sandbox.acquire(acquireInput("refused"))).toMatchObject({ type: "unavailable" });
    expect(await first.sandbox.terminate({ scope, fence, lease: ended, reason: "completed", signal: AbortSignal.timeout(5_000) })).toEqual({
      type: "terminated",
    });
    // The first process dies here, holding `left`.

    const next = recordLeases(provider.driver(), { store, deployment: "rh-host1" });
    expect(await next.sweep()).toBe(1);
    expect(provider.reaped).toEqual([left.runtimeId]);
    expect([...provider.live]).toEqual([othersHost.runtimeId]);
    expect(await next.sweep()).toBe(0);
    const remaining = await store.listAll({
      deployment: "rh-host2",
      driver: "cloudflare-bridge",
      limit: 10,
      signal: AbortSignal.timeout(5_000),
    });
    expect(remaining.map((r) => r.lease)).toEqual([othersHost]);
  });

  it("keeps the record when the reap fails, and clears it once a later reap (or the orphan reaper) ends the runtime", async () => {
    const provider = new Provider();
    const first = recordLeases(provider.driver(), { store, deployment: "rh-host1" });
    const lease = await acquired(first.sandbox, "a");
    provider.failReaps = true;
    const next = recordLeases(provider.driver(), { store, deployment: "rh-host1" });
    expect(await next.sweep()).toBe(0);
    expect(provider.live.has(lease.runtimeId)).toBe(true);
    provider.failReaps = false;
    expect(await next.sweep()).toBe(1);
    expect(provider.live.size).toBe(0);

    // A process killed between the claim and the attach: a record with no lease, which the sweep can only delete.
    const signal = AbortSignal.timeout(5_000);
    await store.claim({
      id: "lr-unattached",
      scope,
      driver: "cloudflare-bridge",
      deployment: "rh-host1",
      leaseTtlMs: 60_000,
      idleMs: 60_000,
      signal,
    });
    const reapedBefore = provider.reaped.length;
    expect(await next.sweep()).toBe(1);
    expect(provider.reaped.length).toBe(reapedBefore);

    // This process's own orphan reap (a failed terminate's record) clears the record too.
    const own = await acquired(next.sandbox, "b");
    expect(await next.sandbox.reap({ scope, lease: own, reason: "lease_lost", signal: AbortSignal.timeout(5_000) })).toEqual({
      type: "reaped",
    });
    expect(await next.sweep()).toBe(0);
  });
});
