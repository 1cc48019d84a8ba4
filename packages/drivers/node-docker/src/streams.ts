/**
 * The Engine API's multiplexed attach format and bounded capture.
 *
 * Without a TTY, an attached exec stream is a sequence of frames: an 8-byte
 * header (byte 0 the stream: 1 stdout, 2 stderr; bytes 4..7 the payload
 * length, big-endian) followed by the payload. Frames can be split across
 * socket chunks and several can share one chunk, so the demuxer buffers
 * partial headers and payloads.
 */
import type { OutputStream } from "@openma/contract";

const HEADER = 8;

export class Demuxer {
  #pending: Buffer = Buffer.alloc(0);
  #stream: OutputStream | null = null;
  #remaining = 0;
  #corrupt = false;

  constructor(private readonly emit: (stream: OutputStream, chunk: Buffer) => void) {}

  /** True once a header named an unknown stream: the rest was passed through as stdout. */
  get corrupt(): boolean {
    return this.#corrupt;
  }

  push(chunk: Buffer): void {
    if (this.#corrupt) {
      this.emit("stdout", chunk);
      return;
    }
    let data = this.#pending.length > 0 ? Buffer.concat([this.#pending, chunk]) : chunk;
    this.#pending = Buffer.alloc(0);
    while (data.length > 0) {
      if (this.#remaining > 0 && this.#stream !== null) {
        const take = Math.min(this.#remaining, data.length);
        this.emit(this.#stream, data.subarray(0, take));
        this.#remaining -= take;
        data = data.subarray(take);
        continue;
      }
      if (data.length < HEADER) {
        this.#pending = Buffer.from(data);
        return;
      }
      const kind = data[0];
      const size = data.readUInt32BE(4);
      if (kind !== 1 && kind !== 2) {
        // Not a framed stream (a TTY exec, or a protocol change): never drop bytes, pass them through.
        this.#corrupt = true;
        this.emit("stdout", data);
        return;
      }
      this.#stream = kind === 1 ? "stdout" : "stderr";
      this.#remaining = size;
      data = data.subarray(HEADER);
    }
  }
}

/** Keeps the first `limit` bytes and remembers whether there was more (file reads stop early). */
export class HeadBuffer {
  #chunks: Buffer[] = [];
  #size = 0;
  overflowed = false;

  constructor(private readonly limit: number) {}

  push(chunk: Buffer): void {
    const room = this.limit - this.#size;
    if (chunk.length > room) this.overflowed = true;
    if (room <= 0) return;
    const kept = chunk.length > room ? chunk.subarray(0, room) : chunk;
    this.#chunks.push(kept);
    this.#size += kept.length;
  }

  bytes(): Buffer {
    return Buffer.concat(this.#chunks);
  }
}
