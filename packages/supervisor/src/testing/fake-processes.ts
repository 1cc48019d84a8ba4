/**
 * A SandboxProcessPort whose children the test plays by hand: it writes the
 * child's stdout and stderr, ends it, and reads what the host wrote to its
 * stdin. Transport faults are explicit calls (a garbage line, an exit, a
 * vanished sandbox, a kill that does not take), so every test is
 * deterministic.
 */
import type {
  ManagedSandboxLease,
  SandboxProcess,
  SandboxProcessEnd,
  SandboxProcessPort,
  SandboxSpawnInput,
  SandboxSpawnResult,
} from "@openma/contract";

export class FakeChild implements SandboxProcess {
  readonly lease: ManagedSandboxLease;
  readonly input: SandboxSpawnInput;
  /** Every chunk the host wrote to stdin, as text. */
  readonly stdin: string[] = [];
  stdinClosed = false;
  kills = 0;
  /** When set, `kill()` is delivered but the process does not die (a wedged runtime). */
  ignoreKill = false;
  readonly done: Promise<SandboxProcessEnd>;
  #end: SandboxProcessEnd | null = null;
  #resolve!: (end: SandboxProcessEnd) => void;
  #waiters: { type: string; resolve: (message: Record<string, unknown>) => void }[] = [];

  constructor(lease: ManagedSandboxLease, input: SandboxSpawnInput) {
    this.lease = lease;
    this.input = input;
    this.done = new Promise((resolve) => {
      this.#resolve = resolve;
    });
  }

  get ended(): SandboxProcessEnd | null {
    return this.#end;
  }

  /** Host messages received so far, parsed. */
  get received(): Record<string, unknown>[] {
    return this.stdin
      .join("")
      .split("\n")
      .filter((line) => line !== "")
      .map((line) => JSON.parse(line) as Record<string, unknown>);
  }

  /** Resolves with the first host message of `type` (already received or still to come). */
  next(type: string): Promise<Record<string, unknown>> {
    const seen = this.received.find((m) => m.type === type);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve) => this.#waiters.push({ type, resolve }));
  }

  /** Writes one protocol message (an object) or raw text to stdout. */
  say(message: Record<string, unknown> | string): void {
    const text = typeof message === "string" ? message : `${JSON.stringify(message)}\n`;
    this.input.onOutput("stdout", new TextEncoder().encode(text));
  }

  sayBytes(bytes: Uint8Array): void {
    this.input.onOutput("stdout", bytes);
  }

  stderr(text: string): void {
    this.input.onOutput("stderr", new TextEncoder().encode(text));
  }

  exit(exitCode: number, signal: string | null = null): void {
    this.#finish({ type: "exited", exitCode, signal });
  }

  /** The sandbox went away under the process. */
  vanish(): void {
    this.#finish({ type: "killed" });
  }

  async write(chunk: Uint8Array | string): Promise<void> {
    if (this.stdinClosed || this.#end !== null) throw new Error("stdin is closed");
    this.stdin.push(typeof chunk === "string" ? chunk : new TextDecoder().decode(chunk));
    const received = this.received;
    this.#waiters = this.#waiters.filter((waiter) => {
      const message = received.find((m) => m.type === waiter.type);
      if (message) waiter.resolve(message);
      return !message;
    });
  }

  closeStdin(): void {
    this.stdinClosed = true;
  }

  async kill(): Promise<void> {
    this.kills++;
    if (!this.ignoreKill) this.#finish({ type: "killed" });
  }

  #finish(end: SandboxProcessEnd): void {
    if (this.#end !== null) return;
    this.#end = end;
    this.#resolve(end);
  }
}

export class FakeProcesses implements SandboxProcessPort {
  readonly children: FakeChild[] = [];
  /** The next spawn's refusal, if any. */
  refuseNext: string | null = null;
  /** Runs on every spawn, before it returns (a child that speaks before the host sent start). */
  onSpawn: ((child: FakeChild) => void) | null = null;

  get last(): FakeChild {
    const child = this.children.at(-1);
    if (!child) throw new Error("nothing was spawned");
    return child;
  }

  async spawn(lease: ManagedSandboxLease, input: SandboxSpawnInput): Promise<SandboxSpawnResult> {
    if (this.refuseNext !== null) {
      const message = this.refuseNext;
      this.refuseNext = null;
      return { type: "error", message };
    }
    const child = new FakeChild(lease, input);
    this.children.push(child);
    this.onSpawn?.(child);
    return { type: "started", process: child };
  }
}
