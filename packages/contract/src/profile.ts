/**
 * What an application asks of its runtime, in semantic guarantees rather than
 * provider names. Deployment-time configuration only: none of this extends the
 * public Managed Agents Environment shape.
 */
import type { HarnessDriver } from "./driver.ts";

export type WorkspaceStrategy = "durable_mount" | "retained_runtime" | "checkpoint_restore" | "ephemeral";
export type OutputStrategy = "durable_mount" | "watch_and_upload" | "final_collect";

export type WorkspaceRequirement = "durable" | "continuable" | "ephemeral";
export type OutputRequirement = "durable" | "best_effort" | "disabled";
export type RuntimeCheckpointRequirement = "required" | "optional" | "disabled";

export interface ManagedRuntimeProfile {
  workspace: {
    requirement: WorkspaceRequirement;
    preferredStrategies?: WorkspaceStrategy[];
  };
  outputs: {
    requirement: OutputRequirement;
    preferredStrategies?: OutputStrategy[];
  };
  runtimeCheckpoint: RuntimeCheckpointRequirement;
  driver: HarnessDriver;
}

export const WORKSPACE_STRATEGIES: readonly WorkspaceStrategy[] = ["durable_mount", "retained_runtime", "checkpoint_restore", "ephemeral"];
export const OUTPUT_STRATEGIES: readonly OutputStrategy[] = ["durable_mount", "watch_and_upload", "final_collect"];
