/** Script parsing, matchers, turn selection and the wire builder, without HTTP. */
import { describe, expect, it } from "vitest";
import { anthropic, buildResponse } from "./dialects/anthropic.ts";
import { chunk } from "./frames.ts";
import { mismatch, sessionKeyOf } from "./match.ts";
import { FaultQueue, ScriptState } from "./queue.ts";
import { parseFault, parseScript, ScriptError, type ScriptInput } from "./script.ts";
import { type RequestView, redactHeaders } from "./view.ts";

/** A Messages API body, read into the neutral view the matchers see. */
function request(body: Record<string, unknown>): RequestView {
  const parsed = anthropic.parse({ model: "claude-test", max_tokens: 64, ...body }, {});
  if (!parsed.ok) throw new Error(parsed.message);
  return parsed.value.view;
}

const userSays = (text: string, extra: Record<string, unknown> = {}) => request({ messages: [{ role: "user", content: text }], ...extra });

/** user → assistant tool_use(name) → user tool_result. */
function afterTool(name: string, result: string, isError = false): RequestView {
  return request({
    messages: [
      { role: "user", content: "go" },
      { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name, input: {} }] },
      {
        role: "user",
        content: [{ type: "tool_result", tool_use_id: "toolu_1", content: [{ type: "text", text: result }], is_error: isError }],
      },
    ],
  });
}

const state = (script: ScriptInput) => new ScriptState(parseScript(script));

describe("parseScript", () => {
  it("accepts a bare list of turns and the string shorthand for a text response", () => {
    const s = parseScript([{ response: "hello" }]);
    expect(s.turns[0]!.response).toEqual({ content: [{ type: "text", text: "hello" }] });
  });

  it("names the offending field", () => {
    const bad = () => parseScript({ turns: [{ response: "ok" }, { response: { content: [{ type: "tool_use", name: "", input: {} }] } }] });
    expect(bad).toThrow(ScriptError);
    expect(bad).toThrow(/turns\.1\.response\.content\.0\.name/);
    expect(() => parseScript({ turns: [{ match: { tools_include: "bash" }, response: "x" }] })).toThrow(/turns\.0\.match\.tools_include/);
    expect(() => parseScript({ turns: [{ response: "x", delay: { chunk_ms: -1 } }] })).toThrow(/turns\.0\.delay\.chunk_ms/);
  });

  it("requires exactly one of response and error per turn", () => {
    expect(() => parseScript([{}])).toThrow(/exactly one of response or error/);
    expect(() => parseScript([{ response: "x", error: { status: 500 } }])).toThrow(/exactly one of response or error/);
  });

  it("rejects unknown keys and an invalid session_key pattern", () => {
    expect(() => parseScript([{ respones: "typo" }])).toThrow(ScriptError);
    expect(() => parseScript({ turns: [], session_key: { pattern: "(" } })).toThrow(/session_key\.pattern/);
  });

  it("parses faults with defaults", () => {
    expect(parseFault({ type: "drop" })).toEqual({ type: "drop", after_events: 0 });
    expect(parseFault({ type: "stream_error", after_events: 2 })).toMatchObject({ error_type: "overloaded_error" });
    expect(() => parseFault({ type: "error", status: 200 })).toThrow(/status/);
  });
});

