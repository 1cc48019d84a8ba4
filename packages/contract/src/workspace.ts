/**
 * WorkspacePersistencePort: materializes `/workspace`, attaches it to compute
 * and produces immutable restore candidates. A candidate becomes the session's
 * workspace only through a fenced publication; the port never moves the
 * active pointer itself.
 */
import type { WorkspaceStrategyOffer } from "./capabilities.ts";
import type { FenceIdentity, WorkspaceCandidateRef } from "./fence.ts";
import type { FlatMetadata } from "./json.ts";
import type { WorkspaceStrategy } from "./profile.ts";
import type { ManagedSandboxLease } from "./sandbox.ts";
import type { RuntimeResourceScope } from "./scope.ts";

export const WORKSPACE_MOUNT_PATH = "/workspace";

export interface WorkspaceBinding {
  bindingId: string;
  strategy: WorkspaceStrategy;
  mountPath: typeof WORKSPACE_MOUNT_PATH;
  metadata?: FlatMetadata;
}

export type WorkspaceMaterializeResult =
  /** `restored` is the candidate now in `/workspace`, or `null` for a fresh workspace. */
  | { type: "materialized"; binding: WorkspaceBinding; restored: WorkspaceCandidateRef | null }
  /**
   * The candidate failed verification (missing, truncated, wrong hash). The
   * host retries with the previous verified revision, never with an empty
   * workspace.
   */
  | { type: "candidate_rejected"; candidate: WorkspaceCandidateRef; reason: string };

export interface WorkspacePersistencePort {
  readonly capabilities: readonly WorkspaceStrategyOffer[];
  materialize(input: {
    scope: RuntimeResourceScope;
    fence: FenceIdentity;
    strategy: WorkspaceStrategy;
    /** The active candidate to restore; `null` starts empty. */
    candidate: WorkspaceCandidateRef | null;
    idempotencyKey: string;
    signal: AbortSignal;
  }): Promise<WorkspaceMaterializeResult>;
  /** Post-acquire mount step; a no-op for bind mounts or remote restores. */
  attach(input: {
    scope: RuntimeResourceScope;
    fence: FenceIdentity;
    binding: WorkspaceBinding;
    sandbox: ManagedSandboxLease;
    signal: AbortSignal;
  }): Promise<void>;
  /** Creates an immutable candidate; inactive until published. Idempotent per key. */
  checkpoint(input: {
    scope: RuntimeResourceScope;
    fence: FenceIdentity;
    binding: WorkspaceBinding;
    sandbox: ManagedSandboxLease;
    idempotencyKey: string;
    signal: AbortSignal;
  }): Promise<{ type: "created"; candidate: WorkspaceCandidateRef }>;
  /** Releases temporary bindings; never deletes published candidates. */
  release(input: { scope: RuntimeResourceScope; fence: FenceIdentity; binding: WorkspaceBinding; signal: AbortSignal }): Promise<void>;
  /** Garbage collection of an unpublished or superseded candidate. Idempotent. */
  discard(input: {
    scope: RuntimeResourceScope;
    candidate: WorkspaceCandidateRef;
    signal: AbortSignal;
  }): Promise<{ type: "discarded" } | { type: "not_found" }>;
}
