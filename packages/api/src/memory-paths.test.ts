import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { ancestorsOf, MARKER_SEGMENT, memoryPathProblem, pathPrefixProblem, prefixUpperBound, rollupOf } from "./memory-paths.ts";

describe("memory paths", () => {
  it("accepts well-formed paths", () => {
    for (const p of ["/a", "/notes/todo.md", "/with space/ünïcode.md", `/${"s/".repeat(19)}s`, "/a\\b"]) {
      expect(memoryPathProblem(p), p).toBeNull();
    }
  });

  it("refuses malformed paths with a reason", () => {
    const bad: Record<string, RegExp> = {
      "": /start with \//,
      "a/b": /start with \//,
      "/": /empty segments/,
      "/a/": /empty segments/,
      "/a//b": /empty segments/,
      "/a/./b": /\. or \.\./,
      "/a/../b": /\. or \.\./,
      "/a\u0000b": /control/,
      "/a\nb": /control/,
      "/a\u200bb": /control/, // zero-width space is a format character
      "/a\u2028b": /separator/,
      "/e\u0301": /Normalization Form C/,
      [`/${"x".repeat(1024)}`]: /1024 bytes/,
      [`/${"s/".repeat(20)}s`]: /20 segments/,
      [`/${MARKER_SEGMENT}`]: /reserved/,
      [`/${MARKER_SEGMENT}/x`]: /reserved/,
      "/\ud800": /control|Unicode/,
    };
    for (const [path, reason] of Object.entries(bad)) expect(memoryPathProblem(path), JSON.stringify(path)).toMatch(reason);
  });

  it("counts the 1024-byte limit in UTF-8 bytes, not characters", () => {
    expect(memoryPathProblem(`/${"é".repeat(511)}`)).toBeNull(); // 1 + 1022 bytes
    expect(memoryPathProblem(`/${"é".repeat(512)}`)).toMatch(/1024 bytes/);
  });

  it("validates list prefixes", () => {
    expect(pathPrefixProblem("/")).toBeNull();
    expect(pathPrefixProblem("/notes/")).toBeNull();
    expect(pathPrefixProblem("/notes")).toMatch(/end with \//);
    expect(pathPrefixProblem("notes/")).toMatch(/start with \//);
    expect(pathPrefixProblem("/a/../")).toMatch(/\.\./);
    expect(pathPrefixProblem("//")).toMatch(/empty/);
  });

  it("lists proper ancestors", () => {
    expect(ancestorsOf("/a")).toEqual([]);
    expect(ancestorsOf("/a/b/c")).toEqual(["/a", "/a/b"]);
  });

  it("rolls deeper memories up to the requested depth", () => {
    expect(rollupOf("/a", "/", 1)).toBeNull();
    expect(rollupOf("/a/b", "/", 1)).toBe("/a/");
    expect(rollupOf("/a/b/c", "/", 2)).toBe("/a/b/");
    expect(rollupOf("/a/b/c", "/a/", 1)).toBe("/a/b/");
    expect(rollupOf("/a/b", "/a/", 1)).toBeNull();
    expect(rollupOf("/a/b/c", "/", 0)).toBeNull();
  });

  it("bounds a prefix range exactly in bytewise order", () => {
    const segment = fc.stringMatching(/^[a-z/.\-_0é\u{1F600}]{1,4}$/u);
    fc.assert(
      fc.property(fc.array(segment, { minLength: 1, maxLength: 3 }), fc.string({ unit: "grapheme", maxLength: 8 }), (segs, tail) => {
        const prefix = `/${segs.join("/")}/`;
        const upper = prefixUpperBound(prefix);
        const candidate = `${prefix.slice(0, -1)}${tail}`;
        const bytes = Buffer.from(candidate);
        const inRange = Buffer.compare(Buffer.from(prefix), bytes) <= 0 && Buffer.compare(bytes, Buffer.from(upper)) < 0;
        expect(inRange).toBe(candidate.startsWith(prefix));
      }),
    );
  });
});
