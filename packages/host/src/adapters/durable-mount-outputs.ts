/**
 * SessionOutputPort for `durable_mount`: `/mnt/session/outputs` is a
 * directory on a host root the operator declares durable, so every write the
 * sandbox makes is durable as it happens (it survives the host process and
 * the sandbox). Publication still needs an immutable, validated snapshot: at
 * the end the accepted files are validated and frozen into content-addressed
 * blobs with an immutable manifest by exactly the `final_collect` code path
 * (`FsSessionOutputs` over `@openma/persistence`): same limits, same refusals
 * for symlinks, `..`, devices, files changing under the reader and size
 * bombs, same reasons. The manifest is visible only through the fenced
 * publication.
 *
 * What differs from `final_collect`: the capability is declared durable
 * only when the root is, and a run that ends without publishing keeps its
 * outputs directory (moved to `aborted/`) for an operator or a recovery
 * collection instead of deleting what was durably written; `sweep` removes
 * those of stale generations.
 */
import { mkdir, readdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import {
  type OutputCollectResult,
  type OutputManifestRef,
  type OutputStrategyOffer,
  type RuntimeResourceScope,
  runtimeScopeKey,
  type SessionOutputBinding,
  type SessionOutputPort,
} from "@openma/contract";
import type { OutputLimits } from "@openma/persistence";
import { type BlobStore, sha256Hex } from "@openma/storage/blobs";
import { realScheduler } from "@openma/time";
import { FsSessionOutputs } from "./fs-outputs.ts";

export interface DurableMountOutputsOptions {
  /** The durable host directory or mounted volume holding each binding's outputs directory. */
  root: string;
  /** Where validated outputs and manifests are frozen (the server's blob store). */
  store: BlobStore;
  /** Declared by the operator; default false (`best_effort`), e.g. for a tmpfs root. */
  durable?: boolean;
  limits?: Partial<OutputLimits>;
}

type Input<K extends "prepare" | "attach" | "collect" | "finalize" | "release" | "abort" | "discard"> = Parameters<SessionOutputPort[K]>[0];

/** The same binding as the `final_collect` adapter knows it. */
const inner = (binding: SessionOutputBinding): SessionOutputBinding => ({ ...binding, strategy: "final_collect" });

export class DurableMountOutputs implements SessionOutputPort {
  readonly capabilities: readonly OutputStrategyOffer[];
  readonly #root: string;
  readonly #collector: FsSessionOutputs;

  constructor(options: DurableMountOutputsOptions) {
    this.#root = options.root;
    this.capabilities = [{ strategy: "durable_mount", durability: options.durable === true ? "durable" : "best_effort" }];
    // final_collect never schedules anything; the scheduler only drives watch_and_upload.
    this.#collector = new FsSessionOutputs({
      root: join(options.root, "mounts"),
      store: options.store,
      limits: options.limits,
      scheduler: realScheduler,
    });
  }

  hostPath(binding: SessionOutputBinding): string {
    return this.#collector.hostPath(binding);
  }

  /** Where a run that published nothing left its outputs, per scope. */
  abortedPath(scope: RuntimeResourceScope): string {
    return join(this.#root, "aborted", sha256Hex(runtimeScopeKey(scope)).slice(0, 32));
  }

  async prepare(input: Input<"prepare">): Promise<SessionOutputBinding> {
    if (input.strategy !== "durable_mount") throw new Error(`output strategy ${input.strategy} is not offered`);
    const binding = await this.#collector.prepare({ ...input, strategy: "final_collect" });
    return { ...binding, strategy: "durable_mount" };
  }

  /** The sandbox adapter bind-mounts `metadata.hostPath`; writes land on the durable root directly. */
  async attach(): Promise<void> {}

  collect(input: Input<"collect">): Promise<OutputCollectResult> {
    return this.#collector.collect({ ...input, binding: inner(input.binding) });
  }

  finalize(input: Input<"finalize">): Promise<OutputManifestRef> {
    return this.#collector.finalize({ ...input, binding: inner(input.binding) });
  }

  /** After publication the frozen manifest and blobs are the outputs; the live directory goes. */
  release(input: Input<"release">): Promise<void> {
    return this.#collector.release({ ...input, binding: inner(input.binding) });
  }

  /** Keeps what was durably written (moved aside, never published) and forgets the binding. */
  async abort(input: Input<"abort">): Promise<void> {
    const aside = join(this.abortedPath(input.scope), `${input.fence.generation}.${input.binding.bindingId}`);
    await mkdir(this.abortedPath(input.scope), { recursive: true });
    await rm(aside, { recursive: true, force: true });
    // A directory that is already gone has nothing left to keep.
    await rename(this.hostPath(input.binding), aside).catch(() => undefined);
    await this.#collector.abort({ ...input, binding: inner(input.binding) });
  }

  discard(input: Input<"discard">): Promise<{ type: "discarded" } | { type: "not_found" }> {
    return this.#collector.discard(input);
  }

  /** Removes kept outputs of generations older than `staleBefore` (the current fence generation). */
  async sweep(input: { scope: RuntimeResourceScope; staleBefore: number }): Promise<{ removed: number }> {
    const dir = this.abortedPath(input.scope);
    let removed = 0;
    for (const name of await readdir(dir).catch(() => [] as string[])) {
      if (Number.parseInt(name, 10) >= input.staleBefore) continue;
      await rm(join(dir, name), { recursive: true, force: true });
      removed++;
    }
    return { removed };
  }
}
