import { describe, expect, it } from "vitest";
import { TailBuffer } from "./tail-buffer.ts";

describe("TailBuffer", () => {
  it("keeps everything under the limit", () => {
    const b = new TailBuffer(10);
    b.push(Buffer.from("abc"));
    b.push(Buffer.from("def"));
    expect(Buffer.from(b.bytes()).toString()).toBe("abcdef");
    expect(b.truncated).toBe(false);
  });

  it("keeps only the last bytes, splitting and dropping chunks, and says it truncated", () => {
    const b = new TailBuffer(5);
    b.push(Buffer.from("0123"));
    b.push(Buffer.from("4567"));
    expect(Buffer.from(b.bytes()).toString()).toBe("34567");
    b.push(Buffer.from("89abcdef"));
    expect(Buffer.from(b.bytes()).toString()).toBe("bcdef");
    expect(b.truncated).toBe(true);
  });
});
