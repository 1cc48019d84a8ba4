/**
 * One `TaskExecStart` as the command router keeps it: the process in the
 * box, its stdout and stderr kept whole so a reader can resume from any
 * byte offset (the SDK reopens a cut stdio stream at the offset it has
 * reached), stdin accepted in order by offset (a retried write of bytes
 * already taken is acknowledged, not repeated), and the exit status.
 */
import type { OutputStream } from "@openma/contract";

export interface ExecExit {
  code?: number;
  signal?: number;
}

export class ExecRecord {
  readonly output: Record<OutputStream, Buffer[]> = { stdout: [], stderr: [] };
  readonly length: Record<OutputStream, number> = { stdout: 0, stderr: 0 };
  exit: ExecExit | null = null;
  stdinOffset = 0;
  stdinClosed = false;
  /** Set by a `cut` fault: the first stdio stream of this exec drops after this many bytes. */
  cutAfter: number | null = null;
  readonly kill = new AbortController();
  #writer: { write(chunk: Uint8Array): Promise<void>; closeStdin(): void } | null = null;
  #stdin: Promise<void> = Promise.resolve();
  readonly #waiters = new Set<() => void>();

  constructor(
    readonly execId: string,
    /** The argv as started (for a test's own account of what ran). */
    readonly command: readonly string[],
  ) {}

  attach(writer: { write(chunk: Uint8Array): Promise<void>; closeStdin(): void }): void {
    this.#writer = writer;
  }

  append(stream: OutputStream, chunk: Uint8Array): void {
    this.output[stream].push(Buffer.from(chunk));
    this.length[stream] += chunk.length;
    this.#notify();
  }

  finish(exit: ExecExit): void {
    if (this.exit !== null) return;
    this.exit = exit;
    this.#notify();
  }

  /** Bytes of `stream` from `offset` (at most `max`), without copying more than needed. */
  read(stream: OutputStream, offset: number, max: number): Buffer {
    const all = Buffer.concat(this.output[stream]);
    this.output[stream] = [all];
    return all.subarray(offset, Math.min(all.length, offset + max));
  }

  /** Resolves at the next output or the exit (or when `signal` aborts). */
  changed(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        this.#waiters.delete(done);
        signal.removeEventListener("abort", done);
        resolve();
      };
      this.#waiters.add(done);
      signal.addEventListener("abort", done, { once: true });
    });
  }

  #notify(): void {
    for (const waiter of [...this.#waiters]) waiter();
  }

  /**
   * Stdin at `offset`: bytes before what was already taken are skipped (a retry), a gap is refused.
   * Writes are applied in order, one at a time.
   */
  writeStdin(offset: number, data: Uint8Array, eof: boolean): Promise<void> {
    const next = this.#stdin.then(async () => {
      if (offset > this.stdinOffset) throw new Error(`stdin offset ${offset} is past the ${this.stdinOffset} bytes received`);
      const fresh = data.subarray(this.stdinOffset - offset);
      if (fresh.length > 0) {
        if (this.stdinClosed) throw new Error("stdin is closed");
        await this.#writer?.write(fresh);
        this.stdinOffset += fresh.length;
      }
      if (eof && !this.stdinClosed) {
        this.stdinClosed = true;
        this.#writer?.closeStdin();
      }
    });
    this.#stdin = next.catch(() => {});
    return next;
  }
}
