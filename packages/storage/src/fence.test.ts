import { createHash } from "node:crypto";
import type { OutputManifestRef, RuntimeCheckpointRef, RuntimeResourceFence, WorkspaceCandidateRef } from "@openma/contract";
import { afterEach, describe, expect, it } from "vitest";
import { ManualClock } from "./clock.ts";
import { SqlRuntimeResourceFence } from "./fence.ts";
import { BACKENDS, openTestStorage, type TestStorage } from "./testing.ts";

const scope = { environmentId: "env_1", sessionId: "sesn_1" };
const otherScope = { environmentId: "env_1", sessionId: "sesn_2" };
const signal = new AbortController().signal;
const TTL = 90_000;

const hash = (seed: string) => `sha256:${createHash("sha256").update(seed).digest("hex")}`;
const ws = (n: string): WorkspaceCandidateRef => ({ id: `ws_${n}`, contentHash: hash(`ws${n}`) });
const out = (n: string): OutputManifestRef => ({ id: `out_${n}`, contentHash: hash(`out${n}`), entryCount: 2 });
const ckpt = (generation: number, workspace: string): RuntimeCheckpointRef => ({
  provider: "docker",
  checkpointId: `ck_${generation}`,
  kind: "process",
  sourceRuntimeId: "rt_1",
  sessionId: scope.sessionId,
  generation,
  workspaceCandidateId: workspace,
  harness: { id: "pi", version: "1.0.0", runtimeIdentity: "{}" },
});

