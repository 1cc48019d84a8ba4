/**
 * RuntimeResourceFencePort: the only component allowed to make a workspace,
 * output or runtime-checkpoint candidate active. A fence is a generation of a
 * scope held by one owner attempt; publication checks the fence and moves all
 * active pointers in one compare-and-set, so a stale owner can never
 * overwrite what a newer one published.
 */
import type { RuntimeCheckpointRef } from "./checkpoint.ts";
import { runtimeCheckpointRefIssues } from "./checkpoint.ts";
import { type FlatMetadata, isFlatMetadata, isPlainObject } from "./json.ts";
import { isRuntimeIdentifier, type RuntimeResourceScope } from "./scope.ts";

export interface RuntimeResourceFence {
  scope: RuntimeResourceScope;
  /** Unique per acquisition attempt: two attempts never share a fence, even from one process. */
  ownerId: string;
  /** Monotonic per scope; every successful acquire gets a new one. */
  generation: number;
  /**
   * Opaque proof of this generation. Only the host holding publication
   * authority keeps it: never log it, never pass it to a sandbox, harness or
   * orphan record. Stores keep only its hash.
   */
  token: string;
  /** Epoch milliseconds. */
  expiresAt: number;
}

/** A fence without its token: what every port except the fence itself receives. */
export type FenceIdentity = Omit<RuntimeResourceFence, "token">;

export function fenceIdentity(fence: RuntimeResourceFence): FenceIdentity {
  return { scope: fence.scope, ownerId: fence.ownerId, generation: fence.generation, expiresAt: fence.expiresAt };
}

/** An immutable workspace candidate (archive, snapshot or durable-mount revision). */
export interface WorkspaceCandidateRef {
  id: string;
  /** `sha256:<hex>` of the candidate's manifest or archive. */
  contentHash: string;
  metadata?: FlatMetadata;
}

/** An immutable session-output manifest. */
export interface OutputManifestRef {
  id: string;
  contentHash: string;
  entryCount: number;
  metadata?: FlatMetadata;
}

/**
 * What one publication changes. An absent field keeps the current pointer;
 * `null` clears it (e.g. a runtime checkpoint that no longer matches the new
 * workspace). At least one field must be present.
 */
export interface PublicationPointers {
  workspace?: WorkspaceCandidateRef | null;
  outputs?: OutputManifestRef | null;
  runtimeCheckpoint?: RuntimeCheckpointRef | null;
}

/** The active pointers of a scope after a publication. */
export interface ActivePublication {
  /** Monotonic per scope; bumps once per (non-replayed) publication. */
  revision: number;
  /** The generation that published this revision. */
  generation: number;
  publishedAt: number;
  workspace: WorkspaceCandidateRef | null;
  outputs: OutputManifestRef | null;
  runtimeCheckpoint: RuntimeCheckpointRef | null;
}

/** One row of publication history: what was active after each revision (for GC and fallback). */
export interface PublicationRecord extends ActivePublication {
  ownerId: string;
  idempotencyKey: string;
}

export type FenceStaleReason =
  /** A newer generation holds (or held) the scope. */
  | "superseded"
  /** The generation still matches but its expiry passed: it may be taken over at any moment. */
  | "expired"
  | "released"
  /** Generation matches but owner or token do not: a forged or corrupted fence. */
  | "token_mismatch"
  /** The scope was never acquired. */
  | "unknown_scope";

export type FenceAcquireResult =
  | { type: "acquired"; fence: RuntimeResourceFence; active: ActivePublication | null }
  | { type: "conflict"; holderExpiresAt: number };

export type FenceRenewResult = { type: "renewed"; fence: RuntimeResourceFence } | { type: "stale"; reason: FenceStaleReason };

export type FencePublishResult =
  /** `replayed`: the same key and byte-identical pointers were already published by this generation. */
  | { type: "published"; publication: ActivePublication; replayed: boolean }
  | { type: "stale"; reason: FenceStaleReason }
  /** The key was already used for different pointers (or by another generation). */
  | { type: "conflict"; reason: "idempotency_key_reused" };

