import { mkdtemp, readdir, rm, utimes, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseByteRange, sweepStaging } from "./transfers.ts";

describe("parseByteRange", () => {
  it("reads single byte ranges against the size", () => {
    expect(parseByteRange(undefined, 100)).toBeUndefined();
    expect(parseByteRange("bytes=0-9", 100)).toEqual({ start: 0, end: 9 });
    expect(parseByteRange("bytes=90-", 100)).toEqual({ start: 90, end: 99 });
    expect(parseByteRange("bytes=90-500", 100)).toEqual({ start: 90, end: 99 });
    expect(parseByteRange("bytes=-10", 100)).toEqual({ start: 90, end: 99 });
    expect(parseByteRange("bytes=-500", 100)).toEqual({ start: 0, end: 99 });
  });

  it("ignores what is not one byte range and refuses what cannot be satisfied", () => {
    expect(parseByteRange("bytes=0-1,5-6", 100)).toBeUndefined();
    expect(parseByteRange("items=0-1", 100)).toBeUndefined();
    expect(parseByteRange("bytes=-", 100)).toBeUndefined();
    expect(parseByteRange("bytes=100-", 100)).toBeNull();
    expect(parseByteRange("bytes=9-3", 100)).toBeNull();
    expect(parseByteRange("bytes=-0", 100)).toBeNull();
    expect(parseByteRange("bytes=0-0", 0)).toBeNull();
  });
});

describe("sweepStaging", () => {
  it("removes only staged uploads untouched for the given age", async () => {
    const dir = await mkdtemp(join(tmpdir(), "openma-sweep-"));
    try {
      const now = Date.now();
      await writeFile(join(dir, "upload-aa.tmp"), "old");
      await utimes(join(dir, "upload-aa.tmp"), (now - 7_200_000) / 1000, (now - 7_200_000) / 1000);
      await writeFile(join(dir, "upload-bb.tmp"), "live");
      await writeFile(join(dir, "other.txt"), "not ours");
      await utimes(join(dir, "other.txt"), (now - 7_200_000) / 1000, (now - 7_200_000) / 1000);
      expect(await sweepStaging(dir, now, 3_600_000)).toBe(1);
      expect((await readdir(dir)).sort()).toEqual(["other.txt", "upload-bb.tmp"]);
      expect(await sweepStaging(join(dir, "absent"), now, 1)).toBe(0);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
