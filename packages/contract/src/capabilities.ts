/**
 * What a provider composition declares it can do. The same descriptor feeds
 * plan admission and the provider conformance table, so a claim in the docs is
 * a claim the planner relies on.
 */
import type { HarnessDriverType } from "./driver.ts";
import type { OutputStrategy, WorkspaceStrategy } from "./profile.ts";

/**
 * How well something survives the loss of the compute that wrote it:
 * `durable` survives provider expiry and host loss, `best_effort` survives
 * only while the provider keeps its own state, `none` ends with the sandbox.
 */
export type Durability = "durable" | "best_effort" | "none";

export interface WorkspaceStrategyOffer {
  strategy: WorkspaceStrategy;
  /** Declared by the provider: a host-local snapshot is `best_effort` even under `checkpoint_restore`. */
  durability: Durability;
}

export interface OutputStrategyOffer {
  strategy: OutputStrategy;
  durability: Exclude<Durability, "none">;
}

/** Process checkpoints capture memory; filesystem checkpoints capture the runtime's disk image. */
export type RuntimeCheckpointKind = "process" | "filesystem";

export interface SandboxLifecycleCapabilities {
  suspendResume: "supported" | "unsupported";
  hardTerminate: "supported" | "best_effort";
  orphanReap: "host_managed" | "provider_managed" | "unsupported";
}

export interface CredentialEgressCapabilities {
  /** Only `enforced` means the sandbox cannot reach the network except through the egress proxy. */
  enforcement: "enforced" | "advisory" | "unsupported";
  credentialMode?: "live" | "snapshot";
  interceptedProtocols?: Array<"http" | "https" | "tcp">;
}

/** Raw adapter facts for the conformance table (`duplex_process`, `process_memory_checkpoint`, ...). */
export interface SandboxPortFacts {
  has: readonly string[];
  lacks: readonly string[];
}

export interface ManagedRuntimeCapabilities {
  provider: string;
  lanes: readonly HarnessDriverType[];
  sandbox: SandboxLifecycleCapabilities;
  workspace: readonly WorkspaceStrategyOffer[];
  outputs: readonly OutputStrategyOffer[];
  /** Empty unless the composition wires a RuntimeCheckpointPort: a provider snapshot alone does not count. */
  runtimeCheckpoints: readonly RuntimeCheckpointKind[];
  credentialEgress: CredentialEgressCapabilities;
  sandboxPortFacts: SandboxPortFacts;
}

/**
 * The strongest workspace guarantee a composition can honour, as the
 * conformance table reports it. `retained_runtime` never counts as durable
 * (the provider may expire it) and `ephemeral` never counts at all.
 */
export function workspaceDurabilityOf(capabilities: Pick<ManagedRuntimeCapabilities, "workspace" | "sandbox">): Durability {
  let best: Durability = "none";
  for (const offer of capabilities.workspace) {
    const effective = effectiveWorkspaceDurability(offer, capabilities.sandbox);
    if (effective === "durable") return "durable";
    if (effective === "best_effort") best = "best_effort";
  }
  return best;
}

/**
 * Caps a declared durability by what the strategy can physically give:
 * retained runtimes depend on the provider keeping the box and need
 * suspend/resume to keep it at all; ephemeral workspaces keep nothing.
 */
export function effectiveWorkspaceDurability(offer: WorkspaceStrategyOffer, sandbox: SandboxLifecycleCapabilities): Durability {
  if (offer.strategy === "ephemeral") return "none";
  if (offer.strategy === "retained_runtime") {
    if (sandbox.suspendResume !== "supported" || offer.durability === "none") return "none";
    return "best_effort";
  }
  return offer.durability;
}
