/** The bubblewrap driver's duplex processes as the contract's SandboxProcessPort (the in-sandbox harness lanes). */
import type { ManagedSandboxLease, SandboxProcessPort, SandboxSpawnInput, SandboxSpawnResult } from "@openma/contract";
import type { BubblewrapSandbox } from "./driver.ts";

export function bubblewrapProcesses(sandbox: BubblewrapSandbox): SandboxProcessPort {
  return {
    async spawn(lease: ManagedSandboxLease, input: SandboxSpawnInput): Promise<SandboxSpawnResult> {
      const started = await sandbox.spawn(lease, { command: input.command, cwd: input.cwd, env: input.env });
      if (!started.ok) return { type: "error", message: started.message };
      const child = started.process;
      let killed = false;
      child.stdout.on("data", (chunk: Buffer) => input.onOutput("stdout", chunk));
      child.stderr.on("data", (chunk: Buffer) => input.onOutput("stderr", chunk));
      const done = child.done.then((end) => (killed && end.type === "exited" ? { type: "killed" as const } : end));
      return {
        type: "started",
        process: {
          write: (chunk) =>
            new Promise<void>((resolve, reject) => {
              if (child.stdin.destroyed || child.stdin.writableEnded) return reject(new Error("stdin is closed"));
              child.stdin.write(chunk, (err) => (err ? reject(err) : resolve()));
            }),
          closeStdin: () => child.stdin.end(),
          kill: async () => {
            killed = true;
            child.kill();
          },
          done,
        },
      };
    },
  };
}
