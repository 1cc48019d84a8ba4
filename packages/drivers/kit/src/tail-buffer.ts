/** Keeps the last `limit` bytes of a stream (tool output is capped from the front: the end matters most). */
export class TailBuffer {
  #chunks: Buffer[] = [];
  #size = 0;
  truncated = false;

  constructor(private readonly limit: number) {}

  push(chunk: Buffer): void {
    this.#chunks.push(chunk);
    this.#size += chunk.length;
    while (this.#size > this.limit && this.#chunks.length > 0) {
      const first = this.#chunks[0] as Buffer;
      const excess = this.#size - this.limit;
      this.truncated = true;
      if (first.length <= excess) {
        this.#chunks.shift();
        this.#size -= first.length;
      } else {
        this.#chunks[0] = first.subarray(excess);
        this.#size -= excess;
      }
    }
  }

  bytes(): Uint8Array {
    return Buffer.concat(this.#chunks);
  }

  text(): string {
    return Buffer.concat(this.#chunks).toString("utf8");
  }
}
