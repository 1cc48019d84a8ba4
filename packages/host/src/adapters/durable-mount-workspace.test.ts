import { execFileSync } from "node:child_process";
import { appendFile, chmod, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { FenceIdentity, WorkspaceBinding, WorkspaceCandidateRef } from "@openma/contract";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { DURABLE_MOUNT_FORMAT, DurableMountWorkspace, type DurableMountWorkspaceOptions } from "./durable-mount-workspace.ts";

const scope = { environmentId: "env_1", sessionId: "sesn_1" };
const fence: FenceIdentity = { scope, ownerId: "o#1", generation: 1, expiresAt: 0 };
const signal = new AbortController().signal;
const sandbox = { provider: "fake", runtimeId: "rt_1" };

describe("DurableMountWorkspace", () => {
  let dir: string;
  let ws: DurableMountWorkspace;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "openma-dmws-"));
    ws = new DurableMountWorkspace({ root: join(dir, "root"), durable: true });
  });
  afterEach(async () => rm(dir, { recursive: true, force: true }));

  const path = (binding: WorkspaceBinding) => binding.metadata!.hostPath as string;

  async function materialize(candidate: WorkspaceCandidateRef | null, key = "k1", port = ws, generation = 1) {
    return port.materialize({ scope, fence: { ...fence, generation }, strategy: "durable_mount", candidate, idempotencyKey: key, signal });
  }

  async function bound(key = "k1", port = ws, generation = 1): Promise<WorkspaceBinding> {
    const result = await materialize(null, key, port, generation);
    if (result.type !== "materialized") throw new Error("expected a binding");
    return result.binding;
  }

  async function checkpoint(binding: WorkspaceBinding, port = ws, generation = 1) {
    return (await port.checkpoint({ scope, fence: { ...fence, generation }, binding, sandbox, idempotencyKey: "c", signal })).candidate;
  }

  async function populated(): Promise<{ binding: WorkspaceBinding; candidate: WorkspaceCandidateRef }> {
    const binding = await bound();
    await mkdir(join(path(binding), "src/deep"), { recursive: true });
    await writeFile(join(path(binding), "src/deep/a.ts"), "a".repeat(3_000_000));
    await writeFile(join(path(binding), "empty"), "");
    await writeFile(join(path(binding), "run.sh"), "#!/bin/sh\n");
    await chmod(join(path(binding), "run.sh"), 0o755);
    await symlink("src/deep/a.ts", join(path(binding), "link"));
    return { binding, candidate: await checkpoint(binding) };
  }

  it("declares durability only when the operator says the root is durable", () => {
    expect(ws.capabilities).toEqual([{ strategy: "durable_mount", durability: "durable" }]);
    expect(new DurableMountWorkspace({ root: dir }).capabilities).toEqual([{ strategy: "durable_mount", durability: "best_effort" }]);
  });

  it("freezes an immutable revision and restores it into a separate working tree", async () => {
    const { binding, candidate } = await populated();
    expect(candidate).toEqual({
      id: expect.stringMatching(/^[0-9a-f]{64}$/),
      contentHash: `sha256:${candidate.id}`,
      metadata: { format: DURABLE_MOUNT_FORMAT, files: 3, bytes: 3_000_010 },
    });
    const revision = ws.revisionPath(scope, candidate.id);
    const manifest = JSON.parse(await readFile(join(revision, "manifest.json"), "utf8"));
    expect(manifest.entries.map((e: { path: string }) => e.path)).toEqual(["empty", "link", "run.sh", "src", "src/deep", "src/deep/a.ts"]);
    // Edits after the checkpoint never reach the revision.
    await writeFile(join(path(binding), "run.sh"), "changed!!\n");
    expect(await readFile(join(revision, "tree/run.sh"), "utf8")).toBe("#!/bin/sh\n");

    const restored = await materialize(candidate, "k2", ws, 2);
    expect(restored).toMatchObject({ type: "materialized", restored: candidate });
    const target = path((restored as { binding: WorkspaceBinding }).binding);
    expect(target).toMatch(/work\/2\.dmw_/);
    expect(await readFile(join(target, "src/deep/a.ts"), "utf8")).toHaveLength(3_000_000);
    expect((await stat(join(target, "run.sh"))).mode & 0o777).toBe(0o755);
    // The working copy is not linked to the revision: writing it leaves the revision intact.
    await writeFile(join(target, "src/deep/a.ts"), "mine");
    expect((await stat(join(revision, "tree/src/deep/a.ts"))).size).toBe(3_000_000);
    await expect(ws.attach()).resolves.toBeUndefined();
  });

  it("keeps an identical revision that still verifies and replaces one that does not", async () => {
    const { binding, candidate } = await populated();
    const revision = ws.revisionPath(scope, candidate.id);
    const before = (await stat(join(revision, "manifest.json"))).ino;
    expect((await checkpoint(binding)).id).toBe(candidate.id);
    expect((await stat(join(revision, "manifest.json"))).ino).toBe(before);
    await writeFile(join(revision, "tree/empty"), "damage");
    expect((await checkpoint(binding)).id).toBe(candidate.id);
    expect(await readFile(join(revision, "tree/empty"), "utf8")).toBe("");
    await rm(join(revision, "manifest.json"));
    expect((await checkpoint(binding)).id).toBe(candidate.id);
    expect(await materialize(candidate, "k3")).toMatchObject({ type: "materialized" });
  });

  it("rejects revisions that are foreign, missing, or differ from their manifest, so the host falls back", async () => {
    expect(await materialize({ id: "ws_1", contentHash: "sha256:x" })).toMatchObject({
      reason: expect.stringMatching(/not a durable_mount/),
    });
    const hex = "b".repeat(64);
    expect(await materialize({ id: hex, contentHash: "sha256:c" })).toMatchObject({ reason: expect.stringMatching(/not a durable_mount/) });
    expect(await materialize({ id: hex, contentHash: `sha256:${hex}` })).toMatchObject({
      type: "candidate_rejected",
      reason: "revision manifest is missing",
    });
    const { candidate } = await populated();
    const revision = ws.revisionPath(scope, candidate.id);
    const damage: Array<[string, () => Promise<void>, RegExp]> = [
      ["same-size rewrite", () => writeFile(join(revision, "tree/run.sh"), "#!/bin/xx\n"), /differs .* \/run\.sh/],
      ["mode", () => chmod(join(revision, "tree/run.sh"), 0o700), /differs .* \/run\.sh/],
      ["size", () => appendFile(join(revision, "tree/empty"), "x"), /differs .* \/empty/],
      [
        "link target",
        () => rm(join(revision, "tree/link")).then(() => symlink("run.sh", join(revision, "tree/link"))),
        /differs .* \/link/,
      ],
      ["type", () => rm(join(revision, "tree/link")).then(() => writeFile(join(revision, "tree/link"), "")), /differs .* \/link/],
      ["extra file", () => writeFile(join(revision, "tree/extra"), ""), /has 7 entries, manifest 6/],
      ["device", async () => void execFileSync("mkfifo", [join(revision, "tree/fifo")]), /cannot be copied: Cannot copy a FIFO/],
      ["missing tree", () => rm(join(revision, "tree"), { recursive: true }), /cannot be copied/],
      ["manifest", () => appendFile(join(revision, "manifest.json"), " "), /does not hash/],
    ];
    for (const [what, harm, reason] of damage) {
      const copy = join(dir, "pristine");
      await rm(copy, { recursive: true, force: true });
      execFileSync("cp", ["-a", revision, copy]);
      await harm();
      const result = await materialize(candidate, `k-${what}`);
      expect(result, what).toMatchObject({ type: "candidate_rejected", candidate, reason: expect.stringMatching(reason) });
      await rm(revision, { recursive: true });
      execFileSync("cp", ["-a", copy, revision]);
    }
    // A tree past the walker's limits is refused before anything is hashed.
    const bounded = new DurableMountWorkspace({ root: join(dir, "root"), limits: { maxEntries: 6 } });
    await writeFile(join(revision, "tree/extra"), "");
    expect(await materialize(candidate, "k-bounded", bounded)).toMatchObject({ reason: expect.stringMatching(/too_many_entries/) });
    await rm(join(revision, "tree/extra"));
    // The rejected working tree is gone; the revision, once repaired, restores.
    expect(await materialize(candidate, "k-ok")).toMatchObject({ type: "materialized" });
  });

  it("refuses hostile workspaces: escaping symlinks, devices, and files changing while copied", async () => {
    const binding = await bound();
    await symlink("/etc/passwd", join(path(binding), "escape"));
    await expect(checkpoint(binding)).rejects.toThrow(/symlink_escape/);
    await rm(join(path(binding), "escape"));
    execFileSync("mkfifo", [join(path(binding), "fifo")]);
    await expect(checkpoint(binding)).rejects.toThrow(/special_file/);
    await rm(join(path(binding), "fifo"));

    const writes: Array<(file: string) => Promise<void>> = [
      (file) => appendFile(file, "grown"),
      (file) => writeFile(file, "other"),
      (file) => rm(file).then(() => symlink("/etc/passwd", file)),
    ];
    for (const write of writes) {
      const racing = new DurableMountWorkspace({ root: join(dir, "root"), afterOpen: (p) => write(join(path(binding), p)) });
      await writeFile(join(path(binding), "f.txt"), "hello");
      await expect(checkpoint(binding, racing)).rejects.toThrow(/\(changed\) \/f\.txt/);
      await rm(join(path(binding), "f.txt"));
    }
    // A file swapped after the walk is caught when it is opened.
    await writeFile(join(path(binding), "g.txt"), "hello");
    const swapped = new DurableMountWorkspace({
      root: join(dir, "root"),
      afterOpen: async () => {
        await writeFile(join(path(binding), "h.txt"), "late");
      },
    });
    await writeFile(join(path(binding), "h.txt"), "early");
    await expect(checkpoint(binding, swapped)).rejects.toThrow(/\(changed\) \/h\.txt/);
    // Nothing half-frozen is left behind.
    expect(await readdir(join(ws.scopePath(scope), "staging"))).toEqual([]);
    expect(await readdir(join(ws.scopePath(scope), "revisions")).catch(() => [])).toEqual([]);
  });

  it("refuses strategies it does not offer", async () => {
    await expect(
      ws.materialize({ scope, fence, strategy: "checkpoint_restore", candidate: null, idempotencyKey: "k", signal }),
    ).rejects.toThrow(/not offered/);
  });

  it("releases working trees, discards revisions and sweeps what stale generations left", async () => {
    const { binding, candidate } = await populated();
    const stale = await bound("k-old", ws, 1);
    const current = await bound("k-new", ws, 3);
    const unpublished = await checkpoint(current, ws, 3);
    await ws.release({ scope, fence, binding, signal });
    await expect(stat(path(binding))).rejects.toThrow();
    expect(await ws.discard({ scope, candidate: { id: "../x", contentHash: "" }, signal })).toEqual({ type: "not_found" });

    // A revision frozen just now is not swept yet even when unretained.
    expect(await ws.sweep({ scope, staleBefore: 3, retain: [], olderThan: 0 })).toEqual({ trees: 1, revisions: 0 });
    await expect(stat(path(stale))).rejects.toThrow();
    await expect(stat(path(current))).resolves.toBeDefined();
    await rm(join(ws.revisionPath(scope, unpublished.id), "manifest.json"));
    expect(await ws.sweep({ scope, staleBefore: 3, retain: [candidate.id], olderThan: Date.now() + 60_000 })).toEqual({
      trees: 0,
      revisions: 1,
    });
    expect(await ws.discard({ scope, candidate, signal })).toEqual({ type: "discarded" });
    expect(await ws.discard({ scope, candidate, signal })).toEqual({ type: "not_found" });
    const empty = new DurableMountWorkspace({ root: join(dir, "nothing") } satisfies DurableMountWorkspaceOptions);
    expect(await empty.sweep({ scope, staleBefore: 9, retain: [], olderThan: 0 })).toEqual({ trees: 0, revisions: 0 });
  });
});
