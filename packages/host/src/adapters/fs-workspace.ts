/**
 * WorkspacePersistencePort for `checkpoint_restore` on the host filesystem,
 * over `@openma/persistence`: content-defined chunks stored once in a blob
 * store, a manifest whose SHA-256 is the candidate id, and restores that
 * verify every byte before the tree is swapped in.
 *
 * Each binding is a fresh host directory (bind-mounted at `/workspace` by
 * the sandbox adapter; its path is in the binding metadata). A candidate
 * that fails verification is reported as `candidate_rejected` so the host
 * falls back to an older revision; a store or disk that cannot be used is a
 * thrown error, because an older candidate would not fare better. Each
 * binding keeps the previous checkpoint's cache, so turn-by-turn
 * checkpoints read only what changed.
 */
import { mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import {
  canonicalJson,
  runtimeScopeKey,
  WORKSPACE_MOUNT_PATH,
  type WorkspaceBinding,
  type WorkspaceCandidateRef,
  type WorkspaceMaterializeResult,
  type WorkspacePersistencePort,
  type WorkspaceStrategyOffer,
} from "@openma/contract";
import {
  CHECKPOINT_FORMAT,
  type CheckpointCache,
  type CheckpointOptions,
  checkpointManifestKey,
  createCheckpoint,
  type RestoreOptions,
  restoreCheckpoint,
} from "@openma/persistence";
import { type BlobStore, sha256Hex } from "@openma/storage/blobs";

export interface FsWorkspaceOptions {
  /** Host directory for bindings (one subdirectory each). */
  root: string;
  store: BlobStore;
  checkpoint?: Omit<CheckpointOptions, "cache">;
  restore?: RestoreOptions;
}

type Input<K extends "materialize" | "checkpoint" | "release" | "discard"> = Parameters<WorkspacePersistencePort[K]>[0];

/** Storage faults: the candidate is not to blame, so falling back to an older one would be wrong. */
const INFRASTRUCTURE = new Set(["store_error", "target_error"]);

export class FsCheckpointWorkspace implements WorkspacePersistencePort {
  readonly capabilities: readonly WorkspaceStrategyOffer[] = [
    { strategy: "checkpoint_restore", durability: "durable" },
    { strategy: "ephemeral", durability: "none" },
  ];
  readonly #options: FsWorkspaceOptions;
  readonly #caches = new Map<string, CheckpointCache>();
  /** The candidate a binding was restored from: its packs are reused by the binding's first checkpoint, which has no cache yet. */
  readonly #bases = new Map<string, string>();

  constructor(options: FsWorkspaceOptions) {
    this.#options = options;
  }

  /** Where a binding's `/workspace` lives on the host. */
  hostPath(binding: WorkspaceBinding): string {
    return join(this.#options.root, binding.bindingId, "workspace");
  }

  async materialize(input: Input<"materialize">): Promise<WorkspaceMaterializeResult> {
    const { strategy, candidate } = input;
    if (strategy !== "checkpoint_restore" && strategy !== "ephemeral") throw new Error(`workspace strategy ${strategy} is not offered`);
    const bindingId = `wsb_${sha256Hex(canonicalJson([runtimeScopeKey(input.scope), input.idempotencyKey])).slice(0, 32)}`;
    const binding: WorkspaceBinding = { bindingId, strategy, mountPath: WORKSPACE_MOUNT_PATH };
    const target = this.hostPath(binding);
    binding.metadata = { hostPath: target };
    // A retried key starts over from an empty binding.
    await rm(join(this.#options.root, bindingId), { recursive: true, force: true });
    await mkdir(join(this.#options.root, bindingId), { recursive: true });
    if (candidate === null || strategy === "ephemeral") {
      await mkdir(target);
      return { type: "materialized", binding, restored: null };
    }
    if (candidate.contentHash !== `sha256:${candidate.id}`) {
      return { type: "candidate_rejected", candidate, reason: "not a chunked workspace checkpoint (id and content hash differ)" };
    }
    const restored = await restoreCheckpoint(this.#options.store, candidate.id, target, this.#options.restore);
    if (restored.ok) {
      this.#bases.set(bindingId, candidate.id);
      return { type: "materialized", binding, restored: candidate };
    }
    const { code, message } = restored.error;
    if (INFRASTRUCTURE.has(code)) throw new Error(`workspace restore failed (${code}): ${message}`);
    return { type: "candidate_rejected", candidate, reason: `${code}: ${message}` };
  }

  /** The sandbox adapter bind-mounts `hostPath`; nothing to do after acquire. */
  async attach(): Promise<void> {}

  async checkpoint(input: Input<"checkpoint">): Promise<{ type: "created"; candidate: WorkspaceCandidateRef }> {
    const { binding } = input;
    const result = await createCheckpoint(this.#options.store, this.hostPath(binding), {
      ...this.#options.checkpoint,
      cache: this.#caches.get(binding.bindingId),
      base: this.#bases.get(binding.bindingId),
    });
    if (!result.ok) throw new Error(`workspace checkpoint failed (${result.error.code}) /${result.error.path}: ${result.error.message}`);
    this.#caches.set(binding.bindingId, result.cache);
    const candidate: WorkspaceCandidateRef = {
      id: result.id,
      contentHash: `sha256:${result.id}`,
      metadata: { format: CHECKPOINT_FORMAT, files: result.stats.files, bytes: result.stats.bytes },
    };
    return { type: "created", candidate };
  }

  async release(input: Input<"release">): Promise<void> {
    this.#caches.delete(input.binding.bindingId);
    this.#bases.delete(input.binding.bindingId);
    await rm(join(this.#options.root, input.binding.bindingId), { recursive: true, force: true });
  }

  /** Drops the manifest; its chunks go when the blob GC finds them unreferenced. */
  async discard(input: Input<"discard">): Promise<{ type: "discarded" } | { type: "not_found" }> {
    const key = checkpointManifestKey(input.candidate.id);
    if (!(await this.#options.store.exists(key))) return { type: "not_found" };
    await this.#options.store.delete(key);
    return { type: "discarded" };
  }
}
