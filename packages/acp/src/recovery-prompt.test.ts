import { describe, expect, it } from "vitest";
import { buildRecoveryPrompt, type CanonicalEvent, MIN_RECOVERY_BUDGET, recoveryHistoryLines } from "./recovery-prompt.ts";

const text = (t: string) => [{ type: "text", text: t }];

const LOG: CanonicalEvent[] = [
  { id: "e1", type: "user.message", content: text("old question") },
  { id: "e2", type: "agent.thread_context_compacted", summary: "we set up the repo" },
  { id: "e3", type: "user.message", content: [...text("write the file"), { type: "image", source: { type: "file", file_id: "file_1" } }] },
  { id: "e4", type: "agent.tool_use", name: "bash", input: { command: "rm -rf /secret-side-effect" } },
  { id: "e5", type: "agent.tool_result", tool_use_id: "e4", content: text("done"), is_error: false },
  { id: "e6", type: "agent.mcp_tool_use", name: "search", mcp_server_name: "docs", input: { q: "SECRET-INPUT" } },
  { id: "e7", type: "agent.mcp_tool_result", mcp_tool_use_id: "e6", content: text("nothing"), is_error: true },
  { id: "e8", type: "agent.message", content: text("I wrote it") },
  { id: "e9", type: "session.status_idle" },
  { id: "e10", type: "user.message", content: text("now test it") },
];

describe("recovery history", () => {
  it("starts at the latest compaction, keeps results by name, never tool inputs, drops the current request", () => {
    expect(recoveryHistoryLines(LOG, "now test it")).toEqual([
      "User: <conversation-summary>\nwe set up the repo\n</conversation-summary>",
      "User: write the file\n[image: file_1]",
      "Completed tool bash: done",
      "Failed tool docs/search: nothing",
      "Assistant: I wrote it",
    ]);
  });

  it("builds the envelope with the reason and the current request", () => {
    const prompt = buildRecoveryPrompt({ reason: "native-state-missing", events: LOG, currentPrompt: "now test it" });
    expect(prompt.startsWith('<openma-recovery version="1" reason="native-state-missing">')).toBe(true);
    expect(prompt).toContain("Do not repeat completed side effects.");
    expect(prompt).toContain("Current request:\nnow test it\n</openma-recovery>");
    expect(prompt).not.toContain("rm -rf");
    expect(prompt).not.toContain("SECRET-INPUT");
    expect(prompt).not.toContain("old question");
  });

  it("stays within budget: newest history first, omitted marker, middle-truncated request", () => {
    const events: CanonicalEvent[] = [];
    for (let i = 0; i < 200; i++) {
      events.push({ id: `u${i}`, type: "user.message", content: text(`question ${i} ${"x".repeat(100)}`) });
      events.push({ id: `a${i}`, type: "agent.message", content: text(`answer ${i}`) });
    }
    const current = `BEGIN${"y".repeat(5000)}END`;
    for (const budget of [MIN_RECOVERY_BUDGET, 2000, 8000]) {
      const prompt = buildRecoveryPrompt({ reason: "native-state-stale", events, currentPrompt: current, budget });
      expect(prompt.length).toBeLessThanOrEqual(budget);
      expect(prompt).toContain("… earlier history omitted …");
      expect(prompt).toContain("BEGIN");
      expect(prompt).toContain("END\n</openma-recovery>");
      expect(prompt).toContain("… [truncated] …");
      expect(prompt).toContain("answer 199");
      expect(prompt).not.toContain("answer 0\n");
    }
    expect(buildRecoveryPrompt({ reason: "native-state-stale", events, currentPrompt: "hi", budget: 10 }).length).toBeLessThanOrEqual(
      MIN_RECOVERY_BUDGET,
    );
  });

  it("keeps a truncated newest line when even one does not fit", () => {
    const events = [{ id: "a", type: "agent.message", content: text("z".repeat(50_000)) }];
    const prompt = buildRecoveryPrompt({ reason: "native-state-stale", events, currentPrompt: "go", budget: 4000 });
    expect(prompt.length).toBeLessThanOrEqual(4000);
    expect(prompt).toContain("Assistant: zzz");
  });
});
