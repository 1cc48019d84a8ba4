import { describe, expect, it } from "vitest";
import { RetryBackoff } from "./retry-backoff.ts";

describe("RetryBackoff", () => {
  it("doubles per consecutive failure up to the cap, and a success resets it", () => {
    const backoff = new RetryBackoff({ baseMs: 1_000, maxMs: 60_000, maxEntries: 10 });
    expect(backoff.delayFor("s")).toBe(0);
    const delays: number[] = [];
    for (let i = 0; i < 8; i++) {
      backoff.failed("s");
      delays.push(backoff.delayFor("s"));
    }
    expect(delays).toEqual([1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000]);
    expect(backoff.delayFor("other")).toBe(0);
    backoff.succeeded("s");
    expect(backoff.delayFor("s")).toBe(0);
  });

  it("stays bounded, forgetting the least recently failed session first", () => {
    const backoff = new RetryBackoff({ baseMs: 10, maxMs: 100, maxEntries: 2 });
    backoff.failed("a");
    backoff.failed("b");
    backoff.failed("a");
    backoff.failed("c");
    expect(backoff.size).toBe(2);
    expect(backoff.delayFor("b")).toBe(0);
    expect(backoff.delayFor("a")).toBe(20);
    expect(backoff.delayFor("c")).toBe(10);
  });
});
