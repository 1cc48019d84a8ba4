/**
 * Aggregates what each port of a composition declares into the one
 * descriptor the planner and the conformance table read. A composition
 * without a RuntimeCheckpointPort advertises no checkpoint kinds, whatever
 * the provider could do natively: only a wired port counts.
 */
import type { ManagedRuntimeCapabilities } from "./capabilities.ts";
import type { RuntimeCheckpointPort } from "./checkpoint.ts";
import type { HarnessDriverType } from "./driver.ts";
import type { SessionOutputPort } from "./outputs.ts";
import type { ManagedSandboxPort } from "./sandbox.ts";
import type { WorkspacePersistencePort } from "./workspace.ts";

export interface ManagedRuntimeComposition {
  sandbox: Pick<ManagedSandboxPort, "capabilities">;
  workspace: Pick<WorkspacePersistencePort, "capabilities">;
  /** Absent when the composition has no output store: it then offers no output strategy. */
  outputs?: Pick<SessionOutputPort, "capabilities">;
  runtimeCheckpoint?: Pick<RuntimeCheckpointPort, "kinds">;
  /** Lanes the composition has a harness driver for. */
  lanes: readonly HarnessDriverType[];
}

export function composeCapabilities(composition: ManagedRuntimeComposition): ManagedRuntimeCapabilities {
  const sandbox = composition.sandbox.capabilities;
  return {
    provider: sandbox.provider,
    lanes: composition.lanes,
    sandbox: sandbox.lifecycle,
    workspace: composition.workspace.capabilities,
    outputs: composition.outputs?.capabilities ?? [],
    runtimeCheckpoints: composition.runtimeCheckpoint?.kinds ?? [],
    credentialEgress: sandbox.credentialEgress,
    sandboxPortFacts: sandbox.facts,
  };
}
