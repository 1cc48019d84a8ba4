/**
 * The one Server-Sent Events writer of the codebase. What the official SDK
 * needs (reference §5.2, §3.4): status 200, headers on the wire at once (the
 * session runner awaits them before anything else, so a comment is written
 * immediately), an `event:` line on every message (messages without one are
 * dropped by the SDK), keep-alives as comments (never events: a periodic event
 * would keep an idle worker from letting go), and `event: error` for failures.
 */
import type { Context } from "hono";
import type { ApiDeps } from "./context.ts";

export interface SseMessage {
  event: string;
  id?: string | undefined;
  /** The payload, already serialised (stored events are sent byte-for-byte). */
  data: string;
}

export interface SseChannel {
  /** Writes one message; resolves false once the client is gone (nothing more will be written). */
  send(message: SseMessage): Promise<boolean>;
  /** Writes one message already framed by `encodeSseMessage` (shared by every stream that sends it). */
  sendEncoded(frame: Uint8Array): Promise<boolean>;
  /** Aborted when the client disconnects or the stream is closed. */
  readonly signal: AbortSignal;
}

/** Default of `SseOptions.sendBufferBytes`. */
export const DEFAULT_SSE_SEND_BUFFER_BYTES = 1024 * 1024;

export interface SseOptions {
  keepAliveMs: number;
  /**
   * Most bytes written but not yet taken by the socket. A reader that falls
   * further behind (stopped reading, or much slower than the log grows) has its
   * stream closed: it reconnects with `Last-Event-ID` and resumes where it left
   * off, while the server never holds more than this for it. Default 1 MiB.
   */
  sendBufferBytes?: number | undefined;
  /** Told when the stream is closed for exceeding `sendBufferBytes`. */
  onOverflow?: () => void;
  /** Runs on every keep-alive tick (e.g. to re-check a source whose wake-up may have been lost). */
  onKeepAlive?: () => void;
  /** Called with an unexpected failure of the producer (after an `event: error` was sent). */
  onError?: (err: Error) => void;
}

/** One SSE message. Every line of `data` gets its own `data:` field (JSON has none, so JSON is one line). */
export function formatSseMessage(message: SseMessage): string {
  let out = `event: ${oneLine(message.event)}\n`;
  if (message.id !== undefined) out += `id: ${oneLine(message.id)}\n`;
  for (const line of message.data.split(/\r\n|\r|\n/)) out += `data: ${line}\n`;
  return `${out}\n`;
}

const encoder = new TextEncoder();

/** `formatSseMessage` as the bytes written on the wire. */
export function encodeSseMessage(message: SseMessage): Uint8Array {
  return encoder.encode(formatSseMessage(message));
}

export function formatSseComment(text: string): string {
  return `: ${oneLine(text)}\n\n`;
}

// Field values must not break the framing: a stray newline would start a new field.
function oneLine(value: string): string {
  return value.replace(/[\r\n]+/g, " ");
}

/**
 * Answers the request with an event stream fed by `produce`. The stream ends
 * when `produce` returns (or throws: an `event: error` is sent first) or when
 * the client disconnects; either way `produce`'s signal is aborted and the
 * keep-alive timer stops.
 */
export function sseResponse(c: Context, opts: SseOptions, produce: (channel: SseChannel) => Promise<void>): Response {
  const lifetime = new AbortController();
  // Readable high-water mark 0: a write settles once the HTTP layer has pulled it, which it does as the socket drains.
  const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
  const sendBufferBytes = opts.sendBufferBytes ?? DEFAULT_SSE_SEND_BUFFER_BYTES;
  /** Bytes written whose write has not settled: what this connection holds in memory. */
  let queued = 0;
  const writer = writable.getWriter();
  const requestSignal = c.req.raw.signal;
  const subscribers = (c.get("deps") as ApiDeps | undefined)?.metrics?.sseSubscribers;
  subscribers?.inc();

  const close = () => {
    if (lifetime.signal.aborted) return;
    lifetime.abort();
    subscribers?.dec();
    clearInterval(keepAlive);
    requestSignal.removeEventListener("abort", close);
    writer.close().catch(() => {});
  };
  // Never waits for the reader: the producer (and its database reads) is not held up by a stalled
  // client; instead a client more than `sendBufferBytes` behind is let go.
  const write = async (text: string | Uint8Array): Promise<boolean> => {
    if (lifetime.signal.aborted) return false;
    const bytes = typeof text === "string" ? encoder.encode(text) : text;
    if (queued > 0 && queued + bytes.length > sendBufferBytes) {
      opts.onOverflow?.();
      close();
      return false;
    }
    queued += bytes.length;
    writer.write(bytes).then(
      () => {
        queued -= bytes.length;
      },
      () => close(),
    );
    return true;
  };

  requestSignal.addEventListener("abort", close, { once: true });
  const keepAlive = setInterval(() => {
    void write(formatSseComment("keep-alive"));
    opts.onKeepAlive?.();
  }, opts.keepAliveMs);
  keepAlive.unref?.();
  if (requestSignal.aborted) close();

  void write(formatSseComment("connected"));
  const channel: SseChannel = {
    send: (message) => write(formatSseMessage(message)),
    sendEncoded: (frame) => write(frame),
    signal: lifetime.signal,
  };
  produce(channel)
    .catch(async (err: Error) => {
      opts.onError?.(err);
      const body = { type: "error", error: { type: "api_error", message: "the event stream failed; reconnect to resume" } };
      await write(formatSseMessage({ event: "error", data: JSON.stringify(body) }));
    })
    .finally(close);

  return c.body(readable, 200, {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    "x-accel-buffering": "no",
  });
}
