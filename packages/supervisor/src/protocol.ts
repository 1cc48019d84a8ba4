/**
 * openma-harness-supervisor-v1: the wire protocol between the Runtime Host
 * (outside the sandbox) and a supervisor process (inside it).
 *
 * Framing: newline-delimited JSON over the child's stdio, one object per
 * line, UTF-8, at most MAX_LINE_BYTES per line. Blank lines are ignored.
 * Anything else that is not a valid message (bad JSON, unknown type, a field
 * out of bounds, an overlong line) is a protocol error: the host hard-kills
 * the child and the run fails. stderr is a free-form log, never parsed.
 *
 *   child -> host (stdout)
 *     {"type":"ready","protocol":"openma-harness-supervisor-v1","harness":{"id":"pi","version":"1.0.0"}}
 *     {"type":"heartbeat"}
 *     {"type":"checkpoint_request","turnId":"turn-1"}     at most one in flight
 *     {"type":"completed"}                                 the run is done; the child waits for drain
 *     {"type":"failed","error":"..."}
 *     {"type":"drained"}                                   no writer is left; answer to drain
 *
 *   host -> child (stdin)
 *     {"type":"start","protocol":"openma-harness-supervisor-v1",
 *      "scope":{"environmentId":"env_1","sessionId":"sesn_1"},"generation":3,"attempt":1,
 *      "restored":{"candidateId":"...","contentHash":"sha256:..."} | null,
 *      "heartbeatIntervalMs":5000}
 *     {"type":"checkpoint_result","turnId":"turn-1","result":
 *        {"type":"committed","revision":4,"replayed":false}
 *      | {"type":"rejected","reason":"invalid_turn_id"|"not_running"|"lease_lost"}
 *      | {"type":"failed","error":"..."}}
 *     {"type":"drain"}                                     finish the current turn, start no other, answer drained
 *     {"type":"stop"}                                      exit now (end of stdin means the same)
 *
 * What is deliberately NOT on the wire: the resource fence token, API keys or
 * any other credential. The host keeps publication authority (a checkpoint is
 * a request the host may refuse) and hard-kill responsibility (every bound
 * ends in a kill). Unknown object members are ignored, so a v1 peer may add
 * fields; a new message type or changed meaning needs a new protocol name.
 */
import { HARNESS_SUPERVISOR_PROTOCOL } from "@openma/contract";
import { z } from "zod";

export const PROTOCOL = HARNESS_SUPERVISOR_PROTOCOL;

/** Generous for these messages, small enough that a runaway child cannot balloon the host's memory. */
export const MAX_LINE_BYTES = 64 * 1024;
/** Turn ids the host accepts are shorter (128); the wire bound only keeps garbage out. */
export const MAX_TURN_ID_LENGTH = 256;
export const MAX_ERROR_LENGTH = 4096;

const identifier = z.string().min(1).max(256);
const count = z.number().int().nonnegative();

// ---- child -> host ---------------------------------------------------------

export const readyMessage = z.object({
  type: z.literal("ready"),
  protocol: z.string().max(256),
  harness: z.object({ id: identifier, version: identifier }),
});
export const heartbeatMessage = z.object({ type: z.literal("heartbeat") });
export const checkpointRequestMessage = z.object({
  type: z.literal("checkpoint_request"),
  turnId: z.string().min(1).max(MAX_TURN_ID_LENGTH),
});
export const completedMessage = z.object({ type: z.literal("completed") });
export const failedMessage = z.object({ type: z.literal("failed"), error: z.string().max(MAX_ERROR_LENGTH) });
export const drainedMessage = z.object({ type: z.literal("drained") });

export const childMessage = z.discriminatedUnion("type", [
  readyMessage,
  heartbeatMessage,
  checkpointRequestMessage,
  completedMessage,
  failedMessage,
  drainedMessage,
]);
export type ChildMessage = z.infer<typeof childMessage>;

// ---- host -> child ---------------------------------------------------------

