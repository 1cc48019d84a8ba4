import { mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { FenceIdentity, WorkspaceBinding } from "@openma/contract";
import { CHECKPOINT_FORMAT, CountingBlobStore } from "@openma/persistence";
import { type BlobStore, FsBlobStore } from "@openma/storage/blobs";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { FsCheckpointWorkspace } from "./fs-workspace.ts";

const scope = { environmentId: "env_1", sessionId: "sesn_1" };
const fence: FenceIdentity = { scope, ownerId: "o#1", generation: 1, expiresAt: 0 };
const signal = new AbortController().signal;
const sandbox = { provider: "fake", runtimeId: "rt_1" };

describe("FsCheckpointWorkspace", () => {
  let dir: string;
  let store: CountingBlobStore;
  let ws: FsCheckpointWorkspace;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "openma-fsws-"));
    store = new CountingBlobStore(new FsBlobStore(join(dir, "blobs")));
    ws = new FsCheckpointWorkspace({ root: join(dir, "bindings"), store });
  });
  afterEach(async () => rm(dir, { recursive: true, force: true }));

  async function materialize(
    candidate: Parameters<FsCheckpointWorkspace["materialize"]>[0]["candidate"],
    key = "k1",
    strategy = "checkpoint_restore" as const,
  ) {
    return ws.materialize({ scope, fence, strategy, candidate, idempotencyKey: key, signal });
  }

  async function bound(key = "k1"): Promise<WorkspaceBinding> {
    const result = await materialize(null, key);
    if (result.type !== "materialized") throw new Error("expected a binding");
    return result.binding;
  }

  async function checkpoint(binding: WorkspaceBinding) {
    return (await ws.checkpoint({ scope, fence, binding, sandbox, idempotencyKey: "c", signal })).candidate;
  }

  it("checkpoints incrementally and restores byte for byte into a fresh binding", async () => {
    const binding = await bound();
    const path = ws.hostPath(binding);
    expect(binding.metadata).toEqual({ hostPath: path });
    await mkdir(join(path, "src"));
    await writeFile(join(path, "src/a.ts"), "a".repeat(200_000));
    await writeFile(join(path, "b.txt"), "b");
    const first = await checkpoint(binding);
    expect(first).toMatchObject({ contentHash: `sha256:${first.id}`, metadata: { format: CHECKPOINT_FORMAT, files: 2, bytes: 200_001 } });
    store.reset();
    await writeFile(join(path, "b.txt"), "changed");
    const second = await checkpoint(binding);
    // Only the changed file is read and uploaded: the big one comes from the cache.
    expect(store.traffic.putBytes).toBeLessThan(10_000);
    expect(second.id).not.toBe(first.id);

    const restored = await materialize(second, "k2");
    expect(restored).toMatchObject({ type: "materialized", restored: second });
    const target = ws.hostPath(restored.type === "materialized" ? restored.binding : binding);
    expect(await readFile(join(target, "src/a.ts"), "utf8")).toHaveLength(200_000);
    expect(await readFile(join(target, "b.txt"), "utf8")).toBe("changed");
    await expect(ws.attach()).resolves.toBeUndefined();
  });

  it("starts a retried key from an empty binding and an ephemeral one from nothing", async () => {
    const binding = await bound();
    await writeFile(join(ws.hostPath(binding), "junk"), "x");
    const candidate = await checkpoint(binding);
    const again = await bound();
    expect(again.bindingId).toBe(binding.bindingId);
    await expect(stat(join(ws.hostPath(again), "junk"))).rejects.toThrow();
    const ephemeral = await materialize(candidate, "k3", "ephemeral" as never);
    expect(ephemeral).toMatchObject({ type: "materialized", restored: null, binding: { strategy: "ephemeral" } });
  });

  it("rejects candidates that are not its own, missing or corrupt, so the host falls back", async () => {
    const foreign = { id: "ws_1", contentHash: `sha256:${"a".repeat(64)}` };
    expect(await materialize(foreign)).toMatchObject({ type: "candidate_rejected", reason: expect.stringMatching(/not a chunked/) });
    const missing = { id: "b".repeat(64), contentHash: `sha256:${"b".repeat(64)}` };
    expect(await materialize(missing)).toMatchObject({ type: "candidate_rejected", reason: expect.stringMatching(/^manifest_missing/) });
  });

  it("refuses a workspace whose symlink escapes it (hostile input)", async () => {
    const binding = await bound();
    await symlink("/etc/passwd", join(ws.hostPath(binding), "escape"));
    await expect(checkpoint(binding)).rejects.toThrow(/symlink_escape/);
  });

  it("throws on store failures instead of blaming the candidate", async () => {
    const binding = await bound();
    await writeFile(join(ws.hostPath(binding), "f"), "data");
    const candidate = await checkpoint(binding);
    const broken: BlobStore = {
      put: () => Promise.reject(new Error("disk")),
      get: () => Promise.reject(new Error("EIO")),
      delete: () => Promise.reject(new Error("disk")),
      exists: () => Promise.reject(new Error("disk")),
    };
    const failing = new FsCheckpointWorkspace({ root: join(dir, "other"), store: broken });
    await expect(
      failing.materialize({ scope, fence, strategy: "checkpoint_restore", candidate, idempotencyKey: "x", signal }),
    ).rejects.toThrow(/store_error/);
  });

  it("refuses strategies it does not offer", async () => {
    await expect(materialize(null, "k", "durable_mount" as never)).rejects.toThrow(/not offered/);
    expect(ws.capabilities.map((c) => c.strategy)).toEqual(["checkpoint_restore", "ephemeral"]);
  });

  it("releases bindings and discards candidates idempotently", async () => {
    const binding = await bound();
    const candidate = await checkpoint(binding);
    await ws.release({ scope, fence, binding, signal });
    await expect(stat(ws.hostPath(binding))).rejects.toThrow();
    expect(await ws.discard({ scope, candidate, signal })).toEqual({ type: "discarded" });
    expect(await ws.discard({ scope, candidate, signal })).toEqual({ type: "not_found" });
  });
});
