/**
 * A pass-through BlobStore that counts traffic: how tests and the benchmark
 * prove an incremental checkpoint uploads in proportion to the change.
 */
import type { BlobListing, BlobStore, PendingPut } from "@openma/storage/blobs";

export interface BlobTraffic {
  puts: number;
  putBytes: number;
  gets: number;
  getBytes: number;
  exists: number;
  deletes: number;
}

export class CountingBlobStore implements BlobStore {
  traffic: BlobTraffic = CountingBlobStore.zero();

  constructor(readonly inner: BlobStore) {
    if (inner.list) this.list = (prefix: string) => inner.list!(prefix);
    if (inner.putPending) {
      this.putPending = async (key: string, data: Uint8Array) => {
        this.traffic.puts++;
        this.traffic.putBytes += data.length;
        return inner.putPending!(key, data);
      };
    }
    if (inner.readInto) {
      this.readInto = async (key: string, into: Buffer) => {
        this.traffic.gets++;
        const data = await inner.readInto!(key, into);
        this.traffic.getBytes += data?.length ?? 0;
        return data;
      };
    }
  }

  readInto?: (key: string, into: Buffer) => Promise<Buffer | null>;
  putPending?: (key: string, data: Uint8Array) => Promise<PendingPut>;

  static zero(): BlobTraffic {
    return { puts: 0, putBytes: 0, gets: 0, getBytes: 0, exists: 0, deletes: 0 };
  }

  /** Returns the traffic so far and starts counting from zero. */
  reset(): BlobTraffic {
    const t = this.traffic;
    this.traffic = CountingBlobStore.zero();
    return t;
  }

  list?: (prefix: string) => Promise<BlobListing[]>;

  async put(key: string, data: Uint8Array): Promise<void> {
    this.traffic.puts++;
    this.traffic.putBytes += data.length;
    await this.inner.put(key, data);
  }

  async get(key: string): Promise<Buffer | null> {
    this.traffic.gets++;
    const data = await this.inner.get(key);
    this.traffic.getBytes += data?.length ?? 0;
    return data;
  }

  async delete(key: string): Promise<void> {
    this.traffic.deletes++;
    await this.inner.delete(key);
  }

  async exists(key: string): Promise<boolean> {
    this.traffic.exists++;
    return this.inner.exists(key);
  }
}
