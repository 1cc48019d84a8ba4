/**
 * One supervisor process seen as a message channel: stdout decoded into
 * protocol messages (bounded lines, zod-validated), stderr kept as a short
 * tail for error messages, writes encoded and validated, and the process end.
 *
 * The channel never decides anything; it turns bytes into events for the
 * runner's state machine. After the first protocol error it stops decoding:
 * a peer that sent garbage once cannot be trusted to be in sync.
 */
import type { OutputStream, SandboxProcess, SandboxProcessEnd } from "@openma/contract";
import { type ChildMessage, encodeHostMessage, type HostMessage, LineDecoder, MAX_LINE_BYTES, parseChildLine } from "./protocol.ts";

export type ChannelEvent =
  | { type: "message"; message: ChildMessage }
  | { type: "protocol_error"; error: string }
  | { type: "ended"; end: SandboxProcessEnd };

/** What the runner tells its observer; stderr lines and protocol traffic, never secrets (none ever reach the channel). */
export type SupervisorLogEntry =
  | { type: "stderr"; line: string }
  | { type: "received"; message: ChildMessage }
  | { type: "sent"; message: HostMessage }
  | { type: "protocol_error"; error: string }
  | { type: "ended"; end: SandboxProcessEnd };

const STDERR_TAIL_CHARS = 2048;
const STDERR_LINE_CHARS = 4096;

export class SupervisorChannel {
  readonly #decoder = new LineDecoder(MAX_LINE_BYTES);
  readonly #log: (entry: SupervisorLogEntry) => void;
  #listener: ((event: ChannelEvent) => void) | null = null;
  /** Events that arrived before anyone listened (a child may speak before the host has sent start). */
  #backlog: ChannelEvent[] = [];
  #process: SandboxProcess | null = null;
  #stderrTail = "";
  #stderrLine = "";
  #poisoned = false;

  constructor(log: (entry: SupervisorLogEntry) => void) {
    this.#log = log;
  }

  /** Pass as the spawn input's `onOutput`. */
  readonly onOutput = (stream: OutputStream, chunk: Uint8Array): void => {
    if (stream === "stderr") {
      this.#stderr(chunk);
      return;
    }
    for (const event of this.#poisoned ? [] : this.#decoder.push(chunk)) {
      if (event.type !== "line") {
        this.#protocolError(event.type === "overflow" ? `a line longer than ${MAX_LINE_BYTES} bytes` : "a line that is not UTF-8");
        return;
      }
      if (event.line.trim() === "") continue;
      const parsed = parseChildLine(event.line);
      if (!parsed.ok) {
        this.#protocolError(parsed.error);
        return;
      }
      this.#log({ type: "received", message: parsed.message });
      this.#emit({ type: "message", message: parsed.message });
    }
  };

  /** Binds the spawned process; its end is reported once all its output was delivered (the port guarantees the order). */
  attach(process: SandboxProcess): void {
    this.#process = process;
    void process.done.then((end) => {
      this.#flushStderr();
      this.#log({ type: "ended", end });
      this.#emit({ type: "ended", end });
    });
  }

  /** Delivers the backlog first, in order, then every later event. */
  listen(listener: (event: ChannelEvent) => void): void {
    this.#listener = listener;
    const backlog = this.#backlog;
    this.#backlog = [];
    for (const event of backlog) listener(event);
  }

  /** Rejects when stdin is closed or broken (the process is going away; its end event follows). */
  async send(message: HostMessage): Promise<void> {
    const line = encodeHostMessage(message);
    this.#log({ type: "sent", message });
    await this.#required().write(line);
  }

  closeStdin(): void {
    this.#required().closeStdin();
  }

  kill(): Promise<void> {
    return this.#required().kill();
  }

  get done(): Promise<SandboxProcessEnd> {
    return this.#required().done;
  }

  /** The last bytes the child wrote to stderr, for error messages. */
  get stderrTail(): string {
    return this.#stderrTail.trim();
  }

  #required(): SandboxProcess {
    if (this.#process === null) throw new Error("supervisor channel used before the process was attached");
    return this.#process;
  }

  #protocolError(error: string): void {
    this.#poisoned = true;
    this.#log({ type: "protocol_error", error });
    this.#emit({ type: "protocol_error", error });
  }

  #emit(event: ChannelEvent): void {
    if (this.#listener === null) this.#backlog.push(event);
    else this.#listener(event);
  }

  #stderr(chunk: Uint8Array): void {
    const text = Buffer.from(chunk).toString("utf8");
    this.#stderrTail = (this.#stderrTail + text).slice(-STDERR_TAIL_CHARS);
    const lines = (this.#stderrLine + text).split("\n");
    this.#stderrLine = (lines.pop() ?? "").slice(-STDERR_LINE_CHARS);
    for (const line of lines) this.#log({ type: "stderr", line: line.slice(0, STDERR_LINE_CHARS) });
  }

  #flushStderr(): void {
    if (this.#stderrLine !== "") this.#log({ type: "stderr", line: this.#stderrLine });
    this.#stderrLine = "";
  }
}
