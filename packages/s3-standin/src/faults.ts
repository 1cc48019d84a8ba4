/**
 * Fault injection: tests queue faults for an operation and the next matching
 * requests suffer them, so failure handling (retries, corruption detection,
 * aborts) is tested deterministically, without timing.
 */

export const S3_OPERATIONS = [
  "ListBuckets",
  "CreateBucket",
  "HeadBucket",
  "DeleteBucket",
  "ListObjectsV2",
  "DeleteObjects",
  "PutObject",
  "GetObject",
  "HeadObject",
  "DeleteObject",
  "CreateMultipartUpload",
  "UploadPart",
  "CompleteMultipartUpload",
  "AbortMultipartUpload",
] as const;
export type S3Operation = (typeof S3_OPERATIONS)[number];

export type Fault =
  /** Answer with an S3 XML error instead of performing the operation (default 500 InternalError). */
  | { op: S3Operation; kind: "error"; status?: number; code?: string; message?: string }
  /** Destroy the connection without any response. */
  | { op: S3Operation; kind: "reset" }
  /** Never answer; the request ends when the client gives up (abort) or the stand-in closes. */
  | { op: S3Operation; kind: "hang" }
  /** Flip one byte of the received body before it is verified: corruption in transit. */
  | { op: "PutObject"; kind: "corrupt" }
  /** Flip one byte of the object body sent; headers, checksums included, stay truthful. */
  | { op: "GetObject"; kind: "corrupt" }
  /** Send the headers of the full response, then only `keepBytes` of the body, then drop the connection. */
  | { op: "GetObject"; kind: "truncate"; keepBytes?: number };

export class FaultQueue {
  private readonly queue: { fault: Fault; triggered: () => void }[] = [];

  /** Queues `fault` for the next `times` requests of its operation; resolves when the first of them is hit. */
  add(fault: Fault, times = 1): Promise<void> {
    if (!Number.isInteger(times) || times < 1) throw new Error("times must be a positive integer");
    return new Promise((resolve) => {
      for (let i = 0; i < times; i++) this.queue.push({ fault, triggered: resolve });
    });
  }

  take(op: S3Operation): Fault | undefined {
    const i = this.queue.findIndex((f) => f.fault.op === op);
    if (i < 0) return undefined;
    const [entry] = this.queue.splice(i, 1);
    entry!.triggered();
    return entry!.fault;
  }

  get pending(): number {
    return this.queue.length;
  }

  clear(): void {
    this.queue.length = 0;
  }
}

/** A copy of `data` with one byte changed (the middle one), or one byte added to an empty body. */
export function flipByte(data: Buffer): Buffer {
  if (data.length === 0) return Buffer.from([0x2a]);
  const copy = Buffer.from(data);
  const i = copy.length >> 1;
  copy[i] = copy[i]! ^ 0xff;
  return copy;
}
