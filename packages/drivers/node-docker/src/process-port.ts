/** The node-docker driver's exec processes as the contract's SandboxProcessPort (the in-sandbox harness lanes). */
import type { ManagedSandboxLease, SandboxProcessPort, SandboxSpawnInput, SandboxSpawnResult } from "@openma/contract";
import type { NodeDockerSandbox } from "./driver.ts";

export function dockerProcesses(sandbox: NodeDockerSandbox): SandboxProcessPort {
  return {
    async spawn(lease: ManagedSandboxLease, input: SandboxSpawnInput): Promise<SandboxSpawnResult> {
      try {
        return await sandbox.toolSandbox(lease).spawnProcess(input);
      } catch (err) {
        return { type: "error", message: err instanceof Error ? err.message : String(err) };
      }
    },
  };
}
