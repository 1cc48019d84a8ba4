/**
 * RuntimeCheckpointPort: optional process-memory (or runtime filesystem)
 * checkpoints. Deliberately separate from workspace persistence: a checkpoint
 * is an optimization, never the source of truth. Its ref is published in the
 * same fenced compare-and-set as the workspace and outputs, and a later owner
 * restores it only when `assessRestorableCheckpoint` accepts it; otherwise the
 * host falls back to the canonical workspace path.
 */
import type { RuntimeCheckpointKind } from "./capabilities.ts";
import type { HarnessIdentity } from "./driver.ts";
import type { FenceIdentity, WorkspaceCandidateRef } from "./fence.ts";
import { isFlatMetadata, isPlainObject } from "./json.ts";
import type { ManagedSandboxLease } from "./sandbox.ts";
import { isRuntimeIdentifier, type RuntimeResourceScope } from "./scope.ts";

export interface RuntimeCheckpointRef {
  provider: string;
  checkpointId: string;
  kind: RuntimeCheckpointKind;
  /** The runtime the checkpoint was taken from. */
  sourceRuntimeId: string;
  sessionId: string;
  /** The fence generation that created it. */
  generation: number;
  /** The workspace candidate the process state belongs with (`null` for an ephemeral workspace). */
  workspaceCandidateId: string | null;
  harness: HarnessIdentity;
}

export type RuntimeCheckpointCreateResult = { type: "created"; ref: RuntimeCheckpointRef } | { type: "failed"; error: string };
export type RuntimeCheckpointRestoreResult = { type: "restored"; lease: ManagedSandboxLease } | { type: "failed"; error: string };

export interface RuntimeCheckpointPort {
  readonly kinds: readonly RuntimeCheckpointKind[];
  create(input: {
    scope: RuntimeResourceScope;
    fence: FenceIdentity;
    sandbox: ManagedSandboxLease;
    kind: RuntimeCheckpointKind;
    workspace: WorkspaceCandidateRef | null;
    harness: HarnessIdentity;
    signal: AbortSignal;
  }): Promise<RuntimeCheckpointCreateResult>;
  restore(input: {
    scope: RuntimeResourceScope;
    fence: FenceIdentity;
    ref: RuntimeCheckpointRef;
    signal: AbortSignal;
  }): Promise<RuntimeCheckpointRestoreResult>;
  /** Garbage collection of a superseded or never-published checkpoint. Idempotent. */
  discard(input: { ref: RuntimeCheckpointRef; signal: AbortSignal }): Promise<{ type: "discarded" } | { type: "not_found" }>;
}

/** Bounds `runtimeIdentity` (canonical JSON of a process declaration). */
export const MAX_RUNTIME_IDENTITY_LENGTH = 8192;

/** Structural problems of a ref, as `field: problem` strings (empty when valid). */
export function runtimeCheckpointRefIssues(value: unknown): string[] {
  if (!isPlainObject(value)) return ["ref: must be an object"];
  const issues: string[] = [];
  for (const field of ["provider", "checkpointId", "sourceRuntimeId", "sessionId"] as const) {
    if (!isRuntimeIdentifier(value[field])) issues.push(`${field}: must be a non-empty identifier`);
  }
  if (value.kind !== "process" && value.kind !== "filesystem") issues.push("kind: must be process or filesystem");
  if (!Number.isSafeInteger(value.generation) || (value.generation as number) < 1) issues.push("generation: must be a positive integer");
  if (value.workspaceCandidateId !== null && !isRuntimeIdentifier(value.workspaceCandidateId)) {
    issues.push("workspaceCandidateId: must be an identifier or null");
  }
  const harness = value.harness;
  if (
    !isFlatMetadata(harness) ||
    !isRuntimeIdentifier(harness.id) ||
    !isRuntimeIdentifier(harness.version) ||
    typeof harness.runtimeIdentity !== "string" ||
    harness.runtimeIdentity.length > MAX_RUNTIME_IDENTITY_LENGTH
  ) {
    issues.push("harness: must be {id, version, runtimeIdentity}");
  }
  return issues;
}

/** What the current owner requires of a checkpoint before trusting it. */
export interface RuntimeCheckpointExpectation {
  provider: string;
  sessionId: string;
  /** The current owner's generation. */
  generation: number;
  kind: RuntimeCheckpointKind;
  harness: HarnessIdentity;
  /** The workspace candidate being restored alongside; the process state must belong to it. */
  workspaceCandidateId: string | null;
}

export type RuntimeCheckpointRejection =
  | "malformed"
  | "provider_mismatch"
  | "session_mismatch"
  | "kind_mismatch"
  | "harness_mismatch"
  | "workspace_mismatch"
  | "generation_mismatch"
  | "runtime_mismatch";

export type RuntimeCheckpointAssessment =
  | { type: "accepted"; ref: RuntimeCheckpointRef }
  | { type: "rejected"; reason: RuntimeCheckpointRejection };

/**
 * May a new owner restore this previously published ref? It must have been
 * written by an earlier generation of the same session on the same provider,
 * for the same harness build and checkpoint kind, and belong to the workspace
 * candidate being restored. Any doubt means "use the workspace path".
 */
export function assessRestorableCheckpoint(ref: unknown, expected: RuntimeCheckpointExpectation): RuntimeCheckpointAssessment {
  const mismatch = commonMismatch(ref, expected);
  if (mismatch !== null) return mismatch;
  const checked = ref as RuntimeCheckpointRef;
  if (checked.generation >= expected.generation) return { type: "rejected", reason: "generation_mismatch" };
  return { type: "accepted", ref: checked };
}

/**
 * Is a ref the port just created really the one asked for? Guards against an
 * adapter returning a checkpoint of another runtime or generation, which would
 * otherwise be published as this generation's state.
 */
export function assessCreatedCheckpoint(
  ref: unknown,
  expected: RuntimeCheckpointExpectation & { runtimeId: string },
): RuntimeCheckpointAssessment {
  const mismatch = commonMismatch(ref, expected);
  if (mismatch !== null) return mismatch;
  const checked = ref as RuntimeCheckpointRef;
  if (checked.generation !== expected.generation) return { type: "rejected", reason: "generation_mismatch" };
  if (checked.sourceRuntimeId !== expected.runtimeId) return { type: "rejected", reason: "runtime_mismatch" };
  return { type: "accepted", ref: checked };
}

function commonMismatch(ref: unknown, expected: RuntimeCheckpointExpectation): RuntimeCheckpointAssessment | null {
  if (runtimeCheckpointRefIssues(ref).length > 0) return { type: "rejected", reason: "malformed" };
  const checked = ref as RuntimeCheckpointRef;
  if (checked.provider !== expected.provider) return { type: "rejected", reason: "provider_mismatch" };
  if (checked.sessionId !== expected.sessionId) return { type: "rejected", reason: "session_mismatch" };
  if (checked.kind !== expected.kind) return { type: "rejected", reason: "kind_mismatch" };
  const { harness } = checked;
  if (
    harness.id !== expected.harness.id ||
    harness.version !== expected.harness.version ||
    harness.runtimeIdentity !== expected.harness.runtimeIdentity
  ) {
    return { type: "rejected", reason: "harness_mismatch" };
  }
  if (checked.workspaceCandidateId !== expected.workspaceCandidateId) return { type: "rejected", reason: "workspace_mismatch" };
  return null;
}
