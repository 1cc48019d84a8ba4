/**
 * The processes of one sandbox as Blaxel's sandbox-api keeps them: each
 * runs as `sh -c <command>` (as the daemon does), is found by its pid or
 * its name, keeps its stdout, stderr and interleaved logs for
 * `GET /process/{id}` and `/logs`, and hands each output chunk to every
 * attached stream (the NDJSON exec stream, the `stdout:`/`stderr:` log
 * stream). stdin is a pipe the client writes with raw POSTs and closes with
 * a DELETE, for a process started with `stdin: true`.
 */
import type { OutputStream } from "@openma/contract";
import type { Box } from "@openma/standin-kit";

/** What a log of one stream may hold (the daemon keeps a tail too). */
const MAX_LOG_CHARS = 4 * 1024 * 1024;

export type ProcessStatus = "running" | "completed" | "failed" | "killed" | "stopped";

export type OutputListener = (stream: OutputStream, chunk: Uint8Array) => void;

export interface SandboxProcessRecord {
  pid: string;
  name: string;
  command: string;
  workingDir: string;
  stdin: boolean;
  status: ProcessStatus;
  exitCode: number;
  startedAt: Date;
  completedAt: Date | null;
  stdout: string;
  stderr: string;
  logs: string;
  readonly listeners: Set<OutputListener>;
  /** Settles when the process has ended and its record is final. */
  readonly ended: Promise<void>;
  write(chunk: Uint8Array): Promise<void>;
  closeStdin(): void;
  kill(as: "killed" | "stopped"): Promise<void>;
}

const httpDate = (d: Date) => d.toUTCString();

export function processJson(p: SandboxProcessRecord): Record<string, unknown> {
  return {
    pid: p.pid,
    name: p.name,
    command: p.command,
    status: p.status,
    startedAt: httpDate(p.startedAt),
    completedAt: p.completedAt ? httpDate(p.completedAt) : "",
    exitCode: p.exitCode,
    workingDir: p.workingDir,
    logs: p.logs,
    stdout: p.stdout,
    stderr: p.stderr,
    stdin: p.stdin,
    restartOnFailure: false,
    maxRestarts: 0,
    restartCount: 0,
    keepAlive: false,
  };
}

const tail = (text: string) => (text.length > MAX_LOG_CHARS ? text.slice(text.length - MAX_LOG_CHARS) : text);

export class ProcessTable {
  readonly #byPid = new Map<string, SandboxProcessRecord>();
  #nextPid = 1000;

  find(identifier: string): SandboxProcessRecord | undefined {
    const byPid = this.#byPid.get(identifier);
    if (byPid) return byPid;
    // A name may be reused once its process ended: the newest one wins, as on the daemon.
    return [...this.#byPid.values()].reverse().find((p) => p.name === identifier);
  }

  all(): SandboxProcessRecord[] {
    return [...this.#byPid.values()];
  }

  /** Starts `sh -c command` in `box`; throws when the engine refuses (the handler answers 422). */
  async start(
    box: Box,
    input: {
      command: string;
      name?: string;
      workingDir?: string;
      env?: Record<string, string>;
      stdin: boolean;
      /** Attached before the process starts, so it sees every byte (the NDJSON exec stream). */
      listener?: OutputListener;
    },
  ): Promise<SandboxProcessRecord> {
    const pid = String(this.#nextPid++);
    const listeners = new Set<OutputListener>(input.listener ? [input.listener] : []);
    const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
    let record: SandboxProcessRecord | null = null;
    const pendingOutput: Array<[OutputStream, Uint8Array]> = [];
    const onOutput = (stream: OutputStream, chunk: Uint8Array) => {
      if (record === null) {
        pendingOutput.push([stream, chunk]);
        return;
      }
      const text = decoders[stream].decode(chunk, { stream: true });
      record[stream] = tail(record[stream] + text);
      record.logs = tail(record.logs + text);
      for (const listener of listeners) listener(stream, chunk);
    };
    const stop = new AbortController();
    const proc = await box.tools.spawn({
      command: ["sh", "-c", input.command],
      cwd: input.workingDir || "/",
      env: input.env ?? {},
      signal: stop.signal,
      onOutput,
    });
    if (!input.stdin) proc.closeStdin();
    let endedAs: "killed" | "stopped" | null = null;
    const ended = proc.done.then((result) => {
      const r = record as SandboxProcessRecord;
      r.completedAt = new Date();
      if (endedAs !== null) {
        r.status = endedAs;
        r.exitCode = 137;
      } else if (result.type === "exited") {
        r.status = result.exitCode === 0 ? "completed" : "failed";
        r.exitCode = result.exitCode;
      } else {
        r.status = "failed";
        r.exitCode = result.type === "error" ? 127 : 137;
        if (result.type === "error") {
          r.stderr += `${result.message}\n`;
          r.logs += `${result.message}\n`;
        }
      }
    });
    record = {
      pid,
      name: input.name || `proc-${pid}`,
      command: input.command,
      workingDir: input.workingDir || "/",
      stdin: input.stdin,
      status: "running",
      exitCode: 0,
      startedAt: new Date(),
      completedAt: null,
      stdout: "",
      stderr: "",
      logs: "",
      listeners,
      ended,
      write: (chunk) => proc.write(chunk),
      closeStdin: () => proc.closeStdin(),
      kill: async (as) => {
        endedAs ??= as;
        await proc.kill();
      },
    };
    this.#byPid.set(pid, record);
    for (const [stream, chunk] of pendingOutput.splice(0)) onOutput(stream, chunk);
    return record;
  }

  /** Ends every process (an archive or a delete takes them down). */
  async killAll(): Promise<void> {
    await Promise.all(this.all().map((p) => (p.status === "running" ? p.kill("killed").catch(() => {}) : undefined)));
  }

  clear(): void {
    this.#byPid.clear();
  }
}
