/**
 * The ACP runtime over the sandbox contract, for a runner placed outside the
 * sandbox (the "direct sandbox" placement): the state port is the sandbox's
 * exec + writeFile, the ACP child is a sandbox duplex process. Any driver
 * implementing the contract (bubblewrap, Docker, cloud) fits; no provider
 * SDK enters this package.
 */
import type { ManagedSandboxLease, SandboxProcessPort, ToolSandboxPort } from "@openma/contract";
import type { AcpChildProcess, AcpSpawn } from "./agent-client.ts";
import type { AcpStatePort } from "./native-state.ts";

const STATE_EXEC_TIMEOUT_MS = 120_000;
const decoder = new TextDecoder();

export function toolSandboxStatePort(tools: ToolSandboxPort): AcpStatePort {
  return {
    async writeFile(path, content) {
      const r = await tools.writeFile({
        path,
        content: new TextEncoder().encode(content),
        mode: 0o600,
        signal: new AbortController().signal,
      });
      if (r.type !== "ok") throw new Error(`writeFile ${path}: ${r.message}`);
    },
    async exec(argv) {
      const r = await tools.exec({ command: argv, timeoutMs: STATE_EXEC_TIMEOUT_MS, signal: new AbortController().signal });
      if (r.type === "error") return { exitCode: 127, stdout: "", stderr: r.message };
      const stdout = decoder.decode(r.stdout);
      const stderr = decoder.decode(r.stderr);
      return { exitCode: r.type === "exited" ? r.exitCode : 124, stdout, stderr };
    },
  };
}

/** ACP children as sandbox processes; `env` is added to the sandbox's base environment. */
export function sandboxSpawn(processes: SandboxProcessPort, lease: ManagedSandboxLease): AcpSpawn {
  return async (input) => {
    let controller: ReadableStreamDefaultController<Uint8Array> | null = null;
    const stdout = new ReadableStream<Uint8Array>({
      start(c) {
        controller = c;
      },
    });
    const started = await processes.spawn(lease, {
      command: [input.command, ...input.args],
      cwd: input.cwd,
      env: input.env,
      onOutput: (stream, chunk) => {
        if (stream !== "stdout") return;
        try {
          controller?.enqueue(chunk);
        } catch {
          // The reader is gone: output after close is dropped.
        }
      },
    });
    if (started.type !== "started") throw new Error(`the ACP child did not start: ${started.message}`);
    const proc = started.process;
    const exited = proc.done.then((end) => {
      // End of stdout: the connection sees the agent go.
      try {
        controller?.close();
      } catch {
        // Already closed by the reader (the connection was closed first).
      }
      controller = null;
      return end.type === "exited" ? { exitCode: end.exitCode, signal: end.signal } : { exitCode: null, signal: end.type };
    });
    const child: AcpChildProcess = {
      stdin: new WritableStream<Uint8Array>({
        write: (chunk) => proc.write(chunk),
        close: () => proc.closeStdin(),
        abort: () => proc.closeStdin(),
      }),
      stdout,
      kill: () => proc.kill(),
      exited,
    };
    return child;
  };
}
