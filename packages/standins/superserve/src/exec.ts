/**
 * One command on the data plane, whichever surface started it (`/exec`,
 * `/exec/stream` or the `/exec/connect` WebSocket): the platform runs the
 * SDK's command string through a shell in the sandbox, with the request's
 * `working_dir`, `env` and `timeout_s`. The exit code of a process ended
 * by a signal is 128 + the signal, as a shell reports it.
 */
import type { OutputStream } from "@openma/contract";
import { z } from "zod";
import type { SandboxRecord } from "./sandboxes.ts";

export const ExecStart = z.object({
  command: z.string().min(1),
  working_dir: z.string().startsWith("/").optional(),
  env: z.record(z.string(), z.string()).optional(),
  timeout_s: z.number().int().positive().optional(),
});
export type ExecStart = z.infer<typeof ExecStart>;

export interface RunningCommand {
  write(chunk: Uint8Array): void;
  closeStdin(): void;
  kill(): void;
  /** The exit code, and an error text when the command could not run. */
  readonly done: Promise<{ exitCode: number; error?: string }>;
}

export function runCommand(
  record: SandboxRecord,
  start: ExecStart,
  onOutput: (stream: OutputStream, chunk: Uint8Array) => void,
): RunningCommand {
  const stop = new AbortController();
  record.running++;
  const started = record.box.tools.spawn({
    command: ["/bin/sh", "-c", start.command],
    cwd: start.working_dir ?? "/",
    env: { ...record.envVars, ...start.env },
    ...(start.timeout_s ? { timeoutMs: start.timeout_s * 1000 } : {}),
    signal: stop.signal,
    onOutput,
  });
  const done = started
    .then((proc) => proc.done)
    .then((result) => {
      if (result.type === "exited") return { exitCode: result.exitCode };
      if (result.type === "error") return { exitCode: 127, error: result.message };
      // Killed (a signal message, a timeout, a dropped connection): SIGKILL.
      return { exitCode: 137 };
    })
    .catch((err: unknown) => ({ exitCode: 127, error: err instanceof Error ? err.message : String(err) }))
    .finally(() => {
      record.running--;
    });
  return {
    write: (chunk) => void started.then((proc) => proc.write(chunk)).catch(() => {}),
    closeStdin: () => void started.then((proc) => proc.closeStdin()).catch(() => {}),
    kill: () => stop.abort(),
    done,
  };
}
