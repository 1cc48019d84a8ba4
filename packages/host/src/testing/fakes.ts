/**
 * In-memory fakes of every host port, each failing on demand through a
 * shared `Faults`. They keep just enough state for tests to assert on the
 * outside world: which runtimes are alive, which candidates exist, which
 * bindings were released or aborted.
 */
import {
  canonicalJson,
  type FenceIdentity,
  type HarnessIdentity,
  type ManagedSandboxLease,
  type ManagedSandboxPort,
  type OrphanReapInput,
  type OrphanReapResult,
  OUTPUTS_MOUNT_PATH,
  type OutputManifestRef,
  type OutputStrategy,
  type OutputStrategyOffer,
  type OutputViolation,
  type RuntimeCheckpointCreateResult,
  type RuntimeCheckpointKind,
  type RuntimeCheckpointPort,
  type RuntimeCheckpointRef,
  type RuntimeCheckpointRestoreResult,
  type RuntimeResourceScope,
  type SandboxAcquireResult,
  type SandboxCapabilities,
  type SandboxHeartbeatResult,
  type SandboxInspectResult,
  type SandboxSuspendResult,
  type SandboxTerminateResult,
  type SessionOutputBinding,
  type SessionOutputEntry,
  type SessionOutputPort,
  WORKSPACE_MOUNT_PATH,
  type WorkspaceBinding,
  type WorkspaceCandidateRef,
  type WorkspaceMaterializeResult,
  type WorkspacePersistencePort,
  type WorkspaceStrategy,
  type WorkspaceStrategyOffer,
} from "@openma/contract";
import { sha256Hex } from "@openma/storage/blobs";
import type { HarnessRunInput, HarnessRunner, HarnessRunResult } from "../types.ts";
import type { Faults } from "./faults.ts";

export type Files = Record<string, string>;

const digest = (value: unknown) => sha256Hex(canonicalJson(value));

export const FAKE_SANDBOX_CAPABILITIES: SandboxCapabilities = {
  provider: "fake",
  lifecycle: { suspendResume: "supported", hardTerminate: "supported", orphanReap: "host_managed" },
  facts: { has: ["workspace_file_io"], lacks: [] },
  credentialEgress: { enforcement: "unsupported" },
};

export type RuntimeState = "running" | "suspended" | "stopped";

export class FakeSandbox implements ManagedSandboxPort {
  readonly capabilities: SandboxCapabilities;
  readonly runtimes = new Map<string, RuntimeState>();
  readonly #faults: Faults;
  #next = 0;

  constructor(faults: Faults, capabilities: SandboxCapabilities = FAKE_SANDBOX_CAPABILITIES) {
    this.#faults = faults;
    this.capabilities = capabilities;
  }

  /** Starts a runtime (also how a restored runtime checkpoint comes back). */
  start(prefix = "rt"): ManagedSandboxLease {
    const lease = { provider: this.capabilities.provider, runtimeId: `${prefix}_${++this.#next}` };
    this.runtimes.set(lease.runtimeId, "running");
    return lease;
  }

  /** The provider lost the runtime: heartbeats say `lost`, reaping finds nothing. */
  vanish(runtimeId: string): void {
    this.runtimes.delete(runtimeId);
  }

  /** Runtimes still running or suspended: what a leak check looks at. */
  get alive(): string[] {
    return [...this.runtimes].filter(([, state]) => state !== "stopped").map(([id]) => id);
  }

  acquire(): Promise<SandboxAcquireResult> {
    return this.#faults.run("sandbox.acquire", () => ({ type: "acquired", lease: this.start() }));
  }

  heartbeat(input: { lease: ManagedSandboxLease }): Promise<SandboxHeartbeatResult> {
    return this.#faults.run("sandbox.heartbeat", () =>
      this.runtimes.get(input.lease.runtimeId) === "running" ? { type: "alive" } : { type: "lost", reason: "runtime is gone" },
    );
  }

  suspend(input: { lease: ManagedSandboxLease }): Promise<SandboxSuspendResult> {
    return this.#faults.run("sandbox.suspend", () => {
      this.runtimes.set(input.lease.runtimeId, "suspended");
      return { type: "suspended", lease: { ...input.lease, metadata: { suspended: true } } };
    });
  }

  terminate(input: { lease: ManagedSandboxLease }): Promise<SandboxTerminateResult> {
    return this.#faults.run("sandbox.terminate", () => {
      this.runtimes.set(input.lease.runtimeId, "stopped");
      return { type: "terminated" };
    });
  }

  reap(input: OrphanReapInput): Promise<OrphanReapResult> {
    return this.#faults.run("sandbox.reap", () => {
      const state = this.runtimes.get(input.lease.runtimeId);
      if (state === undefined || state === "stopped") return { type: "not_found" };
      this.runtimes.set(input.lease.runtimeId, "stopped");
      return { type: "reaped" };
    });
  }

  inspect(input: { lease: ManagedSandboxLease }): Promise<SandboxInspectResult> {
    return this.#faults.run("sandbox.inspect", () => ({ state: this.runtimes.get(input.lease.runtimeId) ?? "unknown" }));
  }
}

