/** Folding the session's usage from its log: each thread's share of the running total. */
import { describe, expect, it } from "vitest";
import { type LoggedEvent, scanLog } from "./log.ts";

const snapshot = (seq: number, input: number, output: number, threadId: string | null): LoggedEvent => ({
  seq,
  id: `sevt_${seq}`,
  type: "session.usage",
  body: { usage: { input_tokens: input, output_tokens: output, server_tool_use: { web_search_requests: seq >= 3 ? 1 : 0 } } },
  threadId,
});

describe("scanLog usage", () => {
  it("credits each snapshot's increase to the thread that appended it, the shares adding up to the total", () => {
    // Running totals: the primary thread, a subagent, the primary again, the subagent again.
    const state = scanLog([
      snapshot(1, 100, 10, null),
      snapshot(2, 130, 17, "sthr_a"),
      snapshot(3, 150, 20, null),
      snapshot(4, 190, 29, "sthr_a"),
    ]);
    expect(state.usage).toMatchObject({ input_tokens: 190, output_tokens: 29, server_tool_use: { web_search_requests: 1 } });
    expect(state.threadUsage.get(null)).toMatchObject({
      input_tokens: 120,
      output_tokens: 13,
      server_tool_use: { web_search_requests: 1 },
    });
    expect(state.threadUsage.get("sthr_a")).toMatchObject({
      input_tokens: 70,
      output_tokens: 16,
      server_tool_use: { web_search_requests: 0 },
    });
  });

  it("counts events without a thread as the primary thread's", () => {
    const { threadId: _, ...untagged } = snapshot(1, 5, 1, null);
    expect([...scanLog([untagged]).threadUsage.keys()]).toEqual([null]);
  });
});
