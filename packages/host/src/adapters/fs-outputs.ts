/**
 * SessionOutputPort on the host filesystem, over `@openma/persistence`:
 * `final_collect` (enumerate, validate limits, read, hash, upload
 * content-addressed blobs, re-read to detect mutation, immutable manifest)
 * and `watch_and_upload` (stable files uploaded while the harness runs, the
 * final manifest reusing them). Hostile files (symlinks, special files,
 * files changing under the reader, size bombs) are refused with a reason and
 * listed in the manifest; a collection that cannot be bounded at all (too
 * many files, too many bytes) fails, so the run publishes nothing.
 *
 * Each binding is a fresh host directory bind-mounted at
 * `/mnt/session/outputs`; the manifest becomes visible only through the
 * host's fenced publication.
 */
import { mkdir, rm, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import {
  canonicalJson,
  OUTPUTS_MOUNT_PATH,
  type OutputCollectResult,
  type OutputManifestRef,
  type OutputRejectionReason,
  type OutputStrategyOffer,
  runtimeScopeKey,
  type SessionOutputBinding,
  type SessionOutputPort,
} from "@openma/contract";
import {
  type CollectResult,
  collectOutputs,
  DEFAULT_OUTPUT_LIMITS,
  type IssueCode,
  OUTPUTS_FORMAT,
  type OutputLimits,
  OutputWatcher,
  outputManifestKey,
  parseOutputManifest,
} from "@openma/persistence";
import { type BlobStore, sha256Hex } from "@openma/storage/blobs";
import type { Scheduler } from "@openma/time";
import { every } from "../every.ts";

export interface FsOutputsOptions {
  root: string;
  store: BlobStore;
  limits?: Partial<OutputLimits>;
  /** Drives `watch_and_upload` scans. */
  scheduler: Scheduler;
  watchIntervalMs?: number;
  onWatchError?: (err: unknown) => void;
}

type Input<K extends "prepare" | "attach" | "collect" | "finalize" | "release" | "abort" | "discard"> = Parameters<SessionOutputPort[K]>[0];

interface BindingState {
  dir: string;
  watcher: OutputWatcher | null;
  stopWatching: AbortController;
  collected: Extract<CollectResult, { ok: true }> | null;
}

/** Every refusal code the collector can report, as the contract's reason. */
const REASONS: Record<IssueCode, OutputRejectionReason> = {
  symlink: "symlink",
  symlink_escape: "symlink",
  special_file: "not_regular_file",
  invalid_path: "invalid_path",
  too_many_entries: "too_many_files",
  file_too_large: "file_too_large",
  total_too_large: "total_too_large",
  changed: "changed_while_reading",
  unreadable: "unreadable",
  not_a_directory: "not_regular_file",
  invalid_id: "unreadable",
  manifest_missing: "unreadable",
  manifest_corrupt: "unreadable",
  manifest_invalid: "unreadable",
  chunk_missing: "unreadable",
  chunk_corrupt: "unreadable",
  file_corrupt: "unreadable",
  chunk_vanished: "unreadable",
  store_error: "unreadable",
  target_error: "unreadable",
  no_verified_candidate: "unreadable",
};

export class FsSessionOutputs implements SessionOutputPort {
  readonly capabilities: readonly OutputStrategyOffer[] = [
    { strategy: "final_collect", durability: "durable" },
    { strategy: "watch_and_upload", durability: "durable" },
  ];
  readonly #options: FsOutputsOptions;
  readonly #bindings = new Map<string, BindingState>();

  constructor(options: FsOutputsOptions) {
    this.#options = options;
  }

  hostPath(binding: SessionOutputBinding): string {
    return join(this.#options.root, binding.bindingId, "outputs");
  }

  async prepare(input: Input<"prepare">): Promise<SessionOutputBinding> {
    const { strategy } = input;
    if (strategy === "durable_mount") throw new Error("output strategy durable_mount is not offered");
    const bindingId = `outb_${sha256Hex(canonicalJson([runtimeScopeKey(input.scope), input.idempotencyKey])).slice(0, 32)}`;
    const binding: SessionOutputBinding = { bindingId, strategy, mountPath: OUTPUTS_MOUNT_PATH };
    const dir = this.hostPath(binding);
    binding.metadata = { hostPath: dir };
    this.#stop(bindingId);
    await rm(join(this.#options.root, bindingId), { recursive: true, force: true });
    await mkdir(dir, { recursive: true });
    if (input.previous) await this.#seed(dir, input.previous);
    const opts = { limits: this.#options.limits };
    const watcher = strategy === "watch_and_upload" ? new OutputWatcher(this.#options.store, dir, opts) : null;
    this.#bindings.set(bindingId, { dir, watcher, stopWatching: new AbortController(), collected: null });
    return binding;
  }

  /** Starts background uploads for `watch_and_upload`; `final_collect` has nothing to do until the end. */
  async attach(input: Input<"attach">): Promise<void> {
    const state = this.#state(input.binding);
    const { watcher } = state;
    if (watcher === null) return;
    const onError = this.#options.onWatchError ?? (() => {});
    void every(this.#options.scheduler, this.#options.watchIntervalMs ?? 5_000, state.stopWatching.signal, () => watcher.scan(), onError);
  }

  async collect(input: Input<"collect">): Promise<OutputCollectResult> {
    const state = this.#state(input.binding);
    const result = state.watcher
      ? await state.watcher.finalize({ onRefusal: "skip" })
      : await collectOutputs(this.#options.store, state.dir, { limits: this.#options.limits, onRefusal: "skip" });
    if (!result.ok) throw new Error(`output collection failed (${result.error.code}): ${result.error.message}`);
    state.collected = result;
    const entries = result.manifest.entries.map((e) => ({
      logicalPath: e.path,
      contentHash: `sha256:${e.sha256}`,
      size: e.size,
      mediaType: e.mimeType,
    }));
    const rejected = result.manifest.refused.map((r) => ({ path: r.path, reason: REASONS[r.code] }));
    return { type: "collected", entries, rejected };
  }

  /** The manifest was written by `collect`; finalize only hands out the one matching these entries. */
  async finalize(input: Input<"finalize">): Promise<OutputManifestRef> {
    const collected = this.#state(input.binding).collected;
    const expected = collected?.manifest.entries.map((e) => `${e.path}\u0000sha256:${e.sha256}`) ?? [];
    const given = input.entries.map((e) => `${e.logicalPath}\u0000${e.contentHash}`);
    if (collected === null || canonicalJson(expected) !== canonicalJson(given)) {
      throw new Error("finalize: entries do not match the last collection of this binding");
    }
    return {
      id: collected.id,
      contentHash: `sha256:${collected.id}`,
      entryCount: collected.manifest.entries.length,
      metadata: { format: OUTPUTS_FORMAT },
    };
  }

  async release(input: Input<"release">): Promise<void> {
    await this.#drop(input.binding.bindingId);
  }

  /** Published blobs and manifests stay; the unpublished manifest is simply never referenced (GC sweeps it). */
  async abort(input: Input<"abort">): Promise<void> {
    await this.#drop(input.binding.bindingId);
  }

  async discard(input: Input<"discard">): Promise<{ type: "discarded" } | { type: "not_found" }> {
    const key = outputManifestKey(input.manifest.id);
    if (!(await this.#options.store.exists(key))) return { type: "not_found" };
    await this.#options.store.delete(key);
    return { type: "discarded" };
  }

  /**
   * Writes the deliverables of the previous manifest into a fresh binding, each verified against its
   * hash. A published deliverable that cannot be restored fails the placement: carrying on would
   * publish a manifest that silently drops it.
   */
  async #seed(dir: string, previous: OutputManifestRef): Promise<void> {
    const store = this.#options.store;
    const bytes = await store.get(outputManifestKey(previous.id));
    if (bytes === null) throw new Error(`the published output manifest ${previous.id} is missing from the blob store`);
    const parsed = parseOutputManifest(bytes, { ...DEFAULT_OUTPUT_LIMITS, ...this.#options.limits });
    if (!parsed.ok) throw new Error(`the published output manifest ${previous.id} is invalid: ${parsed.message}`);
    for (const entry of parsed.manifest.entries) {
      const content = await store.get(entry.blobKey);
      if (content === null || sha256Hex(content) !== entry.sha256) {
        throw new Error(`published deliverable ${entry.path} cannot be restored: its blob is missing or does not match its hash`);
      }
      // The manifest parser has refused absolute paths and `..`, so the join stays inside the binding.
      const target = join(dir, entry.path);
      await mkdir(dirname(target), { recursive: true });
      await writeFile(target, content, { flag: "wx" });
    }
  }

  #state(binding: SessionOutputBinding): BindingState {
    const state = this.#bindings.get(binding.bindingId);
    if (!state) throw new Error(`unknown output binding ${binding.bindingId}`);
    return state;
  }

  #stop(bindingId: string): void {
    this.#bindings.get(bindingId)?.stopWatching.abort();
  }

  async #drop(bindingId: string): Promise<void> {
    this.#stop(bindingId);
    this.#bindings.delete(bindingId);
    await rm(join(this.#options.root, bindingId), { recursive: true, force: true });
  }
}
