/**
 * A file's SHA-256 assembled from its chunks. Most workspace files are a
 * single chunk, whose hash is already computed for its content address, so
 * they are not hashed a second time; only multi-chunk files pay for a
 * running whole-file hash. This roughly halves hashing on many-file trees.
 */
import { createHash, type Hash } from "node:crypto";

export const EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

export class FileDigest {
  private count = 0;
  private first: Uint8Array | null = null;
  private firstSha = EMPTY_SHA256;
  private running: Hash | null = null;

  /** `sha256` must be the verified hash of `chunk`. */
  add(chunk: Uint8Array, sha256: string): void {
    if (this.count === 0) {
      this.first = chunk;
      this.firstSha = sha256;
    } else {
      if (!this.running) {
        this.running = createHash("sha256").update(this.first!);
        this.first = null;
      }
      this.running.update(chunk);
    }
    this.count++;
  }

  digest(): string {
    return this.running ? this.running.digest("hex") : this.firstSha;
  }
}