describe("matchers", () => {
  it("checks the last user message's text", () => {
    const req = request({
      messages: [
        { role: "user", content: "first" },
        { role: "assistant", content: "reply" },
        { role: "user", content: [{ type: "text", text: "second question" }] },
      ],
    });
    expect(mismatch({ last_user_text_contains: "second" }, req)).toBeNull();
    expect(mismatch({ last_user_text_contains: "first" }, req)).toMatch(/last user message does not contain "first"/);
  });

  it("traces a tool_result to the tool it answers", () => {
    expect(mismatch({ tool_result_for: "bash" }, afterTool("bash", "ok"))).toBeNull();
    expect(mismatch({ tool_result_for: "read" }, afterTool("bash", "ok"))).toMatch(/no tool_result for tool "read"/);
    expect(mismatch({ tool_result_for: "bash" }, userSays("no tools here"))).not.toBeNull();
    expect(mismatch({ tool_result_for: "bash", tool_result_contains: "hello.txt" }, afterTool("bash", "hello.txt\n"))).toBeNull();
    expect(mismatch({ tool_result_contains: "missing" }, afterTool("bash", "hello.txt"))).not.toBeNull();
    expect(mismatch({ tool_result_is_error: true }, afterTool("bash", "boom", true))).toBeNull();
    expect(mismatch({ tool_result_is_error: true }, afterTool("bash", "fine"))).not.toBeNull();
  });

  it("checks declared tools, the system prompt, message count and streaming", () => {
    const req = userSays("hi", {
      tools: [
        { name: "bash", input_schema: {} },
        { type: "web_search_20250305", name: "web_search" },
      ],
      system: "You are agent-7",
      stream: true,
    });
    expect(mismatch({ tools_include: ["bash", "web_search"] }, req)).toBeNull();
    expect(mismatch({ tools_include: ["bash", "edit"] }, req)).toMatch(/lacks tools \["edit"\]/);
    expect(mismatch({ system_contains: "agent-7" }, req)).toBeNull();
    expect(mismatch({ system_contains: "agent-8" }, req)).not.toBeNull();
    expect(mismatch({ message_count: 1, stream: true }, req)).toBeNull();
    expect(mismatch({ message_count: 2 }, req)).not.toBeNull();
    expect(mismatch({ stream: false }, req)).not.toBeNull();
  });

  it("reads system text from blocks and from system-role messages", () => {
    const req = request({
      system: [{ type: "text", text: "block marker" }],
      messages: [
        { role: "system", content: "msg marker" },
        { role: "user", content: "x" },
      ],
    });
    expect(mismatch({ system_contains: "block marker" }, req)).toBeNull();
    expect(mismatch({ system_contains: "msg marker" }, req)).toBeNull();
  });
});

describe("ScriptState", () => {
  it("takes the earliest matching turn and reports exhaustion", () => {
    const s = state([
      { label: "greet", response: "a" },
      { match: { tool_result_for: "bash" }, response: "b" },
    ]);
    const first = s.select(userSays("hi"));
    expect(first.ok && first.lease.index).toBe(0);
    if (first.ok) first.lease.commit();
    const noMatch = s.select(userSays("hi again"));
    expect(noMatch.ok).toBe(false);
    expect(!noMatch.ok && noMatch.message).toMatch(/no remaining turn matches.*turn 1: last message has no tool_result for tool "bash"/);
    const second = s.select(afterTool("bash", "out"));
    expect(second.ok && second.lease.index).toBe(1);
    if (second.ok) second.lease.commit();
    const done = s.select(afterTool("bash", "out"));
    expect(!done.ok && done.message).toMatch(/script exhausted: all 2 turns are used up/);
  });

  it("reserves a turn while in flight and hands it back on release", () => {
    const s = state([{ response: "a" }, { response: "b" }]);
    const a = s.select(userSays("1"));
    const b = s.select(userSays("2"));
    expect([a.ok && a.lease.index, b.ok && b.lease.index]).toEqual([0, 1]);
    const c = s.select(userSays("3"));
    expect(!c.ok && c.message).toMatch(/script exhausted.*2 still being delivered/);
    if (a.ok) {
      a.lease.release();
      a.lease.commit(); // settling twice is a no-op: the first settle wins
    }
    const again = s.select(userSays("4"));
    expect(again.ok && again.lease.index).toBe(0);
    expect(s.unused().map((u) => u.index)).toEqual([0, 1]);
  });

  it("serves a turn `times` times", () => {
    const s = state([{ times: 3, response: "x" }]);
    for (let i = 0; i < 3; i++) {
      const sel = s.select(userSays("q"));
      expect(sel.ok).toBe(true);
      if (sel.ok) sel.lease.commit();
    }
    expect(s.select(userSays("q")).ok).toBe(false);
  });

  it("replays the script per session key", () => {
    const s = state({ turns: [{ response: "one" }, { response: "two" }], session_key: { pattern: "session=(\\w+)" } });
    const order: string[] = [];
    for (const who of ["a", "b", "a", "b"]) {
      const sel = s.select(userSays("hi", { system: `You serve session=${who}.` }));
      if (!sel.ok) throw new Error(sel.message);
      order.push(`${sel.lease.sessionKey}:${sel.lease.index}`);
      sel.lease.commit();
    }
    expect(order).toEqual(["a:0", "b:0", "a:1", "b:1"]);
    const more = s.select(userSays("hi", { system: "session=a" }));
    expect(!more.ok && more.message).toMatch(/script exhausted for session "a"/);
  });

  it("extracts session keys from metadata.user_id and the whole system prompt", () => {
    const req = userSays("x", { system: "sys", metadata: { user_id: "sesn_42" } });
    expect(sessionKeyOf({ from: "metadata.user_id" }, req)).toBe("sesn_42");
    expect(sessionKeyOf({ from: "system" }, req)).toBe("sys");
    expect(sessionKeyOf({ from: "system", pattern: "nomatch(\\d)" }, req)).toBe("");
  });
});

