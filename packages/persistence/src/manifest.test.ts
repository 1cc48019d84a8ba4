import { access, readdir } from "node:fs/promises";
import { sha256Hex } from "@openma/storage/blobs";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { CHUNKING_ALGORITHM, DEFAULT_CHUNKING } from "./chunker.ts";
import { type CheckpointEntry, checkpointManifestKey, chunkKey } from "./manifest.ts";
import { symlinkStaysInside } from "./paths.ts";
import { restoreCheckpoint } from "./restore.ts";
import { type TempDirs, tempDirs } from "./testkit.ts";

let t: TempDirs;
beforeEach(async () => {
  t = await tempDirs();
});
afterEach(async () => t.cleanup());

const payload = Buffer.from("attacker bytes");
const payloadSha = sha256Hex(payload);
const file = (path: string): CheckpointEntry => ({
  type: "file",
  path,
  mode: 0o644,
  size: payload.length,
  sha256: payloadSha,
  chunks: [{ sha256: payloadSha, size: payload.length }],
});

/** Stores a hand-made manifest under its own hash, as an attacker with store access could. */
async function plant(entries: unknown[], extra: Record<string, unknown> = {}): Promise<string> {
  await t.store.put(chunkKey(payloadSha), payload);
  const doc = {
    format: "openma.workspace-checkpoint",
    version: 1,
    chunking: { algorithm: CHUNKING_ALGORITHM, ...DEFAULT_CHUNKING },
    entries,
    ...extra,
  };
  const bytes = Buffer.from(`${JSON.stringify(doc)}\n`);
  const id = sha256Hex(bytes);
  await t.store.put(checkpointManifestKey(id), bytes);
  return id;
}

async function expectRejected(entries: unknown[], message: RegExp, extra?: Record<string, unknown>) {
  const id = await plant(entries, extra);
  const r = await restoreCheckpoint(t.store, id, t.path("target"));
  expect(r).toMatchObject({ ok: false, error: { code: "manifest_invalid", message: expect.stringMatching(message) } });
  // Nothing was written anywhere: no target, no staging, no escaped file.
  expect((await readdir(t.base)).sort()).toEqual(["blobs"]);
  await expect(access(t.path("escaped"))).rejects.toThrow();
}

describe("hostile checkpoint manifests are rejected before anything is written", () => {
  it("absolute paths", () => expectRejected([file("/tmp/evil")], /absolute paths/));
  it("parent traversal", () => expectRejected([file("../escaped")], /'\.\.'/));
  it("traversal in the middle of a path", () =>
    expectRejected([{ type: "dir", path: "a", mode: 0o755 }, file("a/../../escaped")], /'\.\.'/));
  it("writing through a symlink", () =>
    expectRejected([{ type: "symlink", path: "link", target: "." }, file("link/escaped")], /goes through symlink link/));
  it("a missing parent directory", () => expectRejected([file("nowhere/x")], /parent nowhere is not a directory/));
  it("writing into a file", () => expectRejected([file("f"), file("f/x")], /parent f is not a directory/));
  it("duplicate paths", () => expectRejected([file("same"), file("same")], /duplicate path same/));
  it("a symlink escaping lexically", () => expectRejected([{ type: "symlink", path: "s", target: "../../etc" }], /escapes the workspace/));
  it("a symlink escaping through another symlink", () =>
    expectRejected(
      [
        { type: "symlink", path: "s1", target: "." },
        { type: "symlink", path: "s2", target: "s1/.." },
      ],
      /s2: symlink target s1\/\.\. escapes/,
    ));
  it("an absolute symlink target", () => expectRejected([{ type: "symlink", path: "s", target: "/etc/passwd" }], /escapes/));
  it("setuid and out-of-range modes", () => expectRejected([{ ...file("x"), mode: 0o4755 }], /invalid mode/));
  it("chunks that do not add up to the file size", () => expectRejected([{ ...file("x"), size: 3 }], /add up to/));
  it("oversized chunks", () =>
    expectRejected([{ ...file("x"), size: 2 ** 30, chunks: [{ sha256: payloadSha, size: 2 ** 30 }] }], /invalid chunk size/));
  it("unknown entry types", () => expectRejected([{ type: "device", path: "d" }], /unknown entry type/));
  it("unknown formats and chunkers", async () => {
    await expectRejected([], /unsupported manifest format/, { version: 3 });
    await expectRejected([], /packs must be an array/, { version: 2 });
    await expectRejected([], /unsupported chunking/, { chunking: { algorithm: "rabin", ...DEFAULT_CHUNKING } });
  });

  it("accepts a well-formed manifest (the planted chunk restores)", async () => {
    const id = await plant([{ type: "dir", path: "d", mode: 0o755 }, file("d/x"), { type: "symlink", path: "l", target: "d/x" }]);
    expect(await restoreCheckpoint(t.store, id, t.path("target"))).toMatchObject({ ok: true, stats: { files: 1 } });
  });

  it("rejects a manifest whose file hash disagrees with its chunks", async () => {
    const id = await plant([{ ...file("x"), sha256: "0".repeat(64) }]);
    expect(await restoreCheckpoint(t.store, id, t.path("target"))).toMatchObject({ ok: false, error: { code: "file_corrupt", path: "x" } });
    expect((await readdir(t.base)).sort()).toEqual(["blobs"]);
  });
});

describe("symlink containment", () => {
  const links = (o: Record<string, string>) => new Map(Object.entries(o));
  it("follows the tree's own links the way the kernel would", () => {
    expect(symlinkStaysInside("a/b/l", "../c", links({}))).toBe(true);
    expect(symlinkStaysInside("a/l", "../../x", links({}))).toBe(false);
    expect(symlinkStaysInside("l", "/abs", links({}))).toBe(false);
    expect(symlinkStaysInside("s2", "s1/..", links({ s1: "." }))).toBe(false);
    expect(symlinkStaysInside("s2", "s1/..", links({ s1: "a/b" }))).toBe(true);
    expect(symlinkStaysInside("loop", "loop/x", links({ loop: "loop/x" }))).toBe(false);
    expect(symlinkStaysInside("d/l", "x", links({ "d/x": "/etc" }))).toBe(false);
  });
});
