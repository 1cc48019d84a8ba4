/** The node-docker driver's exec processes as the contract's SandboxProcessPort (the in-sandbox harness lanes). */
import type { ManagedSandboxLease, SandboxProcessEnd, SandboxProcessPort, SandboxSpawnInput, SandboxSpawnResult } from "@openma/contract";
import type { NodeDockerSandbox } from "./driver.ts";

/** Harness processes are long-lived and chatty: keep only a small tail, the caller consumes output live. */
const TAIL_BYTES = 64 * 1024;

export function dockerProcesses(sandbox: NodeDockerSandbox): SandboxProcessPort {
  return {
    async spawn(lease: ManagedSandboxLease, input: SandboxSpawnInput): Promise<SandboxSpawnResult> {
      let tools: ReturnType<NodeDockerSandbox["toolSandbox"]>;
      try {
        tools = sandbox.toolSandbox(lease);
      } catch (err) {
        return { type: "error", message: err instanceof Error ? err.message : String(err) };
      }
      const child = await tools.spawn({
        command: input.command,
        cwd: input.cwd,
        env: input.env,
        signal: new AbortController().signal,
        onOutput: input.onOutput,
        maxOutputBytes: TAIL_BYTES,
      });
      const done: Promise<SandboxProcessEnd> = child.done.then((result) => {
        if (result.type === "exited") return { type: "exited", exitCode: result.exitCode, signal: result.signal };
        if (result.type === "error") return { type: "error", message: result.message };
        return { type: "killed" };
      });
      // A refusal settles at once: report it as a spawn error, not as a process that ran.
      const early = await Promise.race([done, Promise.resolve(null)]);
      if (early?.type === "error") return { type: "error", message: early.message };
      return {
        type: "started",
        process: { write: (c) => child.write(c), closeStdin: () => child.closeStdin(), kill: () => child.kill(), done },
      };
    },
  };
}