export const startMessage = z.object({
  type: z.literal("start"),
  protocol: z.literal(PROTOCOL),
  scope: z.object({ environmentId: identifier, sessionId: identifier }),
  generation: count,
  /** 1 for the first placement of a generation; higher after a cold restart (replay Session events). */
  attempt: count,
  /** The workspace candidate `/workspace` was restored from; `null` for an empty workspace. */
  restored: z.object({ candidateId: identifier, contentHash: z.string().max(256) }).nullable(),
  /** How often the host expects a heartbeat (a fraction of its timeout). */
  heartbeatIntervalMs: count,
});
export type StartMessage = z.infer<typeof startMessage>;

export const checkpointOutcome = z.discriminatedUnion("type", [
  z.object({ type: z.literal("committed"), revision: count.nullable(), replayed: z.boolean() }),
  z.object({ type: z.literal("rejected"), reason: z.enum(["invalid_turn_id", "not_running", "lease_lost"]) }),
  z.object({ type: z.literal("failed"), error: z.string().max(MAX_ERROR_LENGTH) }),
]);
export type CheckpointOutcome = z.infer<typeof checkpointOutcome>;

export const checkpointResultMessage = z.object({
  type: z.literal("checkpoint_result"),
  turnId: z.string().min(1).max(MAX_TURN_ID_LENGTH),
  result: checkpointOutcome,
});
export const drainMessage = z.object({ type: z.literal("drain") });
export const stopMessage = z.object({ type: z.literal("stop") });

export const hostMessage = z.discriminatedUnion("type", [startMessage, checkpointResultMessage, drainMessage, stopMessage]);
export type HostMessage = z.infer<typeof hostMessage>;

// ---- framing ---------------------------------------------------------------

/** One line of the wire, newline included. Validated on the way out too: the host never sends what it would refuse. */
export function encodeHostMessage(message: HostMessage): string {
  return `${JSON.stringify(hostMessage.parse(message))}\n`;
}

export type ParsedLine = { ok: true; message: ChildMessage } | { ok: false; error: string };

/** Parses one child line (without its newline). Never throws. */
export function parseChildLine(line: string): ParsedLine {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return { ok: false, error: `not JSON: ${preview(line)}` };
  }
  const parsed = childMessage.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue && issue.path.length > 0 ? `${issue.path.join(".")}: ` : "";
    return { ok: false, error: `invalid message (${where}${issue?.message ?? "unknown"}): ${preview(line)}` };
  }
  return { ok: true, message: parsed.data };
}

/** A short, single-line excerpt for error messages and traces. */
export function preview(text: string, max = 120): string {
  const flat = JSON.stringify(text.length > max ? `${text.slice(0, max)}…` : text);
  return flat;
}

export type LineEvent = { type: "line"; line: string } | { type: "overflow" } | { type: "invalid_utf8" };

/**
 * Splits a byte stream into lines, bounded: a line longer than `maxBytes`
 * (newline excluded) is reported once as `overflow` and the decoder stops,
 * as it does after invalid UTF-8. A trailing partial line is never emitted
 * (the writer died mid-line; there is nothing to act on).
 */
export class LineDecoder {
  readonly #maxBytes: number;
  #parts: Uint8Array[] = [];
  #size = 0;
  #broken = false;
  readonly #utf8 = new TextDecoder("utf-8", { fatal: true });

  constructor(maxBytes = MAX_LINE_BYTES) {
    this.#maxBytes = maxBytes;
  }

  push(chunk: Uint8Array): LineEvent[] {
    const events: LineEvent[] = [];
    let start = 0;
    while (!this.#broken && start <= chunk.length) {
      const newline = chunk.indexOf(0x0a, start);
      const end = newline < 0 ? chunk.length : newline;
      const piece = chunk.subarray(start, end);
      if (this.#size + piece.length > this.#maxBytes) {
        this.#broken = true;
        events.push({ type: "overflow" });
        break;
      }
      if (piece.length > 0) {
        this.#parts.push(piece.slice());
        this.#size += piece.length;
      }
      if (newline < 0) break;
      const bytes = Buffer.concat(this.#parts, this.#size);
      this.#parts = [];
      this.#size = 0;
      try {
        events.push({ type: "line", line: this.#utf8.decode(bytes) });
      } catch {
        this.#broken = true;
        events.push({ type: "invalid_utf8" });
      }
      start = newline + 1;
    }
    return events;
  }
}
