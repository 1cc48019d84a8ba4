/**
 * Writes a scripted SSE response straight to the Node response, so the server
 * knows when each event has been handed to the socket: scripted delays fall
 * between events, and an injected drop cuts the connection exactly after the
 * N-th event rather than somewhere in a buffer.
 */
import type { ServerResponse } from "node:http";
import type { Scheduler } from "@openma/time";
import type { ErrorType } from "./errors.ts";

export type StreamCut = { kind: "drop"; after: number } | { kind: "error"; after: number; errorType: ErrorType; message: string };

export interface SseWrite {
  outgoing: ServerResponse;
  /** Rendered SSE messages, in order; a cut counts them. */
  frames: string[];
  /** The dialect's in-stream error message, sent in place of frame `sequence`. */
  errorFrame(errorType: ErrorType, message: string, sequence: number): string;
  headers: Record<string, string>;
  scheduler: Scheduler;
  /** Aborts when the client goes away or the server closes. */
  signal: AbortSignal;
  firstByteMs: number;
  chunkMs: number;
  cut?: StreamCut | undefined;
}

export type StreamOutcome = "completed" | "aborted" | "dropped" | "stream_error";

/** Resolves once the chunk reached the socket; rejects if the client goes away first (a dead socket may never call back). */
function write(outgoing: ServerResponse, data: string, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(new Error("client disconnected"));
    const onAbort = () => reject(new Error("client disconnected"));
    signal.addEventListener("abort", onAbort, { once: true });
    outgoing.write(data, (err) => {
      signal.removeEventListener("abort", onAbort);
      if (err) reject(err);
      else resolve();
    });
  });
}

/** Resolves when the response finished; rejects if the client went away instead. */
function end(outgoing: ServerResponse, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(new Error("client disconnected"));
    signal.addEventListener("abort", onAbort, { once: true });
    outgoing.end(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    });
  });
}

async function applyCut(o: SseWrite, cut: StreamCut): Promise<StreamOutcome> {
  if (cut.kind === "drop") {
    // Everything written so far was flushed (each write awaited its callback); now vanish like a crashed upstream.
    o.outgoing.socket?.destroy();
    return "dropped";
  }
  await write(o.outgoing, o.errorFrame(cut.errorType, cut.message, cut.after), o.signal);
  await end(o.outgoing, o.signal);
  return "stream_error";
}

export async function writeSse(o: SseWrite): Promise<StreamOutcome> {
  try {
    if (o.firstByteMs > 0) await o.scheduler.sleep(o.firstByteMs, o.signal);
    if (o.signal.aborted) return "aborted";
    o.outgoing.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      connection: "keep-alive",
      ...o.headers,
    });
    o.outgoing.flushHeaders();
    for (let i = 0; i < o.frames.length; i++) {
      if (o.cut && o.cut.after === i) return await applyCut(o, o.cut);
      if (i > 0 && o.chunkMs > 0) await o.scheduler.sleep(o.chunkMs, o.signal);
      await write(o.outgoing, o.frames[i]!, o.signal);
    }
    if (o.cut) return await applyCut(o, o.cut);
    await end(o.outgoing, o.signal);
    return "completed";
  } catch {
    // An aborted sleep or a write to a socket the client closed: the client is gone either way.
    if (!o.outgoing.destroyed) o.outgoing.socket?.destroy();
    return "aborted";
  }
}
