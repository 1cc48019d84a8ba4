/**
 * What a remote driver gives the kit for one runtime: its vendor SDK's
 * command start and file read/write, and nothing else. The kit builds the
 * ToolSandboxPort (exec with timeouts, aborts, capped capture; stat and
 * listings) and the SandboxProcessPort on top, so E2B, Daytona and Sprites
 * behave the same way wherever their APIs differ (a stdin that cannot be
 * closed, a kill that reaches one process and not its tree).
 */
import type { OutputStream } from "@openma/contract";

export interface RemoteStartInput {
  /** argv, already wrapped by the kit; `argv[0]` is an absolute path (`/bin/sh`). */
  argv: readonly string[];
  /** Output as the provider delivers it. */
  onOutput(stream: OutputStream, chunk: Uint8Array): void;
  /** Aborts the start call only (a running command is ended through `kill`). */
  signal: AbortSignal;
}

/** How a command's stream ended: an exit code, or the provider lost it (a cut stream, a sandbox that went away). */
export type RemoteEnd = { type: "exited"; exitCode: number } | { type: "lost"; message: string };

export interface RemoteCommand {
  /** Hands bytes to the provider's stdin; rejects when it refuses them. */
  write(chunk: Uint8Array): Promise<void>;
  /** End of input; only called on a provider whose `stdinEof` is true. */
  closeStdin(): Promise<void>;
  /** The provider's own kill of the process it started (the kit kills the whole tree separately). */
  kill(): Promise<void>;
  /** Settles once, never rejects. */
  readonly done: Promise<RemoteEnd>;
}

export interface RemoteSandboxApi {
  /** Whether the provider can close a running command's stdin; without it the kit frames stdin in-band. */
  readonly stdinEof: boolean;
  /** Rejects when the command could not be started (the error names why). */
  start(input: RemoteStartInput): Promise<RemoteCommand>;
  /** The whole file, or null when there is none; rejects on a provider failure. */
  readFile(path: string, signal: AbortSignal): Promise<Uint8Array | null>;
  /** Creates missing parent directories; rejects on a provider failure. */
  writeFile(path: string, content: Uint8Array, signal: AbortSignal): Promise<void>;
}

/** POSIX single-quoting, for providers whose exec takes one command string (E2B's `bash -c`, Daytona's sessions). */
export function shellQuote(argv: readonly string[]): string {
  return argv.map((arg) => (/^[A-Za-z0-9_@%+=:,./-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", "'\\''")}'`)).join(" ");
}
