import { describe, expect, it } from "vitest";
import { modelRequestEnd, TurnProjection } from "./projection.ts";

describe("TurnProjection", () => {
  it("joins chunks, pairs tool calls with results, keeps occupancy out of the events", () => {
    let n = 0;
    const p = new TurnProjection(() => `e${++n}`);
    p.apply({ sessionUpdate: "agent_thought_chunk", content: { type: "text", text: "hmm" } });
    p.apply({ sessionUpdate: "agent_message_chunk", content: { type: "text", text: "Hel" } });
    p.apply({ sessionUpdate: "agent_message_chunk", content: { type: "text", text: "lo" } });
    p.apply({
      sessionUpdate: "tool_call",
      toolCallId: "t1",
      title: "Bash",
      kind: "execute",
      status: "pending",
      rawInput: { command: "ls" },
    });
    p.apply({ sessionUpdate: "tool_call_update", toolCallId: "t1", status: "in_progress" });
    p.apply({
      sessionUpdate: "tool_call_update",
      toolCallId: "t1",
      status: "completed",
      content: [{ type: "content", content: { type: "text", text: "a.txt" } }],
    });
    p.apply({ sessionUpdate: "tool_call_update", toolCallId: "t1", status: "completed" });
    p.apply({ sessionUpdate: "tool_call", toolCallId: "t2", title: "Edit", status: "failed" });
    p.apply({ sessionUpdate: "usage_update", used: 1200, size: 200000 });
    p.apply({ sessionUpdate: "agent_message_chunk", content: { type: "text", text: "done" } });
    expect(p.take()).toEqual([
      { id: "e1", type: "agent.thinking" },
      { id: "e2", type: "agent.message", content: [{ type: "text", text: "Hello" }] },
      { id: "e3", type: "agent.tool_use", name: "Bash", input: { command: "ls" } },
      { id: "e4", type: "agent.tool_result", tool_use_id: "e3", content: [{ type: "text", text: "a.txt" }], is_error: false },
      { id: "e5", type: "agent.tool_use", name: "Edit", input: {} },
      { id: "e6", type: "agent.tool_result", tool_use_id: "e5", content: [{ type: "text", text: "(no output)" }], is_error: true },
      { id: "e7", type: "agent.message", content: [{ type: "text", text: "done" }] },
    ]);
    expect(p.occupancy).toEqual({ used: 1200, size: 200000 });
  });

  it("maps PromptResponse.usage to model_usage, with cache tokens", () => {
    expect(
      modelRequestEnd("s1", {
        stopReason: "end_turn",
        usage: { inputTokens: 101, outputTokens: 7, cachedReadTokens: 5, cachedWriteTokens: 3, totalTokens: 116 },
      }),
    ).toEqual({
      model_request_start_id: "s1",
      is_error: false,
      model_usage: { input_tokens: 101, output_tokens: 7, cache_read_input_tokens: 5, cache_creation_input_tokens: 3 },
    });
    expect(modelRequestEnd("s2", null)).toMatchObject({ is_error: true, model_usage: { input_tokens: 0 } });
  });
});
