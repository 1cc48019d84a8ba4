import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { type ChunkParams, chunkBuffer, chunkBufferBytes, chunkStream, DEFAULT_CHUNKING, validateChunkParams } from "./chunker.ts";
import { seededBytes } from "./testkit.ts";

const hashes = (chunks: Iterable<Uint8Array>) => [...chunks].map((c) => createHash("sha256").update(c).digest("hex"));

describe("content-defined chunker", () => {
  const data = seededBytes("chunker", 4 * 1024 * 1024);

  it("covers the input exactly with chunks between min and max (only the last may be shorter)", () => {
    const chunks = [...chunkBuffer(data)];
    expect(Buffer.concat(chunks).equals(data)).toBe(true);
    chunks.slice(0, -1).forEach((c) => {
      expect(c.length).toBeGreaterThanOrEqual(DEFAULT_CHUNKING.min);
      expect(c.length).toBeLessThanOrEqual(DEFAULT_CHUNKING.max);
    });
    const mean = data.length / chunks.length;
    // Normalized chunking keeps the mean near min + avg on random data.
    expect(mean).toBeGreaterThan(DEFAULT_CHUNKING.avg * 0.75);
    expect(mean).toBeLessThan(DEFAULT_CHUNKING.avg * 1.75);
  });

  it("is deterministic (the gear table is part of the format)", () => {
    expect(hashes(chunkBuffer(data))).toEqual(hashes(chunkBuffer(Buffer.from(data))));
    // Golden lengths: if these move, old checkpoints stop deduplicating against new ones.
    expect([...chunkBuffer(data)].slice(0, 4).map((c) => c.length)).toEqual([75_928, 72_840, 71_975, 79_584]);
  });

  it("keeps boundaries after an insertion: only chunks near the edit change", () => {
    const edited = Buffer.concat([data.subarray(0, 2_000_000), Buffer.from("inserted bytes"), data.subarray(2_000_000)]);
    const before = new Set(hashes(chunkBuffer(data)));
    const after = hashes(chunkBuffer(edited));
    const fresh = after.filter((h) => !before.has(h));
    expect(fresh.length).toBeGreaterThanOrEqual(1);
    expect(fresh.length).toBeLessThanOrEqual(2);
  });

  it("streams to the same chunks as the in-memory chunker, whatever the read sizes", async () => {
    let pos = 0;
    let turn = 0;
    const read = async (buf: Uint8Array, offset: number, length: number) => {
      const n = Math.min(length, [1, 7_000, 100_003, 333][turn++ % 4]!, data.length - pos);
      buf.set(data.subarray(pos, pos + n), offset);
      pos += n;
      return n;
    };
    const streamed: Buffer[] = [];
    for await (const c of chunkStream(read)) streamed.push(c);
    expect(hashes(streamed)).toEqual(hashes(chunkBuffer(data)));
  });

  it("chunks the same through a caller's reused buffer, file after file, and refuses one too small", async () => {
    const reader = (bytes: Buffer) => {
      let pos = 0;
      return async (buf: Uint8Array, offset: number, length: number) => {
        const n = Math.min(length, bytes.length - pos);
        buf.set(bytes.subarray(pos, pos + n), offset);
        pos += n;
        return n;
      };
    };
    const shared = Buffer.alloc(chunkBufferBytes(DEFAULT_CHUNKING));
    for (const input of [data, data.subarray(0, 5_000), data.subarray(1_000_000)]) {
      const streamed: string[] = [];
      for await (const c of chunkStream(reader(input), DEFAULT_CHUNKING, input.length, false, shared)) streamed.push(...hashes([c]));
      expect(streamed).toEqual(hashes(chunkBuffer(input)));
    }
    const small = chunkStream(reader(data), DEFAULT_CHUNKING, data.length, false, Buffer.alloc(DEFAULT_CHUNKING.max));
    await expect(small.next()).rejects.toThrow(/below/);
  });

  it("yields nothing for empty input and one chunk for input below min", async () => {
    expect([...chunkBuffer(Buffer.alloc(0))]).toHaveLength(0);
    expect([...chunkBuffer(Buffer.alloc(100, 1))].map((c) => c.length)).toEqual([100]);
    const none: Buffer[] = [];
    for await (const c of chunkStream(async () => 0)) none.push(c);
    expect(none).toHaveLength(0);
  });

  it("forces a cut at max on input that never matches (all zero bytes)", () => {
    const p: ChunkParams = { min: 1024, avg: 4096, max: 8192 };
    const chunks = [...chunkBuffer(Buffer.alloc(50_000), p)].map((c) => c.length);
    // A zero byte's gear value is non-zero, so cuts may happen; but none may exceed max.
    expect(chunks.every((n) => n <= p.max)).toBe(true);
    expect(chunks.reduce((a, b) => a + b, 0)).toBe(50_000);
  });

  it("rejects unusable parameters", () => {
    expect(validateChunkParams(DEFAULT_CHUNKING)).toBeNull();
    expect(validateChunkParams({ min: 10, avg: 5, max: 20 })).toMatch(/min < avg < max/);
    expect(validateChunkParams({ min: 10, avg: 1000, max: 20_000 })).toMatch(/power of two/);
    expect(validateChunkParams({ min: 1, avg: 1024, max: 1 << 30 })).toMatch(/max chunk size/);
    expect(validateChunkParams({ min: 0.5, avg: 1024, max: 4096 })).toMatch(/positive integers/);
  });
});
