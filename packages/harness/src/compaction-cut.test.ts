import { describe, expect, it } from "vitest";
import { compactionCut, compactionDue } from "./compaction-cut.ts";
import { type LoggedEvent, scanLog } from "./log.ts";

let seq = 0;
const ev = (type: string, body: Record<string, unknown> = {}, id = `e${seq + 1}`): LoggedEvent => ({ seq: ++seq, id, type, body });
const user = (t: string) => ev("user.message", { content: [{ type: "text", text: t }] });
const reply = (t: string) => ev("agent.message", { content: [{ type: "text", text: t }] });
const use = (id: string) => ev("agent.tool_use", { name: "web_search", input: {} }, id);
const result = (id: string) => ev("agent.tool_result", { tool_use_id: id, content: [] });
const end = (input: number) => ev("span.model_request_end", { is_error: false, model_usage: { input_tokens: input, output_tokens: 0 } });

describe("where a conversation is cut", () => {
  it("keeps the latest user input and everything after it", () => {
    seq = 0;
    const events = [user("one"), reply("a"), user("two"), reply("b"), user("three")];
    expect(compactionCut(scanLog(events), 0)).toBe(5);
  });

  it("in one long tool loop, keeps the latest assistant turn whose calls are all answered", () => {
    seq = 0;
    const events = [user("go"), use("t1"), result("t1"), use("t2"), result("t2"), use("t3"), result("t3")];
    // t3's call (seq 6) starts the kept part; a cut at a result would separate it from its call.
    expect(compactionCut(scanLog(events), 0)).toBe(6);
  });

  it("never cuts between a call and a result that landed after it", () => {
    seq = 0;
    // A call answered only after a later user message: cutting at that message would orphan the result.
    const events = [user("go"), use("t1"), user("also this"), result("t1")];
    expect(compactionCut(scanLog(events), 0)).toBe(2);
    // With nothing before the call to summarize, there is no cut at all.
    expect(compactionCut(scanLog(events), 2)).toBeNull();
  });

  it("needs something to summarize after the previous cut", () => {
    seq = 0;
    const events = [user("one"), reply("a"), user("two")];
    expect(compactionCut(scanLog(events), 3)).toBeNull();
    expect(compactionCut(scanLog(events), 2)).toBe(3);
  });

  it("is due only at or above the threshold, and not again where it failed", () => {
    seq = 0;
    const events = [user("one"), reply("a"), end(900), user("two")];
    const state = scanLog(events);
    expect(state.contextTokens).toBe(900);
    expect(compactionDue(state, { threshold: 901, keptFrom: 0 })).toBeNull();
    expect(compactionDue(state, { threshold: 900, keptFrom: 0 })).toBe(4);
    expect(compactionDue(state, undefined)).toBeNull();
    state.failedCompactions.add(state.lastContentSeq);
    expect(compactionDue(state, { threshold: 900, keptFrom: 0 })).toBeNull();
  });
});
