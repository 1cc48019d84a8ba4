import { describe, expect, it } from "vitest";
import { canonicalJson, isFlatMetadata, isPlainObject } from "./index.ts";
import { isRuntimeIdentifier, isRuntimeResourceScope, RUNTIME_IDENTIFIER_MAX_LENGTH, runtimeScopeKey } from "./scope.ts";

describe("canonicalJson", () => {
  it("sorts keys at every depth and writes no whitespace", () => {
    expect(canonicalJson({ b: 1, a: { d: [3, { z: true, y: null }], c: "x" } })).toBe('{"a":{"c":"x","d":[3,{"y":null,"z":true}]},"b":1}');
  });

  it("is byte-identical for the same value built in a different key order", () => {
    expect(canonicalJson({ id: "w", contentHash: "h", metadata: { b: 2, a: 1 } })).toBe(
      canonicalJson({ metadata: { a: 1, b: 2 }, contentHash: "h", id: "w" }),
    );
  });

  it("omits undefined object members like JSON.stringify but keeps null", () => {
    expect(canonicalJson({ a: undefined, b: null })).toBe('{"b":null}');
    expect(canonicalJson(Object.assign(Object.create(null), { k: "v" }))).toBe('{"k":"v"}');
  });

  it("escapes strings exactly as JSON does", () => {
    expect(canonicalJson(['quote " and \\ and \n', "ü"])).toBe(JSON.stringify(['quote " and \\ and \n', "ü"]));
  });

  it.each([
    ["NaN", Number.NaN],
    ["Infinity", Number.POSITIVE_INFINITY],
    ["a function", () => 1],
    ["a Date", new Date(0)],
    ["a Map", new Map()],
    ["a bigint", 1n],
    ["undefined", undefined],
    ["an undefined array item", [undefined]],
  ])("refuses %s instead of encoding it lossily", (_name, value) => {
    expect(() => canonicalJson(value)).toThrow(TypeError);
  });

  it("refuses cycles and absurd nesting", () => {
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    expect(() => canonicalJson(cycle)).toThrow(/nested too deeply/);
    let deep: unknown = 1;
    for (let i = 0; i < 40; i++) deep = [deep];
    expect(() => canonicalJson(deep)).toThrow(TypeError);
  });
});

describe("isPlainObject / isFlatMetadata", () => {
  it("accepts only plain objects", () => {
    expect(isPlainObject({})).toBe(true);
    expect(isPlainObject(Object.create(null))).toBe(true);
    expect(isPlainObject([])).toBe(false);
    expect(isPlainObject(null)).toBe(false);
    expect(isPlainObject("x")).toBe(false);
    expect(isPlainObject(new (class Box {})())).toBe(false);
  });

  it("accepts flat scalar maps only", () => {
    expect(isFlatMetadata({ a: "x", b: 1, c: false, d: null })).toBe(true);
    expect(isFlatMetadata({})).toBe(true);
    expect(isFlatMetadata({ a: { nested: 1 } })).toBe(false);
    expect(isFlatMetadata({ a: [1] })).toBe(false);
    expect(isFlatMetadata({ a: Number.NaN })).toBe(false);
    expect(isFlatMetadata({ a: undefined })).toBe(false);
    expect(isFlatMetadata("x")).toBe(false);
  });
});

describe("runtime scope", () => {
  it("validates identifiers: non-empty, bounded, no control characters", () => {
    expect(isRuntimeIdentifier("sesn_01")).toBe(true);
    expect(isRuntimeIdentifier("x".repeat(RUNTIME_IDENTIFIER_MAX_LENGTH))).toBe(true);
    expect(isRuntimeIdentifier("x".repeat(RUNTIME_IDENTIFIER_MAX_LENGTH + 1))).toBe(false);
    expect(isRuntimeIdentifier("")).toBe(false);
    expect(isRuntimeIdentifier("a\nb")).toBe(false);
    expect(isRuntimeIdentifier("a\u007fb")).toBe(false);
    expect(isRuntimeIdentifier(7)).toBe(false);
  });

  it("validates scopes", () => {
    expect(isRuntimeResourceScope({ environmentId: "env", sessionId: "sesn" })).toBe(true);
    expect(isRuntimeResourceScope({ environmentId: "env" })).toBe(false);
    expect(isRuntimeResourceScope({ environmentId: "", sessionId: "s" })).toBe(false);
    expect(isRuntimeResourceScope(null)).toBe(false);
    expect(isRuntimeResourceScope("env/sesn")).toBe(false);
  });

  it("keys scopes without separator collisions", () => {
    const a = runtimeScopeKey({ environmentId: "a/b", sessionId: "c" });
    const b = runtimeScopeKey({ environmentId: "a", sessionId: "b/c" });
    expect(a).not.toBe(b);
    expect(runtimeScopeKey({ environmentId: "env", sessionId: "sesn" })).toBe('["env","sesn"]');
  });
});
