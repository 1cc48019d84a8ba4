import { spawn } from "node:child_process";
import { mkdir, readdir, readFile, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { sha256Hex } from "@openma/storage/blobs";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createCheckpoint } from "./checkpoint.ts";
import { CHUNKING_ALGORITHM, DEFAULT_CHUNKING } from "./chunker.ts";
import { collectGarbage } from "./gc.ts";
import { CountingBlobStore } from "./instrument.ts";
import { CHECKPOINT_MANIFEST_PREFIX, CHUNK_PREFIX, type ChunkRef, checkpointManifestKey } from "./manifest.ts";
import { PACK_PREFIX, PackBuilder, packForwardKey, packKey, parsePack, serializeForward } from "./packs.ts";
import { loadCheckpointManifest, restoreCheckpoint, restoreLatestVerified } from "./restore.ts";
import { seededBytes, snapshotTree, type TempDirs, tempDirs, writeV1Checkpoint } from "./testkit.ts";

/** Packs that exist at once when writes lag: the open one plus those in flight (checkpoint.ts). */
const SEALS_AT_ONCE_PLUS_OPEN = 3;

let t: TempDirs;
beforeEach(async () => {
  t = await tempDirs();
});
afterEach(async () => t.cleanup());

async function workspace(files: Record<string, Buffer | string>): Promise<string> {
  const ws = t.path(`ws-${Object.keys(files).length}-${Math.random().toString(36).slice(2)}`);
  await mkdir(ws, { recursive: true });
  for (const [name, data] of Object.entries(files)) {
    await mkdir(join(ws, name, ".."), { recursive: true });
    await writeFile(join(ws, name), data);
  }
  return ws;
}

describe("format v1 revisions already in stores", () => {
  it("still restore byte for byte, are verified, and keep their chunks through GC", async () => {
    const big = seededBytes("v1-big", 700_000);
    const id = await writeV1Checkpoint(t.store, {
      src: "dir",
      "src/big.bin": big,
      "src/small.txt": Buffer.from("small\n"),
      link: { symlink: "src/small.txt" },
    });
    const r = await restoreCheckpoint(t.store, id, t.path("r"));
    expect(r).toMatchObject({ ok: true, stats: { files: 2 } });
    expect((await readFile(t.path("r", "src/big.bin"))).equals(big)).toBe(true);
    expect(await snapshotTree(t.path("r"))).toMatchObject({ link: "symlink src/small.txt" });

    // Live v1 chunks survive a sweep; a v2 checkpoint of the same tree (based on the v1 one) packs them anew.
    const gc = await collectGarbage(t.store, { liveCheckpoints: [id], liveOutputs: [], retentionMs: 0, now: Date.now() + 1000 });
    expect(gc).toMatchObject({ ok: true, report: { deleted: [] } });
    const v2 = await createCheckpoint(t.store, t.path("r"), { base: id });
    if (!v2.ok) throw new Error(v2.error.message);
    expect(v2.stats).toMatchObject({ packs: 1, uploadedBytes: big.length + 6 });
    expect(await snapshotTree(t.path("r"))).toEqual(await restoreSnapshot(v2.id));

    // A damaged v1 chunk is still refused, and the fallback reaches past it.
    const chunks = await t.store.list!(CHUNK_PREFIX);
    await t.store.put(chunks[0]!.key, Buffer.from("damaged"));
    const latest = await restoreLatestVerified(t.store, [id, v2.id], t.path("fallback"));
    expect(latest).toMatchObject({ ok: true, id: v2.id, rejected: [{ id, error: { code: "chunk_corrupt" } }] });
  });
});

async function restoreSnapshot(id: string): Promise<Record<string, string>> {
  const target = t.path(`restored-${id.slice(0, 8)}`);
  const r = await restoreCheckpoint(t.store, id, target);
  if (!r.ok) throw new Error(r.error.message);
  return snapshotTree(target);
}

