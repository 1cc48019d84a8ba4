/**
 * SandboxProcessPort: a long-running process with duplex stdio inside a
 * sandbox lease. The in-sandbox harness lanes need it: `ama_worker` starts
 * the official EnvironmentWorker, `openma_supervised` speaks the supervisor
 * protocol over the child's stdin/stdout.
 *
 * Secrets never travel in `command` or `env` (both are visible to `ps` or
 * the provider's inspect API): a caller that must hand a credential to the
 * child writes it to stdin.
 */

import type { ManagedSandboxLease } from "./sandbox.ts";
import type { OutputStream } from "./tool-sandbox.ts";

export interface SandboxSpawnInput {
  /** argv; `command[0]` is looked up on the sandbox's PATH. */
  command: readonly string[];
  /** Absolute path inside the sandbox; `/workspace` when absent. */
  cwd?: string;
  /** Non-secret variables added to the sandbox's base environment. */
  env?: Readonly<Record<string, string>>;
  /** Output as it arrives (stdout carries the supervised protocol; stderr is a log). */
  onOutput: (stream: OutputStream, chunk: Uint8Array) => void;
}

export type SandboxProcessEnd =
  | { type: "exited"; exitCode: number; signal: string | null }
  /** Ended by `kill()` (or by the sandbox going away). */
  | { type: "killed" }
  | { type: "error"; message: string };

export interface SandboxProcess {
  /** Resolves once the chunk is handed to the transport; rejects when stdin is closed or broken. */
  write(chunk: Uint8Array | string): Promise<void>;
  /** The child reads end-of-file. */
  closeStdin(): void;
  /** SIGKILL to the process and everything it started; resolves once the kill is delivered. */
  kill(): Promise<void>;
  /** Settles (never rejects) once the process is gone and its output has been delivered. */
  readonly done: Promise<SandboxProcessEnd>;
}

export type SandboxSpawnResult = { type: "started"; process: SandboxProcess } | { type: "error"; message: string };

export interface SandboxProcessPort {
  spawn(lease: ManagedSandboxLease, input: SandboxSpawnInput): Promise<SandboxSpawnResult>;
}