describe.each(BACKENDS)("SQL runtime resource fence on %s", (dialect) => {
  let t: TestStorage;
  let clock: ManualClock;
  let fences: SqlRuntimeResourceFence;
  afterEach(async () => t?.cleanup());

  async function open() {
    t = await openTestStorage(dialect);
    clock = new ManualClock();
    fences = new SqlRuntimeResourceFence(t.storage.db, { clock });
  }

  async function acquire(ownerId: string, s = scope): Promise<RuntimeResourceFence> {
    const result = await fences.acquire({ scope: s, ownerId, ttlMs: TTL, signal });
    if (result.type !== "acquired") throw new Error(`expected acquired, got ${JSON.stringify(result)}`);
    return result.fence;
  }

  it("acquires generation 1 with an opaque token whose hash alone is stored", async () => {
    await open();
    const result = await fences.acquire({ scope, ownerId: "host-a#1", ttlMs: TTL, signal });
    expect(result).toMatchObject({
      type: "acquired",
      active: null,
      fence: { generation: 1, ownerId: "host-a#1", expiresAt: clock.now() + TTL },
    });
    const fence = result.type === "acquired" ? result.fence : null;
    expect(fence?.token).toMatch(/^rtf_[A-Za-z0-9_-]{43}$/);
    await fences.publish({ fence: fence!, pointers: { workspace: ws("1") }, idempotencyKey: "k1", signal });
    const rows = [
      ...(await t.storage.db.selectFrom("runtime_fences").selectAll().execute()),
      ...(await t.storage.db.selectFrom("runtime_publications").selectAll().execute()),
    ];
    const stored = JSON.stringify(rows);
    expect(stored).not.toContain(fence!.token);
    expect(rows[0]).toMatchObject({ token_hash: createHash("sha256").update(fence!.token).digest("hex") });
  });

  it("refuses a second holder, including the same owner id, while the fence is unexpired", async () => {
    await open();
    const first = await acquire("owner#1");
    expect(await fences.acquire({ scope, ownerId: "owner#2", ttlMs: TTL, signal })).toEqual({
      type: "conflict",
      holderExpiresAt: first.expiresAt,
    });
    // The reference shared a fence with a same-owner re-acquire; owner ids are per attempt here.
    expect(await fences.acquire({ scope, ownerId: "owner#1", ttlMs: TTL, signal })).toEqual({
      type: "conflict",
      holderExpiresAt: first.expiresAt,
    });
    clock.advance(TTL - 1);
    expect((await fences.acquire({ scope, ownerId: "owner#3", ttlMs: TTL, signal })).type).toBe("conflict");
  });

  it("gives every takeover a new generation and token, fencing out the previous holder", async () => {
    await open();
    const old = await acquire("owner#1");
    clock.advance(TTL);
    const next = await acquire("owner#1"); // even the same owner id: a new attempt, a new fence
    expect(next.generation).toBe(2);
    expect(next.token).not.toBe(old.token);
    expect(await fences.isCurrent({ fence: old, signal })).toBe(false);
    expect(await fences.isCurrent({ fence: next, signal })).toBe(true);
    expect(await fences.renew({ fence: old, ttlMs: TTL, signal })).toEqual({ type: "stale", reason: "superseded" });
    expect(await fences.publish({ fence: old, pointers: { workspace: ws("old") }, idempotencyKey: "k", signal })).toEqual({
      type: "stale",
      reason: "superseded",
    });
    expect(await fences.release({ fence: old, signal })).toEqual({ type: "stale", reason: "superseded" });
    expect(await fences.isCurrent({ fence: next, signal })).toBe(true);
    expect(await fences.active({ scope, signal })).toBeNull();
  });

  it("renews an unexpired fence but never an expired one, even without a successor", async () => {
    await open();
    const fence = await acquire("owner#1");
    clock.advance(TTL - 1);
    const renewed = await fences.renew({ fence, ttlMs: 2 * TTL, signal });
    expect(renewed).toEqual({ type: "renewed", fence: { ...fence, expiresAt: clock.now() + 2 * TTL } });
    clock.advance(2 * TTL - 1);
    expect(await fences.isCurrent({ fence, signal })).toBe(true); // the old expiresAt in the caller's copy does not matter
    clock.advance(1);
    expect(await fences.isCurrent({ fence, signal })).toBe(false);
    expect(await fences.renew({ fence, ttlMs: TTL, signal })).toEqual({ type: "stale", reason: "expired" });
    expect(await fences.publish({ fence, pointers: { workspace: ws("1") }, idempotencyKey: "k", signal })).toEqual({
      type: "stale",
      reason: "expired",
    });
  });

  it("releases idempotently so the next owner starts at once, and a released fence can do nothing", async () => {
    await open();
    const fence = await acquire("owner#1");
    expect(await fences.release({ fence, signal })).toEqual({ type: "released" });
    expect(await fences.release({ fence, signal })).toEqual({ type: "released" });
    expect(await fences.isCurrent({ fence, signal })).toBe(false);
    expect(await fences.renew({ fence, ttlMs: TTL, signal })).toEqual({ type: "stale", reason: "released" });
    expect(await fences.publish({ fence, pointers: { outputs: out("1") }, idempotencyKey: "k", signal })).toEqual({
      type: "stale",
      reason: "released",
    });
    const next = await acquire("owner#2");
    expect(next.generation).toBe(2);
    expect(await fences.isCurrent({ fence: next, signal })).toBe(true);
  });

  it("rejects forged tokens, future generations and unknown scopes", async () => {
    await open();
    expect(await fences.isCurrent({ fence: { scope, ownerId: "x", generation: 1, token: "t", expiresAt: 0 }, signal })).toBe(false);
    expect(await fences.renew({ fence: { scope, ownerId: "x", generation: 1, token: "t", expiresAt: 0 }, ttlMs: TTL, signal })).toEqual({
      type: "stale",
      reason: "unknown_scope",
    });
    const fence = await acquire("owner#1");
    for (const forged of [
      { ...fence, token: `${fence.token}x` },
      { ...fence, ownerId: "owner#9" },
      { ...fence, generation: 7 },
    ]) {
      expect(await fences.isCurrent({ fence: forged, signal })).toBe(false);
      expect(await fences.publish({ fence: forged, pointers: { workspace: ws("f") }, idempotencyKey: "k", signal })).toEqual({
        type: "stale",
        reason: "token_mismatch",
      });
      expect(await fences.release({ fence: forged, signal })).toEqual({ type: "stale", reason: "token_mismatch" });
    }
    expect(await fences.isCurrent({ fence, signal })).toBe(true);
  });

  it("publishes all pointers in one step, keeps omitted ones and clears explicit nulls", async () => {
    await open();
    const fence = await acquire("owner#1");
    const first = await fences.publish({
      fence,
      pointers: { workspace: ws("1"), outputs: out("1"), runtimeCheckpoint: ckpt(1, "ws_1") },
      idempotencyKey: "g1:final",
      signal,
    });
    expect(first).toEqual({
      type: "published",
      replayed: false,
      publication: {
        revision: 1,
        generation: 1,
        publishedAt: clock.now(),
        workspace: ws("1"),
        outputs: out("1"),
        runtimeCheckpoint: ckpt(1, "ws_1"),
      },
    });
    clock.advance(10);
    const second = await fences.publish({
      fence,
      pointers: { workspace: ws("2"), runtimeCheckpoint: null },
      idempotencyKey: "g1:turn-2",
      signal,
    });
    expect(second).toMatchObject({
      type: "published",
      publication: { revision: 2, workspace: ws("2"), outputs: out("1"), runtimeCheckpoint: null },
    });
    expect(await fences.active({ scope, signal })).toEqual(second.type === "published" ? second.publication : null);

    await fences.release({ fence, signal });
    const next = await fences.acquire({ scope, ownerId: "owner#2", ttlMs: TTL, signal });
    expect(next).toMatchObject({ type: "acquired", active: { revision: 2, generation: 1, workspace: ws("2"), outputs: out("1") } });

    const history = await fences.history({ scope, limit: 10, signal });
    expect(
      history.map((h) => [h.revision, h.idempotencyKey, h.workspace?.id, h.outputs?.id, h.runtimeCheckpoint?.checkpointId ?? null]),
    ).toEqual([
      [2, "g1:turn-2", "ws_2", "out_1", null],
      [1, "g1:final", "ws_1", "out_1", "ck_1"],
    ]);
    expect(await fences.history({ scope, beforeRevision: 2, limit: 10, signal })).toHaveLength(1);
    expect(await fences.history({ scope, limit: 1, signal })).toMatchObject([{ revision: 2, ownerId: "owner#1", generation: 1 }]);
  });

  it("replays a byte-identical publication and refuses the key with different pointers", async () => {
    await open();
    const fence = await acquire("owner#1");
    const pointers = { workspace: ws("1"), outputs: out("1") };
    const original = await fences.publish({ fence, pointers, idempotencyKey: "g1:final", signal });
    await fences.publish({ fence, pointers: { workspace: ws("2") }, idempotencyKey: "g1:turn-3", signal });
    // Key order differs, bytes of the canonical form do not.
    const reordered = { outputs: { entryCount: 2, contentHash: out("1").contentHash, id: "out_1" }, workspace: ws("1") };
    const replay = await fences.publish({ fence, pointers: reordered, idempotencyKey: "g1:final", signal });
    expect(replay).toEqual({ ...original, replayed: true });
    // The replay did not roll the pointers back to revision 1.
    expect(await fences.active({ scope, signal })).toMatchObject({ revision: 2, workspace: ws("2"), outputs: out("1") });
    expect(await fences.publish({ fence, pointers: { workspace: ws("3") }, idempotencyKey: "g1:final", signal })).toEqual({
      type: "conflict",
      reason: "idempotency_key_reused",
    });
    expect(
      await fences.publish({ fence, pointers: { workspace: ws("1"), outputs: null }, idempotencyKey: "g1:final", signal }),
    ).toMatchObject({
      type: "conflict",
    });
    expect(await t.storage.db.selectFrom("runtime_publications").select("revision").execute()).toHaveLength(2);

    await fences.release({ fence, signal });
    expect(await fences.publish({ fence, pointers, idempotencyKey: "g1:final", signal })).toEqual({ type: "stale", reason: "released" });
    const next = await acquire("owner#2");
    // A key is per generation: another generation reusing it is refused, and the stale owner cannot even replay.
    expect(await fences.publish({ fence: next, pointers, idempotencyKey: "g1:final", signal })).toMatchObject({ type: "conflict" });
    expect(await fences.publish({ fence, pointers, idempotencyKey: "g1:final", signal })).toEqual({ type: "stale", reason: "superseded" });
  });

  it("keeps scopes independent", async () => {
    await open();
    const a = await acquire("owner#1", scope);
    const b = await acquire("owner#2", otherScope);
    expect([a.generation, b.generation]).toEqual([1, 1]);
    await fences.publish({ fence: a, pointers: { workspace: ws("a") }, idempotencyKey: "same-key", signal });
    expect(await fences.publish({ fence: b, pointers: { workspace: ws("b") }, idempotencyKey: "same-key", signal })).toMatchObject({
      type: "published",
      replayed: false,
    });
    expect(await fences.isCurrent({ fence: { ...a, scope: otherScope }, signal })).toBe(false);
    expect((await fences.active({ scope, signal }))?.workspace).toEqual(ws("a"));
    expect((await fences.active({ scope: otherScope, signal }))?.workspace).toEqual(ws("b"));
  });

  it("lets exactly one of many concurrent acquirers win", async () => {
    await open();
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) => fences.acquire({ scope, ownerId: `racer#${i}`, ttlMs: TTL, signal })),
    );
    expect(results.filter((r) => r.type === "acquired")).toHaveLength(1);
    clock.advance(TTL);
    const again = await Promise.all(
      Array.from({ length: 8 }, (_, i) => fences.acquire({ scope, ownerId: `racer2#${i}`, ttlMs: TTL, signal })),
    );
    expect(again.filter((r) => r.type === "acquired").map((r) => r.type === "acquired" && r.fence.generation)).toEqual([2]);
  });

  it("commits concurrent publications with one key exactly once", async () => {
    await open();
    const fence = await acquire("owner#1");
    const results = await Promise.all(
      Array.from({ length: 6 }, () => fences.publish({ fence, pointers: { workspace: ws("1") }, idempotencyKey: "g1:final", signal })),
    );
    expect(results.filter((r) => r.type === "published" && !r.replayed)).toHaveLength(1);
    expect(results.every((r) => r.type === "published" && r.publication.revision === 1)).toBe(true);
    expect((await fences.active({ scope, signal }))?.revision).toBe(1);
  });

  it("rejects malformed input before touching the database", async () => {
    await open();
    const bad = (p: Promise<unknown>) => expect(p).rejects.toBeInstanceOf(TypeError);
    await bad(fences.acquire({ scope, ownerId: "o", ttlMs: 0, signal }));
    await bad(fences.acquire({ scope, ownerId: "o", ttlMs: 86_400_001, signal }));
    await bad(fences.acquire({ scope, ownerId: "o", ttlMs: 1.5, signal }));
    await bad(fences.acquire({ scope, ownerId: "", ttlMs: TTL, signal }));
    await bad(fences.acquire({ scope: { environmentId: "env", sessionId: "x".repeat(257) }, ownerId: "o", ttlMs: TTL, signal }));
    const fence = await acquire("owner#1");
    await bad(fences.publish({ fence, pointers: {}, idempotencyKey: "k", signal }));
    await bad(fences.publish({ fence, pointers: { workspace: { id: "w", contentHash: "md5:abc" } }, idempotencyKey: "k", signal }));
    await bad(fences.publish({ fence, pointers: { workspace: ws("1") }, idempotencyKey: "k".repeat(300), signal }));
    await bad(fences.renew({ fence: { ...fence, generation: 0 }, ttlMs: TTL, signal }));
    await bad(fences.renew({ fence: { ...fence, token: "" }, ttlMs: TTL, signal }));
    await bad(fences.history({ scope, limit: 0, signal }));
    const aborted = AbortSignal.abort();
    await expect(fences.publish({ fence, pointers: { workspace: ws("1") }, idempotencyKey: "k", signal: aborted })).rejects.toThrow();
    await expect(fences.acquire({ scope: otherScope, ownerId: "o", ttlMs: TTL, signal: aborted })).rejects.toThrow();
    expect(await fences.active({ scope, signal })).toBeNull();
    expect(await fences.active({ scope: otherScope, signal })).toBeNull();
  });
});
