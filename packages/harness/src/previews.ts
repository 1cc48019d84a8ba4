/**
 * Broadcasts the `event_deltas` previews (§5.7) of one model attempt while
 * it streams: an `event_start` per text block (previewing its
 * `agent.message`) and per thinking block (its `agent.thinking`,
 * start-only), then the text as `event_delta` frames. Each previewed block's
 * event id is chosen here, at its start, and the final event is appended
 * under that id (`idFor`), so a client can reconcile the preview.
 *
 * Best effort and never blocking the model: frames queue up and go out one
 * at a time; deltas that pile up behind a slow broadcast are merged. A
 * broadcast failure drops the frame (the final event carries everything).
 */
import { broadcastPreview, type DeltaType, deltaPieces, MAX_DELTA_CHARS, type PreviewFrame } from "@openma/api";
import type { ChangeBus } from "@openma/storage";
import type { ModelStreamObserver } from "./model.ts";

interface Queued {
  previews: DeltaType;
  frame: PreviewFrame;
}

export class PreviewPublisher implements ModelStreamObserver {
  readonly #ids = new Map<number, string>();
  readonly #queue: Queued[] = [];
  #draining: Promise<void> | null = null;

  constructor(
    private readonly bus: ChangeBus,
    private readonly sessionId: string,
    private readonly newId: () => string,
    /** The thread whose model streams (null: the primary), so a thread's stream shows its own previews only. */
    private readonly thread: string | null = null,
  ) {}

  /** The id announced for the event of content block `index`, if it was previewed. */
  idFor(index: number): string | undefined {
    return this.#ids.get(index);
  }

  blockStart(index: number, type: string): void {
    const previews: DeltaType | null =
      type === "text" ? "agent.message" : type === "thinking" || type === "redacted_thinking" ? "agent.thinking" : null;
    if (!previews) return;
    const id = this.newId();
    this.#ids.set(index, id);
    this.#enqueue({ previews, frame: { type: "event_start", event: { type: previews, id } } });
  }

  textDelta(index: number, text: string): void {
    const id = this.#ids.get(index);
    if (!id) return;
    for (const piece of deltaPieces(text)) {
      const last = this.#queue.at(-1)?.frame;
      if (last?.type === "event_delta" && last.event_id === id && last.delta.content.text.length + piece.length <= MAX_DELTA_CHARS) {
        last.delta.content.text += piece;
        continue;
      }
      this.#enqueue({
        previews: "agent.message",
        frame: { type: "event_delta", event_id: id, delta: { type: "content_delta", content: { type: "text", text: piece } } },
      });
    }
  }

  /** Resolves once every queued frame went out (before the final events are appended). */
  async flush(): Promise<void> {
    while (this.#draining) await this.#draining;
  }

  #enqueue(item: Queued): void {
    this.#queue.push(item);
    this.#draining ??= this.#drain();
  }

  async #drain(): Promise<void> {
    for (let item = this.#queue.shift(); item; item = this.#queue.shift()) {
      await broadcastPreview(this.bus, this.sessionId, item.previews, item.frame, this.thread).catch(() => {});
    }
    this.#draining = null;
  }
}