export const FAKE_WORKSPACE_OFFERS: readonly WorkspaceStrategyOffer[] = [
  { strategy: "checkpoint_restore", durability: "durable" },
  { strategy: "retained_runtime", durability: "best_effort" },
  { strategy: "ephemeral", durability: "none" },
];

/** Workspaces as file maps; candidates are immutable copies keyed by content. */
export class FakeWorkspace implements WorkspacePersistencePort {
  readonly capabilities: readonly WorkspaceStrategyOffer[];
  readonly candidates = new Map<string, Files>();
  /** Candidates whose stored bytes are "damaged": materializing them is rejected. */
  readonly corrupt = new Set<string>();
  readonly bindings = new Map<string, Files>();
  readonly #faults: Faults;
  #next = 0;

  constructor(faults: Faults, capabilities: readonly WorkspaceStrategyOffer[] = FAKE_WORKSPACE_OFFERS) {
    this.#faults = faults;
    this.capabilities = capabilities;
  }

  /** The live files of a binding (what the harness edits). */
  files(bindingId: string): Files {
    const files = this.bindings.get(bindingId);
    if (!files) throw new Error(`unknown or released workspace binding ${bindingId}`);
    return files;
  }

  materialize(input: { strategy: WorkspaceStrategy; candidate: WorkspaceCandidateRef | null }): Promise<WorkspaceMaterializeResult> {
    return this.#faults.run("workspace.materialize", (): WorkspaceMaterializeResult => {
      const { candidate } = input;
      const stored = candidate === null ? {} : this.candidates.get(candidate.id);
      if (candidate !== null && (stored === undefined || this.corrupt.has(candidate.id))) {
        return { type: "candidate_rejected", candidate, reason: "manifest does not hash to the candidate id" };
      }
      const binding: WorkspaceBinding = { bindingId: `wsb_${++this.#next}`, strategy: input.strategy, mountPath: WORKSPACE_MOUNT_PATH };
      this.bindings.set(binding.bindingId, { ...stored });
      return { type: "materialized", binding, restored: candidate };
    });
  }

  attach(): Promise<void> {
    return this.#faults.run("workspace.attach", () => undefined);
  }

  checkpoint(input: { binding: WorkspaceBinding }): Promise<{ type: "created"; candidate: WorkspaceCandidateRef }> {
    return this.#faults.run("workspace.checkpoint", () => {
      const files = { ...this.files(input.binding.bindingId) };
      const hash = digest(files);
      const candidate = { id: `ws_${hash.slice(0, 16)}`, contentHash: `sha256:${hash}` };
      this.candidates.set(candidate.id, files);
      return { type: "created" as const, candidate };
    });
  }

  release(input: { binding: WorkspaceBinding }): Promise<void> {
    return this.#faults.run("workspace.release", () => {
      this.bindings.delete(input.binding.bindingId);
    });
  }

  discard(input: { candidate: WorkspaceCandidateRef }): Promise<{ type: "discarded" } | { type: "not_found" }> {
    return this.#faults.run("workspace.discard", () =>
      this.candidates.delete(input.candidate.id) ? { type: "discarded" as const } : { type: "not_found" as const },
    );
  }
}

export const FAKE_OUTPUT_OFFERS: readonly OutputStrategyOffer[] = [{ strategy: "final_collect", durability: "durable" }];

export interface FakeOutputBinding {
  files: Files;
  /** `open` until released or aborted (with the abort reason). */
  end: "open" | "released" | "aborted:failed" | "aborted:lease_lost";
}

export class FakeOutputs implements SessionOutputPort {
  readonly capabilities: readonly OutputStrategyOffer[];
  readonly manifests = new Map<string, SessionOutputEntry[]>();
  readonly bindings = new Map<string, FakeOutputBinding>();
  /** Reported as refused by every collection (symlinks, size bombs, ...). */
  refused: OutputViolation[] = [];
  readonly #faults: Faults;
  #next = 0;

  constructor(faults: Faults, capabilities: readonly OutputStrategyOffer[] = FAKE_OUTPUT_OFFERS) {
    this.#faults = faults;
    this.capabilities = capabilities;
  }

  files(bindingId: string): Files {
    return this.#binding(bindingId).files;
  }

