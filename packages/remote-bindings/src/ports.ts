/**
 * WorkspacePersistencePort and SessionOutputPort for runtimes that cannot
 * bind-mount a host directory. They are the filesystem adapters of
 * `@openma/host` (chunked, verified checkpoints; final_collect manifests in
 * the blob store) plus two moves: `attach` pushes the materialized tree
 * into the runtime's `/workspace` (and the seeded deliverables into
 * `/mnt/session/outputs`), `checkpoint` and `collect` pull the runtime's
 * tree back into the host binding first. Durability is the same as the
 * local drivers': what survives is what a fenced publication made active.
 */
import type {
  ManagedSandboxLease,
  OutputCollectResult,
  OutputManifestRef,
  OutputStrategyOffer,
  SessionOutputBinding,
  SessionOutputPort,
  ToolSandboxPort,
  WorkspaceBinding,
  WorkspaceCandidateRef,
  WorkspaceMaterializeResult,
  WorkspacePersistencePort,
  WorkspaceStrategyOffer,
} from "@openma/contract";
import { FsCheckpointWorkspace, type FsOutputsOptions, FsSessionOutputs, type FsWorkspaceOptions } from "@openma/host";
import { DEFAULT_EXTRACT_LIMITS, type ExtractLimits } from "./tar.ts";
import { pullTree, pushTree } from "./transfer.ts";

/** The tool port of a leased runtime (the driver's `toolSandbox`). */
export type ToolsForLease = (lease: ManagedSandboxLease) => ToolSandboxPort;

type WorkspaceInput<K extends keyof WorkspacePersistencePort> = WorkspacePersistencePort[K] extends (input: infer I) => unknown ? I : never;
type OutputInput<K extends keyof SessionOutputPort> = SessionOutputPort[K] extends (input: infer I) => unknown ? I : never;

export class RemoteCheckpointWorkspace implements WorkspacePersistencePort {
  readonly capabilities: readonly WorkspaceStrategyOffer[];
  readonly #local: FsCheckpointWorkspace;
  readonly #tools: ToolsForLease;
  readonly #limits: ExtractLimits;

  constructor(options: FsWorkspaceOptions & { tools: ToolsForLease; limits?: Partial<ExtractLimits> }) {
    this.#local = new FsCheckpointWorkspace(options);
    this.capabilities = this.#local.capabilities;
    this.#tools = options.tools;
    this.#limits = { ...DEFAULT_EXTRACT_LIMITS, ...options.limits };
  }

  materialize(input: WorkspaceInput<"materialize">): Promise<WorkspaceMaterializeResult> {
    return this.#local.materialize(input);
  }

  /** The restored tree goes into the runtime before the harness starts. */
  async attach(input: WorkspaceInput<"attach">): Promise<void> {
    await pushTree(this.#tools(input.sandbox), this.#local.hostPath(input.binding), input.binding.mountPath, input.signal);
  }

  /** The runtime's tree comes back first; the candidate is made from exactly what was pulled. */
  async checkpoint(input: WorkspaceInput<"checkpoint">): Promise<{ type: "created"; candidate: WorkspaceCandidateRef }> {
    await pullTree(this.#tools(input.sandbox), input.binding.mountPath, this.#local.hostPath(input.binding), input.signal, this.#limits);
    return this.#local.checkpoint(input);
  }

  release(input: WorkspaceInput<"release">): Promise<void> {
    return this.#local.release(input);
  }

  discard(input: WorkspaceInput<"discard">): Promise<{ type: "discarded" } | { type: "not_found" }> {
    return this.#local.discard(input);
  }

  hostPath(binding: WorkspaceBinding): string {
    return this.#local.hostPath(binding);
  }
}

export class RemoteSessionOutputs implements SessionOutputPort {
  /** Only `final_collect`: nothing watches a remote directory while the harness runs. */
  readonly capabilities: readonly OutputStrategyOffer[] = [{ strategy: "final_collect", durability: "durable" }];
  readonly #local: FsSessionOutputs;
  readonly #tools: ToolsForLease;
  readonly #limits: ExtractLimits;

  constructor(options: FsOutputsOptions & { tools: ToolsForLease; limits?: Partial<ExtractLimits> }) {
    this.#local = new FsSessionOutputs(options);
    this.#tools = options.tools;
    this.#limits = { ...DEFAULT_EXTRACT_LIMITS, ...options.limits };
  }

  prepare(input: OutputInput<"prepare">): Promise<SessionOutputBinding> {
    if (input.strategy !== "final_collect") throw new Error(`output strategy ${input.strategy} is not offered for a remote runtime`);
    return this.#local.prepare(input);
  }

  /** Earlier deliverables (seeded into the binding) go into the runtime, so the next manifest keeps them. */
  async attach(input: OutputInput<"attach">): Promise<void> {
    await pushTree(this.#tools(input.sandbox), this.#local.hostPath(input.binding), input.binding.mountPath, input.signal);
  }

  /** Pulls the runtime's outputs first; without a runtime (it was lost) the binding is collected as it stands. */
  async collect(input: OutputInput<"collect">): Promise<OutputCollectResult> {
    if (input.sandbox !== null) {
      await pullTree(this.#tools(input.sandbox), input.binding.mountPath, this.#local.hostPath(input.binding), input.signal, this.#limits);
    }
    return this.#local.collect(input);
  }

  finalize(input: OutputInput<"finalize">): Promise<OutputManifestRef> {
    return this.#local.finalize(input);
  }

  release(input: OutputInput<"release">): Promise<void> {
    return this.#local.release(input);
  }

  abort(input: OutputInput<"abort">): Promise<void> {
    return this.#local.abort(input);
  }

  discard(input: OutputInput<"discard">): Promise<{ type: "discarded" } | { type: "not_found" }> {
    return this.#local.discard(input);
  }

  hostPath(binding: SessionOutputBinding): string {
    return this.#local.hostPath(binding);
  }
}
