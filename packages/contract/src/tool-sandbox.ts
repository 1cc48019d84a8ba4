/**
 * ToolSandboxPort: what the agent loop running outside the sandbox ("harness
 * outside sandbox" placement) needs from isolated compute to run the toolset
 * tools: processes with streamed output, and file reads, writes and listings.
 *
 * Paths are absolute paths in the sandbox's own namespace; `workdir` is the
 * workspace root tools resolve relative paths against. Every call takes an
 * AbortSignal and reports expected failures (missing file, timeout, a refused
 * path) as values, so a tool turns them into an `is_error` result instead of
 * a crash. Implementations must never hand the host's environment (model
 * keys, database URLs) to the processes they start.
 */

import type { SandboxSpawnInput, SandboxSpawnResult } from "./process.ts";

export type OutputStream = "stdout" | "stderr";

export interface ExecInput {
  /** argv; `command[0]` is looked up on the sandbox's PATH. */
  command: readonly string[];
  /** Absolute; defaults to `workdir`. */
  cwd?: string;
  /** Added to the sandbox's base environment. */
  env?: Readonly<Record<string, string>>;
  /** Written to stdin, which is then closed (stdin is empty when absent). */
  stdin?: Uint8Array | string;
  /** The process (and everything it started) is killed when this elapses. */
  timeoutMs: number;
  signal: AbortSignal;
  /** Live output, as it arrives. */
  onOutput?: (stream: OutputStream, chunk: Uint8Array) => void;
  /** Per-stream capture bound: only the last `maxOutputBytes` are kept (default 1 MiB). */
  maxOutputBytes?: number;
}

export interface CapturedOutput {
  stdout: Uint8Array;
  stderr: Uint8Array;
  /** True when earlier output was dropped to respect `maxOutputBytes`. */
  truncated: boolean;
}

export type ExecResult =
  | ({ type: "exited"; exitCode: number; signal: string | null } & CapturedOutput)
  | ({ type: "timeout" } & CapturedOutput)
  | ({ type: "aborted" } & CapturedOutput)
  /** The process could not be started (missing binary, bad cwd). */
  | { type: "error"; message: string };

export type EntryKind = "file" | "directory" | "symlink" | "other";

export type StatResult =
  | {
      type: "found";
      kind: EntryKind;
      size: number;
      mtimeMs: number;
      /** Fully canonical path (every symlink resolved, including the leaf). */
      realPath: string;
    }
  | { type: "not_found" }
  | { type: "error"; message: string };

export type ReadFileResult =
  | { type: "ok"; content: Uint8Array; size: number }
  | { type: "too_large"; size: number }
  | { type: "not_found" }
  | { type: "not_a_file"; kind: EntryKind }
  | { type: "error"; message: string };

export type WriteFileResult = { type: "ok"; bytes: number } | { type: "error"; message: string };

export interface ListEntry {
  /** Absolute path. */
  path: string;
  kind: EntryKind;
  size: number;
  mtimeMs: number;
}

export type ListResult =
  | { type: "ok"; entries: ListEntry[]; truncated: boolean }
  | { type: "not_found" }
  | { type: "error"; message: string };

export interface ToolSandboxPort {
  /** The workspace root (absolute), the default cwd and the root of path confinement. */
  readonly workdir: string;
  exec(input: ExecInput): Promise<ExecResult>;
  /** Does not follow a symlink leaf for `kind`, but `realPath` is fully resolved. */
  stat(input: { path: string; signal: AbortSignal }): Promise<StatResult>;
  /** Reads a regular file; `too_large` when it exceeds `maxBytes`. */
  readFile(input: { path: string; maxBytes: number; signal: AbortSignal }): Promise<ReadFileResult>;
  /** Atomic replace; parent directories are created. `mode` applies to a new file (default 0o600). */
  writeFile(input: { path: string; content: Uint8Array; mode?: number; signal: AbortSignal }): Promise<WriteFileResult>;
  /**
   * Entries under `path` (recursively when asked), never following symlinks,
   * skipping directories named in `skipDirNames`, at most `maxEntries`.
   */
  list(input: {
    path: string;
    recursive: boolean;
    maxEntries: number;
    skipDirNames?: readonly string[];
    signal: AbortSignal;
  }): Promise<ListResult>;
  /**
   * A long-lived process with duplex stdio, in the same sandbox and with the
   * same environment as `exec` (`cwd` defaults to `workdir`). The `bash` tool
   * keeps one shell per sandbox on it, so the working directory, exported
   * variables and background jobs survive between calls. Optional: without
   * it every `bash` call runs in a fresh shell. The process must die with
   * the sandbox; `kill` ends it and everything it started.
   */
  spawnProcess?(input: SandboxSpawnInput): Promise<SandboxSpawnResult>;
}

/** What the loop knows about the session when it asks for a sandbox. */
export interface SandboxRequest {
  sessionId: string;
  environmentId: string;
  /** The environment body (BetaEnvironment), or null when the environment is gone. */
  environment: unknown;
  signal: AbortSignal;
}

export type SandboxResolution =
  | { type: "ready"; port: ToolSandboxPort }
  /**
   * `sessionError`: the refusal is also a `session.error` (its `error` body), e.g. the environment's packages
   * failed to install; without it the reason is only the tool's error text.
   */
  | { type: "unavailable"; reason: string; sessionError?: Record<string, unknown> };

/**
 * Hands the loop the sandbox of a session, acquiring one on first use. A
 * refusal is a value whose `reason` becomes the tool's error text, so a
 * server without a sandbox driver fails closed with a clear message.
 */
export interface SandboxResolver {
  resolve(request: SandboxRequest): Promise<SandboxResolution>;
}
