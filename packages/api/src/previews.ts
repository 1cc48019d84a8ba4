/**
 * `event_deltas` previews (§5.7): while the model streams, the loop
 * broadcasts `event_start` / `event_delta` frames for the `agent.message` and
 * `agent.thinking` events it is about to record, under the ids those events
 * will carry. Frames travel on the bus (`broadcast`), never in the log: a
 * stream that asked for them forwards them, a replay never sees them.
 *
 * Order: the loop broadcasts a block's frames before it appends the final
 * event, and Postgres delivers both channels on one listening connection in
 * commit order. A stream that nevertheless already sent the final event
 * (it read the log on another wake-up) drops the late frames.
 */
import type { ChangeBus, Unsubscribe } from "@openma/storage";
import { DELTA_TYPES } from "./schemas/events.ts";

export type DeltaType = (typeof DELTA_TYPES)[number];

export type PreviewFrame =
  | { type: "event_start"; event: { type: DeltaType; id: string } }
  | { type: "event_delta"; event_id: string; delta: { type: "content_delta"; content: { type: "text"; text: string }; index?: number } };

/** What travels on the bus: the frame, the event type it previews (deltas name only the id) and the thread whose event it is. */
interface Envelope {
  previews: DeltaType;
  frame: PreviewFrame;
  /** Null or absent: the primary thread (ADR 0024). */
  thread?: string | null;
}

/** Text per delta frame: even fully \u-escaped it stays under the bus's payload bound. */
export const MAX_DELTA_CHARS = 1000;

export const previewTopic = (sessionId: string) => `previews:${sessionId}`;

export function broadcastPreview(
  bus: ChangeBus,
  sessionId: string,
  previews: DeltaType,
  frame: PreviewFrame,
  thread: string | null = null,
): Promise<void> {
  const envelope: Envelope = thread ? { previews, frame, thread } : { previews, frame };
  return bus.broadcast(previewTopic(sessionId), JSON.stringify(envelope));
}

/** Splits delta text into frame-sized pieces, never inside a surrogate pair. */
export function deltaPieces(text: string): string[] {
  const pieces: string[] = [];
  let current = "";
  for (const ch of text) {
    if (current.length + ch.length > MAX_DELTA_CHARS) {
      pieces.push(current);
      current = "";
    }
    current += ch;
  }
  if (current) pieces.push(current);
  return pieces;
}

/** How many final event ids a stream remembers to drop late frames of (previews are short-lived). */
const FINALIZED_MEMORY = 256;

/**
 * The stream side: listens for the session's frames of the requested types
 * (on a thread's stream, only that thread's frames; `thread` undefined: the
 * session stream, every thread's). `finalized(id)` records that the final
 * event went out, so later frames of that id are dropped.
 */
export class PreviewFilter {
  readonly #wanted: ReadonlySet<DeltaType>;
  readonly #thread: string | null | undefined;
  readonly #finalized = new Set<string>();

  constructor(wanted: readonly DeltaType[], thread?: string | null) {
    this.#wanted = new Set(wanted);
    this.#thread = thread;
  }

  get enabled(): boolean {
    return this.#wanted.size > 0;
  }

  listen(bus: ChangeBus, sessionId: string, send: (frame: PreviewFrame) => void): Unsubscribe {
    if (!this.enabled) return () => {};
    return bus.listen(previewTopic(sessionId), (payload) => {
      const envelope = parse(payload);
      if (!envelope || !this.#wanted.has(envelope.previews)) return;
      if (this.#thread !== undefined && (envelope.thread ?? null) !== this.#thread) return;
      const id = envelope.frame.type === "event_start" ? envelope.frame.event.id : envelope.frame.event_id;
      if (this.#finalized.has(id)) return;
      send(envelope.frame);
    });
  }

  finalized(eventType: string, id: string): void {
    if (!this.enabled || !(DELTA_TYPES as readonly string[]).includes(eventType)) return;
    this.#finalized.add(id);
    if (this.#finalized.size > FINALIZED_MEMORY) {
      const oldest = this.#finalized.values().next().value;
      if (oldest !== undefined) this.#finalized.delete(oldest);
    }
  }
}

function parse(payload: string): Envelope | null {
  try {
    const value = JSON.parse(payload) as Envelope;
    return value && typeof value === "object" && value.frame && typeof value.previews === "string" ? value : null;
  } catch {
    return null;
  }
}
