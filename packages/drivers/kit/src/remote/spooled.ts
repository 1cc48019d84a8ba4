/**
 * A command on a provider whose exec takes no stdin while it runs (Vercel,
 * the Cloudflare bridge): what the kit writes is kept until it closes
 * stdin, then the provider-specific `run` uploads it and starts the command
 * with it as stdin. A kill before that ends it without it ever running.
 * Enough for every exec, helper and the `ama_worker` launch (one line, then
 * end-of-file); not for an interactive process (`streamingStdin: false`).
 */
import type { RemoteCommand, RemoteEnd } from "./api.ts";

const messageOf = (err: unknown): string => (err instanceof Error ? err.message || err.name : String(err));

export abstract class SpooledCommand implements RemoteCommand {
  readonly done: Promise<RemoteEnd>;
  #chunks: Buffer[] = [];
  #size = 0;
  #closed = false;
  #killed = false;
  #settle!: (end: RemoteEnd) => void;

  constructor(private readonly maxBytes: number) {
    this.done = new Promise((resolve) => {
      this.#settle = resolve;
    });
  }

  /** Whether `kill` was called (a `run` checks it between its steps). */
  protected get killed(): boolean {
    return this.#killed;
  }

  /** Uploads `input` (empty: none) and runs the command to its end. */
  protected abstract run(input: Buffer): Promise<RemoteEnd>;

  /** Ends a command `run` has started (the provider's kill, or dropping its stream). */
  protected abstract stop(): Promise<void>;

  async write(chunk: Uint8Array): Promise<void> {
    if (this.#closed) throw new Error("stdin is closed");
    if (this.#size + chunk.length > this.maxBytes) throw new Error(`stdin is spooled and limited to ${this.maxBytes} bytes`);
    this.#chunks.push(Buffer.from(chunk));
    this.#size += chunk.length;
  }

  async closeStdin(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const input = Buffer.concat(this.#chunks);
    this.#chunks = [];
    void this.run(input).then(this.#settle, (err: unknown) => this.#settle({ type: "lost", message: messageOf(err) }));
  }

  async kill(): Promise<void> {
    this.#killed = true;
    if (!this.#closed) {
      // Never started: nothing runs, and nothing will.
      this.#closed = true;
      this.#chunks = [];
      this.#settle({ type: "exited", exitCode: 137 });
      return;
    }
    await this.stop();
  }
}