describe("packs", () => {
  it("writes one durable object per pack, splits big files across packs and dedups within a run", async () => {
    const big = seededBytes("big", 3_000_000);
    const ws = await workspace({ "a/big.bin": big, "a/copy.bin": big, "b/x.txt": "x", "b/empty": "" });
    await symlink("../a/big.bin", join(ws, "b/link"));
    const cp = await createCheckpoint(t.store, ws, { packBytes: 1024 * 1024 });
    if (!cp.ok) throw new Error(cp.error.message);
    expect(cp.stats.uploadedBytes).toBe(big.length + 1); // the copy is the same chunks
    expect(cp.stats.packs).toBe(3);
    expect(t.store.traffic.puts).toBe(4);
    for (const l of await t.store.list!(PACK_PREFIX)) {
      const id = l.key.slice(l.key.lastIndexOf("/") + 1);
      const pack = parsePack(id, (await t.store.get(l.key))!);
      for (const c of pack.chunks) expect(sha256Hex(pack.bytes.subarray(c.offset, c.offset + c.size))).toBe(c.sha256);
    }
    expect(await restoreSnapshot(cp.id)).toEqual(await snapshotTree(ws));
  });

  it("reuses pack buffers only after their pack is written: a slow store still gets every pack intact", async () => {
    // Many packs, each put held back while later chunks arrive: if a buffer were reused before its
    // write finished, the stored pack would not hash to its id or restore would refuse a chunk.
    const files = Object.fromEntries(Array.from({ length: 24 }, (_, i) => [`f${i}.bin`, seededBytes(`slow-${i}`, 300_000)]));
    const ws = await workspace(files);
    const written = new Map<string, Buffer>();
    const slow = {
      put: async (key: string, data: Uint8Array) => {
        await new Promise<void>((resolve) => setImmediate(resolve));
        await t.store.put(key, data);
        written.set(key, Buffer.from(data));
      },
      get: (key: string) => t.store.get(key),
      delete: (key: string) => t.store.delete(key),
      exists: (key: string) => t.store.exists(key),
    };
    const cp = await createCheckpoint(slow, ws, { packBytes: 512 * 1024 });
    if (!cp.ok) throw new Error(cp.error.message);
    expect(cp.stats.packs).toBeGreaterThan(SEALS_AT_ONCE_PLUS_OPEN);
    for (const [key, bytes] of written) {
      if (!key.startsWith(PACK_PREFIX)) continue;
      const pack = parsePack(key.split("/").pop()!, bytes);
      for (const c of pack.chunks) expect(sha256Hex(bytes.subarray(c.offset, c.offset + c.size))).toBe(c.sha256);
    }
    expect(await restoreSnapshot(cp.id)).toEqual(await snapshotTree(ws));
  });

  it("seals in place when the index fits after the chunks, and by one copy when it does not", () => {
    const room = new PackBuilder(Buffer.alloc(1024));
    const tight = new PackBuilder(3);
    for (const b of [room, tight]) b.add(sha256Hex("abc"), Buffer.from("abc"));
    const [inPlace, copied] = [room.seal(), tight.seal()];
    expect(inPlace.id).toBe(copied.id);
    expect(inPlace.bytes.equals(copied.bytes)).toBe(true);
    // Shared memory shows through a write to the builder's buffer.
    room.backing[0] = 0x7a;
    tight.backing[0] = 0x7a;
    expect(inPlace.bytes[0]).toBe(0x7a);
    expect(copied.bytes[0]).toBe("a".charCodeAt(0));
  });

  it("refuses damaged pack trailers and indexes", () => {
    const b = new PackBuilder(16);
    b.add(sha256Hex("abc"), Buffer.from("abc"));
    const sealed = b.seal();
    expect(parsePack(sealed.id, sealed.bytes).chunks).toEqual([{ sha256: sha256Hex("abc"), size: 3, offset: 0 }]);
    const bad =
      (bytes: Buffer, id = sealed.id) =>
      () =>
        parsePack(id, bytes);
    expect(bad(sealed.bytes.subarray(0, 10))).toThrow(/no pack trailer/);
    expect(bad(sealed.bytes, "0".repeat(64))).toThrow(/does not hash/);
    const long = Buffer.from(sealed.bytes);
    long.writeBigUInt64BE(BigInt(long.length), long.length - 16);
    expect(bad(long)).toThrow(/out of range/);
    const extra = Buffer.concat([Buffer.from("x"), sealed.bytes]);
    expect(bad(extra)).toThrow(/account for/);
  });

  it("a checkpoint killed mid-pack leaves the previous revision restorable and publishes nothing", async () => {
    const ws = await workspace({ "one.bin": seededBytes("one", 2_000_000), "two.bin": seededBytes("two", 2_000_000) });
    const before = await createCheckpoint(t.store, ws);
    if (!before.ok) throw new Error(before.error.message);
    const expected = await snapshotTree(ws);
    const manifests = (await t.store.list!(CHECKPOINT_MANIFEST_PREFIX)).length;
    await writeFile(join(ws, "three.bin"), seededBytes("three", 3_000_000));

    // In process: the store fails on the second pack write (disk full, connection lost).
    const failing = new CountingBlobStore(t.store);
    let packs = 0;
    const failSecondPack = (key: string) => {
      if (key.startsWith(`${PACK_PREFIX}/`) && ++packs === 2) throw new Error("EIO: write failed");
    };
    failing.put = async (key, data) => {
      failSecondPack(key);
      await t.store.put(key, data);
    };
    // The local store takes packs as pending writes, committed together before the manifest.
    failing.putPending = async (key, data) => {
      failSecondPack(key);
      return t.store.putPending!(key, data);
    };
    const aborted = await createCheckpoint(failing, ws, { cache: before.cache, packBytes: 1024 * 1024 });
    expect(aborted).toMatchObject({ ok: false, error: { code: "store_error", message: expect.stringMatching(/EIO/) } });

    // Out of process: SIGKILL while packs are being written, then the store is inspected cold.
    await killedMidCheckpoint(ws);
    expect((await t.store.list!(CHECKPOINT_MANIFEST_PREFIX)).length).toBe(manifests);
    expect(await restoreSnapshot(before.id)).toEqual(expected);
    // No half-written pack is left under a key: every pack that exists parses and verifies.
    for (const l of await t.store.list!(PACK_PREFIX)) parsePack(l.key.slice(l.key.lastIndexOf("/") + 1), (await t.store.get(l.key))!);
    const retry = await createCheckpoint(t.store, ws, { cache: before.cache });
    if (!retry.ok) throw new Error(retry.error.message);
    expect(await restoreSnapshot(retry.id)).toEqual(await snapshotTree(ws));
  }, 60_000);

  /** Runs a checkpoint in a child process and SIGKILLs it as soon as its first pack is in the store. */
  async function killedMidCheckpoint(ws: string): Promise<void> {
    const script = [
      `import { FsBlobStore } from "@openma/storage/blobs";`,
      `import { createCheckpoint } from "${join(import.meta.dirname, "checkpoint.ts")}";`,
      `const store = new FsBlobStore(${JSON.stringify(t.storeRoot)});`,
      `const pend = store.putPending.bind(store);`,
      // After the first pack is committed (durable under its key), say so and wait to be killed before anything else is written.
      `store.putPending = async (k, d) => { const p = await pend(k, d); return { ...p, commit: async () => { await p.commit(); if (k.startsWith("checkpoint/packs/")) { process.stdout.write("packed\\n"); await new Promise(() => {}); } } }; };`,
      `await createCheckpoint(store, ${JSON.stringify(ws)}, { packBytes: 512 * 1024 });`,
    ].join("\n");
    const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "inherit"],
      cwd: import.meta.dirname,
    });
    await new Promise<void>((resolve, reject) => {
      child.stdout.on("data", (d: Buffer) => {
        if (d.toString().includes("packed")) child.kill("SIGKILL");
      });
      child.on("exit", (_code, signal) =>
        signal === "SIGKILL" ? resolve() : reject(new Error(`child exited without being killed (${signal})`)),
      );
    });
  }

  it("refuses hostile v2 manifests and locations before writing a byte", async () => {
    const payload = Buffer.from("attacker bytes");
    const b = new PackBuilder(64);
    b.add(sha256Hex(payload), payload);
    const pack = b.seal();
    await t.store.put(packKey(pack.id), pack.bytes);
    const plant = async (chunks: unknown[], packs = [pack.id], size = payload.length) => {
      const doc = {
        format: "openma.workspace-checkpoint",
        version: 2,
        chunking: { algorithm: CHUNKING_ALGORITHM, ...DEFAULT_CHUNKING },
        packs,
        entries: [{ type: "file", path: "x", mode: 0o644, size, chunks }],
      };
      const bytes = Buffer.from(JSON.stringify(doc));
      await t.store.put(checkpointManifestKey(sha256Hex(bytes)), bytes);
      return restoreCheckpoint(t.store, sha256Hex(bytes), t.path(`target-${Math.random()}`));
    };
    const sha = sha256Hex(payload);
    expect(await plant([[sha, payload.length, 0, 0]])).toMatchObject({ ok: true });
    expect(await plant([[sha, payload.length, 1, 0]])).toMatchObject({ ok: false, error: { code: "manifest_invalid" } });
    expect(await plant([[sha, payload.length, 0, -1]])).toMatchObject({ ok: false, error: { code: "manifest_invalid" } });
    expect(await plant([[sha, payload.length, 0, 0]], [pack.id, pack.id])).toMatchObject({
      ok: false,
      error: { code: "manifest_invalid" },
    });
    expect(await plant([[sha, payload.length, 0, 0]], ["../../etc"])).toMatchObject({ ok: false, error: { code: "manifest_invalid" } });
    // In range of the manifest's rules but not of the pack: refused by the chunk's own hash.
    expect(await plant([[sha, payload.length, 0, 3]])).toMatchObject({ ok: false, error: { code: "chunk_corrupt" } });
    expect(await plant([[sha, payload.length, 0, 1_000_000]])).toMatchObject({ ok: false, error: { code: "chunk_corrupt" } });
    // A missing pack whose forwards loop is refused, not followed forever.
    const a = "a".repeat(64);
    const c = "c".repeat(64);
    await t.store.put(packForwardKey(a), serializeForward(a, [{ sha256: sha, size: payload.length, pack: c, offset: 0 }]));
    await t.store.put(packForwardKey(c), serializeForward(c, [{ sha256: sha, size: payload.length, pack: a, offset: 0 }]));
    expect(await plant([[sha, payload.length, 0, 0]], [a])).toMatchObject({ ok: false, error: { code: "chunk_missing" } });
    await t.store.put(packForwardKey(a), Buffer.from("{not json"));
    expect(await plant([[sha, payload.length, 0, 0]], [a])).toMatchObject({ ok: false, error: { code: "chunk_missing" } });
    expect((await readdir(t.base)).filter((n) => n.startsWith("."))).toEqual([]);
  });

  it("restores a revision whose pack was repacked, following the forward", async () => {
    const ws = await workspace({ keep: seededBytes("keep", 100_000), drop: seededBytes("drop", 400_000) });
    const v1 = await createCheckpoint(t.store, ws);
    if (!v1.ok) throw new Error(v1.error.message);
    await writeFile(join(ws, "drop"), "now small");
    const v2 = await createCheckpoint(t.store, ws, { cache: v1.cache });
    if (!v2.ok) throw new Error(v2.error.message);
    const m = await loadCheckpointManifest(t.store, v2.id);
    if (!m.ok) throw new Error("manifest");
    const keep = m.manifest.entries.find((e) => e.path === "keep");
    const old = (keep?.type === "file" ? keep.chunks[0] : undefined) as Required<ChunkRef>;
    const later = Date.now() + 3_600_000;
    const gc = await collectGarbage(t.store, { liveCheckpoints: [v2.id], liveOutputs: [], retentionMs: 1000, now: later });
    expect(gc).toMatchObject({ ok: true, report: { repacked: [packKey(old.pack)] } });
    expect(await t.store.exists(packKey(old.pack))).toBe(false);
    expect(await restoreSnapshot(v2.id)).toEqual(await snapshotTree(ws));
    // A checkpoint reusing the cached (now forwarded) location records where the chunk lives now.
    const v3 = await createCheckpoint(t.store, ws, { cache: v2.cache });
    if (!v3.ok) throw new Error(v3.error.message);
    const m3 = await loadCheckpointManifest(t.store, v3.id);
    const keep3 = m3.ok ? m3.manifest.entries.find((e) => e.path === "keep") : undefined;
    expect(keep3?.type === "file" && keep3.chunks[0]!.pack).not.toBe(old.pack);
    expect(await restoreSnapshot(v3.id)).toEqual(await snapshotTree(ws));
  });
});