export type FenceReleaseResult = { type: "released" } | { type: "stale"; reason: FenceStaleReason };

export interface RuntimeResourceFencePort {
  acquire(input: { scope: RuntimeResourceScope; ownerId: string; ttlMs: number; signal: AbortSignal }): Promise<FenceAcquireResult>;
  /** Extends an unexpired fence; an expired one is lost even if nobody took over yet. */
  renew(input: { fence: RuntimeResourceFence; ttlMs: number; signal: AbortSignal }): Promise<FenceRenewResult>;
  /** Read-only gate before external effects that cannot join the publication transaction. */
  isCurrent(input: { fence: RuntimeResourceFence; signal: AbortSignal }): Promise<boolean>;
  /** Fence check and pointer move in one atomic compare-and-set; idempotent per key. */
  publish(input: {
    fence: RuntimeResourceFence;
    pointers: PublicationPointers;
    idempotencyKey: string;
    signal: AbortSignal;
  }): Promise<FencePublishResult>;
  /** Ends the generation so the next acquire need not wait for expiry. Idempotent. */
  release(input: { fence: RuntimeResourceFence; signal: AbortSignal }): Promise<FenceReleaseResult>;
  active(input: { scope: RuntimeResourceScope; signal: AbortSignal }): Promise<ActivePublication | null>;
  /** Newest first; `beforeRevision` pages backwards. */
  history(input: {
    scope: RuntimeResourceScope;
    beforeRevision?: number;
    limit: number;
    signal: AbortSignal;
  }): Promise<PublicationRecord[]>;
}

const CONTENT_HASH = /^sha256:[0-9a-f]{64}$/;
/** Bound on entries of one manifest; also keeps the value inside int4. */
export const MAX_OUTPUT_ENTRIES = 1_000_000;

/** Structural problems of a publication, as `field: problem` strings (empty when valid). */
export function publicationPointerIssues(pointers: unknown): string[] {
  if (!isPlainObject(pointers)) return ["pointers: must be an object"];
  const issues: string[] = [];
  const known = ["workspace", "outputs", "runtimeCheckpoint"];
  for (const key of Object.keys(pointers)) if (!known.includes(key)) issues.push(`${key}: unknown pointer`);
  const present = known.filter((key) => pointers[key] !== undefined);
  if (present.length === 0) issues.push("pointers: at least one of workspace, outputs, runtimeCheckpoint is required");
  if (pointers.workspace != null) issues.push(...candidateIssues("workspace", pointers.workspace, false));
  if (pointers.outputs != null) issues.push(...candidateIssues("outputs", pointers.outputs, true));
  if (pointers.runtimeCheckpoint != null) {
    issues.push(...runtimeCheckpointRefIssues(pointers.runtimeCheckpoint).map((issue) => `runtimeCheckpoint.${issue}`));
  }
  return issues;
}

function candidateIssues(field: string, value: unknown, manifest: boolean): string[] {
  if (!isPlainObject(value)) return [`${field}: must be an object or null`];
  const issues: string[] = [];
  if (!isRuntimeIdentifier(value.id)) issues.push(`${field}.id: must be a non-empty identifier`);
  if (typeof value.contentHash !== "string" || !CONTENT_HASH.test(value.contentHash))
    issues.push(`${field}.contentHash: must be sha256:<64 hex>`);
  if (value.metadata !== undefined && !isFlatMetadata(value.metadata))
    issues.push(`${field}.metadata: must be flat string/number/boolean/null values`);
  if (manifest) {
    const count = value.entryCount;
    if (!Number.isInteger(count) || (count as number) < 0 || (count as number) > MAX_OUTPUT_ENTRIES) {
      issues.push(`${field}.entryCount: must be an integer between 0 and ${MAX_OUTPUT_ENTRIES}`);
    }
  }
  return issues;
}
