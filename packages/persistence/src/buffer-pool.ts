/**
 * A free list of equal-size buffers. Fresh memory costs a page fault per
 * 4 KiB the first time it is touched, which on a virtualized host (as here)
 * was most of a many-file checkpoint's time; reusing a buffer touches pages
 * that are already mapped. A pool lives as long as one checkpoint or restore,
 * so nothing stays resident after it.
 */
export class BufferPool {
  private readonly free: Buffer[] = [];

  constructor(readonly size: number) {}

  take(): Buffer {
    return this.free.pop() ?? Buffer.allocUnsafe(this.size);
  }

  /** Returns a buffer for reuse; one of another size (a builder that grew) is simply dropped. */
  give(buf: Buffer): void {
    if (buf.length === this.size) this.free.push(buf);
  }
}
