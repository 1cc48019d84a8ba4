/**
 * ManagedSandboxPort: isolated compute and nothing else. It acquires,
 * observes, suspends, terminates and reaps runtimes; it never owns canonical
 * files or Session state, and it never sees the fence token (it receives a
 * FenceIdentity), so a compromised sandbox adapter cannot publish.
 */
import type { CredentialEgressCapabilities, SandboxLifecycleCapabilities, SandboxPortFacts } from "./capabilities.ts";
import type { FenceIdentity } from "./fence.ts";
import { canonicalJson, type FlatMetadata, isFlatMetadata, isPlainObject } from "./json.ts";
import type { OrphanReaper } from "./orphan.ts";
import type { SessionOutputBinding } from "./outputs.ts";
import type { ManagedRuntimePlan } from "./plan.ts";
import { isRuntimeIdentifier, type RuntimeResourceScope } from "./scope.ts";
import type { WorkspaceBinding } from "./workspace.ts";

/**
 * Serializable compute identity: enough for an orphan reaper in another
 * process to reconnect after a host crash. Never carries credentials.
 */
export interface ManagedSandboxLease {
  provider: string;
  runtimeId: string;
  metadata?: FlatMetadata;
}

/** Serialized lease size bound, so a lease always fits a SQL text column and a log line. */
export const MAX_SANDBOX_LEASE_JSON_LENGTH = 8192;

export function sandboxLeaseIssues(value: unknown): string[] {
  if (!isPlainObject(value)) return ["lease: must be an object"];
  const issues: string[] = [];
  if (!isRuntimeIdentifier(value.provider)) issues.push("provider: must be a non-empty identifier");
  if (!isRuntimeIdentifier(value.runtimeId)) issues.push("runtimeId: must be a non-empty identifier");
  if (value.metadata !== undefined && !isFlatMetadata(value.metadata))
    issues.push("metadata: must be flat string/number/boolean/null values");
  if (issues.length === 0 && canonicalJson(value).length > MAX_SANDBOX_LEASE_JSON_LENGTH) {
    issues.push(`lease: serialized form exceeds ${MAX_SANDBOX_LEASE_JSON_LENGTH} characters`);
  }
  return issues;
}

export interface SandboxCapabilities {
  provider: string;
  lifecycle: SandboxLifecycleCapabilities;
  facts: SandboxPortFacts;
  credentialEgress: CredentialEgressCapabilities;
}

export type SandboxStopReason = "completed" | "failed" | "lease_lost" | "cancelled";

export type SandboxAcquireResult =
  | { type: "acquired"; lease: ManagedSandboxLease }
  | { type: "unavailable"; reason: string; retryable: boolean };

export type SandboxHeartbeatResult = { type: "alive" } | { type: "lost"; reason: string };
export type SandboxSuspendResult = { type: "suspended"; lease: ManagedSandboxLease } | { type: "failed"; error: string };
export type SandboxTerminateResult = { type: "terminated" } | { type: "failed"; error: string };
export type SandboxInspectResult = { state: "running" | "suspended" | "stopped" | "unknown" };

/** Every ManagedSandboxPort is an orphan reaper: `reap` works from a serialized lease alone. */
export interface ManagedSandboxPort extends OrphanReaper {
  readonly capabilities: SandboxCapabilities;
  acquire(input: {
    scope: RuntimeResourceScope;
    fence: FenceIdentity;
    plan: ManagedRuntimePlan;
    workspace: WorkspaceBinding;
    outputs: SessionOutputBinding | null;
    idempotencyKey: string;
    signal: AbortSignal;
  }): Promise<SandboxAcquireResult>;
  heartbeat(input: {
    scope: RuntimeResourceScope;
    fence: FenceIdentity;
    lease: ManagedSandboxLease;
    signal: AbortSignal;
  }): Promise<SandboxHeartbeatResult>;
  /** Keeps the runtime for `retained_runtime`; the returned lease replaces the old one. */
  suspend(input: {
    scope: RuntimeResourceScope;
    fence: FenceIdentity;
    lease: ManagedSandboxLease;
    signal: AbortSignal;
  }): Promise<SandboxSuspendResult>;
  /** Hard stop. A `failed` result obliges the host to persist an orphan record. */
  terminate(input: {
    scope: RuntimeResourceScope;
    fence: FenceIdentity;
    lease: ManagedSandboxLease;
    reason: SandboxStopReason;
    signal: AbortSignal;
  }): Promise<SandboxTerminateResult>;
  inspect(input: { lease: ManagedSandboxLease; signal: AbortSignal }): Promise<SandboxInspectResult>;
}
