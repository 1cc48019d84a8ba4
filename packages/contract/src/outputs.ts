/**
 * SessionOutputPort: prepares `/mnt/session/outputs`, collects deliverables
 * and writes an immutable manifest. Only files deliberately written there are
 * outputs; the manifest is visible only through a fenced publication.
 */
import type { OutputStrategyOffer } from "./capabilities.ts";
import type { FenceIdentity, OutputManifestRef } from "./fence.ts";
import type { FlatMetadata } from "./json.ts";
import type { OutputStrategy } from "./profile.ts";
import type { ManagedSandboxLease } from "./sandbox.ts";
import type { RuntimeResourceScope } from "./scope.ts";

export const OUTPUTS_MOUNT_PATH = "/mnt/session/outputs";

export interface SessionOutputBinding {
  bindingId: string;
  strategy: OutputStrategy;
  mountPath: typeof OUTPUTS_MOUNT_PATH;
  metadata?: FlatMetadata;
}

export interface SessionOutputEntry {
  /** Relative, `/`-separated, no `.` or `..` segments. */
  logicalPath: string;
  contentHash: string;
  size: number;
  mediaType?: string;
}

export type OutputRejectionReason =
  | "symlink"
  | "path_traversal"
  | "absolute_path"
  | "not_regular_file"
  | "file_too_large"
  | "too_many_files"
  | "total_too_large"
  | "changed_while_reading"
  /** A name that cannot round-trip through a manifest (not UTF-8, too long, too deep). */
  | "invalid_path"
  /** The file could not be read (permissions, I/O error). */
  | "unreadable";

export interface OutputViolation {
  path: string;
  reason: OutputRejectionReason;
}

/** Entries that passed every check; `rejected` explains each file that did not. */
export interface OutputCollectResult {
  type: "collected";
  entries: SessionOutputEntry[];
  rejected: OutputViolation[];
}

export interface SessionOutputPort {
  readonly capabilities: readonly OutputStrategyOffer[];
  prepare(input: {
    scope: RuntimeResourceScope;
    fence: FenceIdentity;
    strategy: OutputStrategy;
    idempotencyKey: string;
    /**
     * The manifest active when this placement starts (null: none yet). A port whose bindings start
     * empty seeds the binding with it, so deliverables of earlier placements stay deliverables
     * instead of vanishing from the next manifest. Absent is the same as null.
     */
    previous?: OutputManifestRef | null;
    signal: AbortSignal;
  }): Promise<SessionOutputBinding>;
  attach(input: {
    scope: RuntimeResourceScope;
    fence: FenceIdentity;
    binding: SessionOutputBinding;
    sandbox: ManagedSandboxLease;
    signal: AbortSignal;
  }): Promise<void>;
  collect(input: {
    scope: RuntimeResourceScope;
    fence: FenceIdentity;
    binding: SessionOutputBinding;
    sandbox: ManagedSandboxLease | null;
    signal: AbortSignal;
  }): Promise<OutputCollectResult>;
  /** Writes the immutable manifest; inactive until published. Idempotent per key. */
  finalize(input: {
    scope: RuntimeResourceScope;
    fence: FenceIdentity;
    binding: SessionOutputBinding;
    entries: readonly SessionOutputEntry[];
    idempotencyKey: string;
    signal: AbortSignal;
  }): Promise<OutputManifestRef>;
  /** After a successful publication. */
  release(input: { scope: RuntimeResourceScope; fence: FenceIdentity; binding: SessionOutputBinding; signal: AbortSignal }): Promise<void>;
  /** Instead of `release` when nothing was published; the partial candidate stays inactive. */
  abort(input: {
    scope: RuntimeResourceScope;
    fence: FenceIdentity;
    binding: SessionOutputBinding;
    reason: "failed" | "lease_lost";
    signal: AbortSignal;
  }): Promise<void>;
  discard(input: {
    scope: RuntimeResourceScope;
    manifest: OutputManifestRef;
    signal: AbortSignal;
  }): Promise<{ type: "discarded" } | { type: "not_found" }>;
}