describe("FaultQueue", () => {
  it("hands each fault to one request, honouring its guard", () => {
    const q = new FaultQueue();
    q.push(parseFault({ type: "error", status: 529, match: { system_contains: "B" } }));
    q.push(parseFault({ type: "error", status: 429 }));
    expect(q.take(userSays("x", { system: "A" }))).toMatchObject({ status: 429 });
    expect(q.take(userSays("x", { system: "A" }))).toBeNull();
    expect(q.take(userSays("x", { system: "B" }))).toMatchObject({ status: 529 });
    expect(q.size).toBe(0);
  });
});

describe("buildResponse", () => {
  const req = userSays("hi");

  it("streams tool input as partial JSON that reassembles to the scripted object", () => {
    const input = { path: "/tmp/a b.txt", lines: [1, 2, 3], nested: { ok: true, note: 'quote " and \\ backslash' } };
    const spec = parseScript([{ response: { content: [{ type: "tool_use", name: "write", input }], chunk_chars: 5 } }]).turns[0]!.response!;
    const { message, events } = buildResponse(spec, req);
    const parts = events.flatMap((e) =>
      e.type === "content_block_delta" && e.delta.type === "input_json_delta" ? [e.delta.partial_json] : [],
    );
    expect(parts.length).toBeGreaterThan(3);
    expect(parts[0]).toBe("");
    expect(JSON.parse(parts.join(""))).toEqual(input);
    expect(message.stop_reason).toBe("tool_use");
    expect(message.content[0]).toMatchObject({ type: "tool_use", name: "write", input, id: expect.stringMatching(/^toolu_/) });
  });

  it("orders events as the Messages API does", () => {
    const spec = parseScript([
      {
        response: {
          content: [
            { type: "thinking", thinking: "plan", signature: "sig-1" },
            { type: "text", text: "answer" },
          ],
          usage: { input_tokens: 7, output_tokens: 9 },
        },
      },
    ]).turns[0]!.response!;
    const { events, message } = buildResponse(spec, req);
    expect(events.map((e) => (e.type === "content_block_delta" ? e.delta.type : e.type))).toEqual([
      "message_start",
      "ping",
      "content_block_start",
      "thinking_delta",
      "signature_delta",
      "content_block_stop",
      "content_block_start",
      "text_delta",
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
    expect(message.usage).toMatchObject({ input_tokens: 7, output_tokens: 9, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 });
    expect(message.stop_reason).toBe("end_turn");
  });

  it("chunks text into fixed-size pieces", () => {
    expect(chunk("abcdefg", 3)).toEqual(["abc", "def", "g"]);
    expect(chunk("", 3)).toEqual([]);
  });
});

describe("redactHeaders", () => {
  it("drops credential headers", () => {
    const h = new Headers({
      "x-api-key": "k",
      authorization: "Bearer t",
      "x-goog-token": "t",
      "anthropic-version": "v",
      "content-type": "application/json",
    });
    expect(redactHeaders(h)).toEqual({ "anthropic-version": "v", "content-type": "application/json" });
  });
});