  #binding(bindingId: string): FakeOutputBinding {
    const binding = this.bindings.get(bindingId);
    if (!binding) throw new Error(`unknown output binding ${bindingId}`);
    return binding;
  }

  prepare(input: { strategy: OutputStrategy }): Promise<SessionOutputBinding> {
    return this.#faults.run("outputs.prepare", () => {
      const binding: SessionOutputBinding = { bindingId: `outb_${++this.#next}`, strategy: input.strategy, mountPath: OUTPUTS_MOUNT_PATH };
      this.bindings.set(binding.bindingId, { files: {}, end: "open" });
      return binding;
    });
  }

  attach(): Promise<void> {
    return this.#faults.run("outputs.attach", () => undefined);
  }

  collect(input: { binding: SessionOutputBinding }) {
    return this.#faults.run("outputs.collect", () => {
      const files = this.files(input.binding.bindingId);
      const entries: SessionOutputEntry[] = Object.keys(files)
        .sort()
        .map((logicalPath) => ({ logicalPath, contentHash: `sha256:${sha256Hex(files[logicalPath]!)}`, size: files[logicalPath]!.length }));
      return { type: "collected" as const, entries, rejected: [...this.refused] };
    });
  }

  finalize(input: { entries: readonly SessionOutputEntry[] }): Promise<OutputManifestRef> {
    return this.#faults.run("outputs.finalize", () => {
      const hash = digest(input.entries);
      const manifest = { id: `out_${hash.slice(0, 16)}`, contentHash: `sha256:${hash}`, entryCount: input.entries.length };
      this.manifests.set(manifest.id, [...input.entries]);
      return manifest;
    });
  }

  release(input: { binding: SessionOutputBinding }): Promise<void> {
    return this.#faults.run("outputs.release", () => {
      this.#binding(input.binding.bindingId).end = "released";
    });
  }

  abort(input: { binding: SessionOutputBinding; reason: "failed" | "lease_lost" }): Promise<void> {
    return this.#faults.run("outputs.abort", () => {
      this.#binding(input.binding.bindingId).end = `aborted:${input.reason}`;
    });
  }

  discard(input: { manifest: OutputManifestRef }): Promise<{ type: "discarded" } | { type: "not_found" }> {
    return this.#faults.run("outputs.discard", () =>
      this.manifests.delete(input.manifest.id) ? { type: "discarded" as const } : { type: "not_found" as const },
    );
  }
}

/** Process checkpoints that "restore" by starting a runtime in the fake sandbox. */
export class FakeRuntimeCheckpoint implements RuntimeCheckpointPort {
  readonly kinds: readonly RuntimeCheckpointKind[];
  readonly refs = new Map<string, RuntimeCheckpointRef>();
  readonly #faults: Faults;
  readonly #sandbox: FakeSandbox;
  #next = 0;

  constructor(faults: Faults, sandbox: FakeSandbox, kinds: readonly RuntimeCheckpointKind[] = ["process"]) {
    this.#faults = faults;
    this.#sandbox = sandbox;
    this.kinds = kinds;
  }

  create(input: {
    scope: RuntimeResourceScope;
    fence: FenceIdentity;
    sandbox: ManagedSandboxLease;
    kind: RuntimeCheckpointKind;
    workspace: WorkspaceCandidateRef | null;
    harness: HarnessIdentity;
  }): Promise<RuntimeCheckpointCreateResult> {
    return this.#faults.run("checkpoint.create", () => {
      const ref: RuntimeCheckpointRef = {
        provider: this.#sandbox.capabilities.provider,
        checkpointId: `ck_${++this.#next}`,
        kind: input.kind,
        sourceRuntimeId: input.sandbox.runtimeId,
        sessionId: input.scope.sessionId,
        generation: input.fence.generation,
        workspaceCandidateId: input.workspace?.id ?? null,
        harness: input.harness,
      };
      this.refs.set(ref.checkpointId, ref);
      return { type: "created" as const, ref };
    });
  }

  restore(input: { ref: RuntimeCheckpointRef }): Promise<RuntimeCheckpointRestoreResult> {
    return this.#faults.run("checkpoint.restore", () =>
      this.refs.has(input.ref.checkpointId)
        ? { type: "restored" as const, lease: this.#sandbox.start("rt_restored") }
        : { type: "failed" as const, error: "checkpoint no longer exists" },
    );
  }

  discard(input: { ref: RuntimeCheckpointRef }): Promise<{ type: "discarded" } | { type: "not_found" }> {
    return this.#faults.run("checkpoint.discard", () =>
      this.refs.delete(input.ref.checkpointId) ? { type: "discarded" as const } : { type: "not_found" as const },
    );
  }
}

export type HarnessScript = (input: HarnessRunInput) => Promise<HarnessRunResult>;

/** A harness runner whose placements follow scripts, in order; unscripted placements just complete. */
export class ScriptedHarness implements HarnessRunner {
  readonly runs: HarnessRunInput[] = [];
  readonly #faults: Faults;
  readonly #scripts: HarnessScript[] = [];

  constructor(faults: Faults) {
    this.#faults = faults;
  }

  script(...scripts: HarnessScript[]): this {
    this.#scripts.push(...scripts);
    return this;
  }

  run(input: HarnessRunInput): Promise<HarnessRunResult> {
    return this.#faults.run("harness.run", () => {
      this.runs.push(input);
      const script = this.#scripts.shift();
      return script ? script(input) : { type: "completed" as const };
    });
  }

  drain(): Promise<{ type: "drained" } | { type: "failed"; error: string }> {
    return this.#faults.run("harness.drain", () => ({ type: "drained" as const }));
  }
}
