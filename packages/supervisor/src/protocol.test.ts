/** The wire format on its own: framing bounds, validation, and what encoding lets through. */
import { describe, expect, it } from "vitest";
import { encodeHostMessage, LineDecoder, MAX_LINE_BYTES, PROTOCOL, parseChildLine, type StartMessage } from "./protocol.ts";

const bytes = (text: string) => new TextEncoder().encode(text);

const START: StartMessage = {
  type: "start",
  protocol: PROTOCOL,
  scope: { environmentId: "env_1", sessionId: "sesn_1" },
  generation: 1,
  attempt: 1,
  restored: null,
  heartbeatIntervalMs: 1000,
};

describe("LineDecoder", () => {
  it("joins lines across chunks, multi-byte characters split between chunks included", () => {
    const decoder = new LineDecoder();
    const text = bytes('{"type":"failed","error":"é✓"}\n');
    const cut = text.indexOf(0xc3) + 1; // inside "é"
    expect(decoder.push(text.subarray(0, cut))).toEqual([]);
    expect(decoder.push(text.subarray(cut))).toEqual([{ type: "line", line: '{"type":"failed","error":"é✓"}' }]);
  });

  it("emits several lines of one chunk in order and keeps the partial tail", () => {
    const decoder = new LineDecoder();
    expect(decoder.push(bytes("a\nb\nc"))).toEqual([
      { type: "line", line: "a" },
      { type: "line", line: "b" },
    ]);
    expect(decoder.push(bytes("\n"))).toEqual([{ type: "line", line: "c" }]);
  });

  it("accepts a line of exactly the bound, reports one byte more once, then stays silent", () => {
    const decoder = new LineDecoder(8);
    expect(decoder.push(bytes("12345678\n"))).toEqual([{ type: "line", line: "12345678" }]);
    expect(decoder.push(bytes("1234"))).toEqual([]);
    expect(decoder.push(bytes("56789"))).toEqual([{ type: "overflow" }]);
    expect(decoder.push(bytes("\n{}\n"))).toEqual([]);
  });

  it("reports invalid UTF-8 and stops", () => {
    const decoder = new LineDecoder();
    expect(decoder.push(new Uint8Array([0x61, 0xc3, 0x28, 0x0a, 0x62, 0x0a]))).toEqual([{ type: "invalid_utf8" }]);
    expect(decoder.push(bytes("c\n"))).toEqual([]);
  });

  it("defaults to MAX_LINE_BYTES", () => {
    const decoder = new LineDecoder();
    expect(decoder.push(new Uint8Array(MAX_LINE_BYTES + 1).fill(0x61))).toEqual([{ type: "overflow" }]);
  });
});

describe("parseChildLine", () => {
  it("parses every child message and ignores unknown members", () => {
    for (const message of [
      { type: "ready", protocol: PROTOCOL, harness: { id: "pi", version: "1" } },
      { type: "heartbeat" },
      { type: "checkpoint_request", turnId: "t1" },
      { type: "completed" },
      { type: "failed", error: "x" },
      { type: "drained" },
    ]) {
      expect(parseChildLine(JSON.stringify({ ...message, extra: 1 }))).toEqual({ ok: true, message });
    }
  });

  it("refuses what is not a child message, with a bounded excerpt", () => {
    expect(parseChildLine("[1,2]")).toMatchObject({ ok: false });
    expect(parseChildLine('{"type":"start"}')).toMatchObject({ ok: false }); // a host message
    expect(parseChildLine(JSON.stringify({ type: "failed", error: "e".repeat(5000) }))).toMatchObject({ ok: false });
    const long = parseChildLine(`x${"y".repeat(1000)}`);
    expect(long.ok === false && long.error.length).toBeLessThan(200);
  });
});

describe("encodeHostMessage", () => {
  it("writes one line of JSON", () => {
    const line = encodeHostMessage(START);
    expect(line.endsWith("\n")).toBe(true);
    expect(line.slice(0, -1)).not.toContain("\n");
    expect(JSON.parse(line)).toEqual(START);
  });

  it("drops members the protocol does not define, so a smuggled credential never reaches the child", () => {
    const smuggled = { ...START, token: "rtf_secret", scope: { ...START.scope, token: "rtf_secret" } } as StartMessage;
    const line = encodeHostMessage(smuggled);
    expect(line).not.toContain("rtf_secret");
    expect(JSON.parse(line)).toEqual(START);
  });

  it("refuses to send what a child would have to refuse", () => {
    expect(() => encodeHostMessage({ ...START, protocol: "other" } as unknown as StartMessage)).toThrow();
    expect(() => encodeHostMessage({ type: "checkpoint_result", turnId: "", result: { type: "failed", error: "x" } })).toThrow();
  });
});
