/**
 * Garbage collection of workspace candidates, output manifests and runtime
 * checkpoints, by a retention policy over the fence's publication history:
 * per scope, keep the active candidates and the `keepPrevious` distinct ones
 * before them (the depth a corrupt-candidate fallback can reach); everything
 * else is superseded. Unpublished candidates never appear in the history at
 * all, so they are collected as soon as they are older than the grace
 * period, which protects checkpoints still uploading or awaiting their CAS.
 *
 * Blob-backed candidates (chunked workspace checkpoints, output manifests)
 * are swept by `@openma/persistence`'s mark-and-sweep, which also deletes
 * chunks no retained manifest references; it fails closed if a retained
 * manifest cannot be verified. Superseded runtime checkpoints are discarded
 * through their port (idempotent).
 */
import type {
  OutputManifestRef,
  PublicationRecord,
  RuntimeCheckpointPort,
  RuntimeCheckpointRef,
  RuntimeResourceFencePort,
  RuntimeResourceScope,
  WorkspaceCandidateRef,
} from "@openma/contract";
import { CHECKPOINT_FORMAT, collectGarbage, type GcResult, OUTPUTS_FORMAT } from "@openma/persistence";
import type { BlobStore } from "@openma/storage/blobs";

export interface RetentionPolicy {
  /** Distinct earlier candidates kept per scope besides the active one. */
  keepPrevious: number;
  /** Unreferenced objects younger than this survive (uploads in flight, candidates awaiting publication). */
  graceMs: number;
}

export interface Retention {
  workspaces: WorkspaceCandidateRef[];
  outputs: OutputManifestRef[];
  runtimeCheckpoint: RuntimeCheckpointRef | null;
  /** Runtime checkpoints published earlier and no longer active: process state of a superseded workspace. */
  supersededCheckpoints: RuntimeCheckpointRef[];
}

/** Pure: what to keep, from one scope's history, newest first (its first record holds the active pointers). */
export function retention(history: readonly PublicationRecord[], keepPrevious: number): Retention {
  const active = history[0]?.runtimeCheckpoint ?? null;
  const superseded = new Map<string, RuntimeCheckpointRef>();
  for (const record of history) {
    const ref = record.runtimeCheckpoint;
    if (ref !== null && ref.checkpointId !== active?.checkpointId) superseded.set(ref.checkpointId, ref);
  }
  return {
    workspaces: firstDistinct(
      history.map((r) => r.workspace),
      keepPrevious + 1,
    ),
    outputs: firstDistinct(
      history.map((r) => r.outputs),
      keepPrevious + 1,
    ),
    runtimeCheckpoint: active,
    supersededCheckpoints: [...superseded.values()],
  };
}

function firstDistinct<T extends { id: string }>(refs: ReadonlyArray<T | null>, limit: number): T[] {
  const kept = new Map<string, T>();
  for (const ref of refs) if (ref !== null && kept.size < limit && !kept.has(ref.id)) kept.set(ref.id, ref);
  return [...kept.values()];
}

export interface RuntimeGcInput {
  fences: RuntimeResourceFencePort;
  /** Every scope with publications (for SQL: `sqlFenceScopes`). */
  scopes: Iterable<RuntimeResourceScope> | AsyncIterable<RuntimeResourceScope>;
  store: BlobStore;
  runtimeCheckpoint?: RuntimeCheckpointPort;
  policy: RetentionPolicy;
  /** Epoch ms, injected so tests control ages. */
  now: number;
  signal: AbortSignal;
  /** History page size. */
  pageSize?: number;
  dryRun?: boolean;
}

export interface RuntimeGcReport {
  scopes: number;
  retainedWorkspaces: number;
  retainedOutputs: number;
  blobs: GcResult;
  runtimeCheckpoints: { discarded: number; notFound: number; failed: number };
}

export async function collectRuntimeGarbage(input: RuntimeGcInput): Promise<RuntimeGcReport> {
  const liveCheckpoints = new Set<string>();
  const liveOutputs = new Set<string>();
  const superseded = new Map<string, RuntimeCheckpointRef>();
  let scopes = 0;
  for await (const scope of input.scopes) {
    scopes += 1;
    const kept = retention(await fullHistory(input, scope), input.policy.keepPrevious);
    for (const ref of kept.workspaces) if (ref.metadata?.format === CHECKPOINT_FORMAT) liveCheckpoints.add(ref.id);
    for (const ref of kept.outputs) if (ref.metadata?.format === OUTPUTS_FORMAT) liveOutputs.add(ref.id);
    for (const ref of kept.supersededCheckpoints) superseded.set(ref.checkpointId, ref);
  }
  const blobs = await collectGarbage(input.store, {
    liveCheckpoints,
    liveOutputs,
    retentionMs: input.policy.graceMs,
    now: input.now,
    dryRun: input.dryRun,
  });
  const runtimeCheckpoints = { discarded: 0, notFound: 0, failed: 0 };
  if (input.runtimeCheckpoint && !input.dryRun) {
    for (const ref of superseded.values()) {
      const outcome = await input.runtimeCheckpoint.discard({ ref, signal: input.signal }).catch(() => ({ type: "failed" as const }));
      runtimeCheckpoints[outcome.type === "discarded" ? "discarded" : outcome.type === "not_found" ? "notFound" : "failed"] += 1;
    }
  }
  return { scopes, retainedWorkspaces: liveCheckpoints.size, retainedOutputs: liveOutputs.size, blobs, runtimeCheckpoints };
}

async function fullHistory(input: RuntimeGcInput, scope: RuntimeResourceScope): Promise<PublicationRecord[]> {
  const records: PublicationRecord[] = [];
  const limit = input.pageSize ?? 500;
  for (;;) {
    const before = records.at(-1)?.revision;
    const page = await input.fences.history({
      scope,
      limit,
      signal: input.signal,
      ...(before === undefined ? {} : { beforeRevision: before }),
    });
    records.push(...page);
    if (page.length < limit) return records;
  }
}
