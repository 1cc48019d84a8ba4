/**
 * Context compaction end to end, on both backends: the scripted model
 * reports usage near a small configured window (OPENMA_CONTEXT_WINDOWS), so
 * the loop runs a summary turn, records `agent.thread_context_compacted`
 * (as the SDK types it) and goes on from summary + recent turns; a crash
 * right after the compaction rebuilds exactly the same context from the
 * log; a failing summary request leaves the conversation whole.
 */
import type { MessageParam } from "@anthropic-ai/sdk/resources/messages";
import type { ModelPort, ModelRequest } from "@openma/harness";
import { SUMMARY_INSTRUCTION } from "@openma/harness/compaction";
import { contextWindowsFromEnv } from "@openma/harness/context-window";
import { buildConversation, loadCompaction, summaryTurnText } from "@openma/harness/conversation";
import { type LoggedEvent, readNewEvents, scanLog } from "@openma/harness/log";
import { runTurn } from "@openma/harness/turn";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Harness, ofType, startHarness } from "./support.ts";

// A 1 000-token window: compaction starts at 800 reported tokens.
const contextWindows = contextWindowsFromEnv({ OPENMA_CONTEXT_WINDOWS: JSON.stringify({ "claude-test-1": 1000 }) });
const usage = (input: number, output: number) => ({ input_tokens: input, output_tokens: output });
const text = (t: string) => ({ type: "text", text: t });

/** Three turns of one session, the second reporting a conversation over the threshold, then a summary turn. */
function script(tag: string, summary: { response: string } | { error: { status: number; message: string } }) {
  const system = { system_contains: `agent ${tag}` };
  const reply = (n: string, input: number, output: number) => ({
    match: { ...system, last_user_text_contains: `${tag} ${n}` },
    response: { content: [text(`reply ${n}`)], usage: usage(input, output) },
  });
  return [
    reply("one", 300, 20),
    reply("two", 700, 150),
    { match: { ...system, last_user_text_contains: "about to be compacted" }, ...summary },
    reply("three", 120, 10),
    // Over the threshold again: the next message compacts the compacted conversation.
    reply("four", 880, 20),
    { match: { ...system, last_user_text_contains: "about to be compacted" }, response: { content: [text(`SUMMARY 2 of ${tag}`)] } },
    reply("five", 100, 10),
  ] as never[];
}

describe.each(BACKENDS)("context compaction on %s", (dialect) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(dialect, [
      ...script("alpha", { response: { content: [text("SUMMARY of alpha")], usage: usage(850, 40) } as never }),
      ...script("beta", { response: { content: [text("SUMMARY of beta")], usage: usage(850, 40) } as never }),
      ...script("gamma", { error: { status: 400, message: "summary refused" } }),
    ]);
  });
  afterAll(async () => {
    await h?.close();
  });

  const requestsOf = (sessionId: string) =>
    h.model.requests
      .map((r) => r.body as { metadata?: { user_id?: string }; messages: MessageParam[] })
      .filter((b) => b.metadata?.user_id === sessionId)
      .map((b) => b.messages);

  async function twoTurns(tag: string): Promise<string> {
    const agent = await h.agent([], { system: `You are agent ${tag}.` });
    const env = await h.environment("none");
    const id = await h.session(agent, env, `${tag} one`);
    expect(await h.run(id, { contextWindows })).toEqual({ type: "idle", stopReason: "end_turn" });
    await h.say(id, `${tag} two`);
    expect(await h.run(id, { contextWindows })).toEqual({ type: "idle", stopReason: "end_turn" });
    await h.say(id, `${tag} three`);
    return id;
  }

  it("summarizes before the next model call and goes on from summary + recent turns", async () => {
    const id = await twoTurns("alpha");
    expect(await h.run(id, { contextWindows })).toEqual({ type: "idle", stopReason: "end_turn" });
    const events = await h.events(id);
    const compacted = ofType(events, "agent.thread_context_compacted");
    expect(compacted).toEqual([{ id: expect.any(String), processed_at: expect.any(String), type: "agent.thread_context_compacted" }]);
    const types = events.map((e) => e.type);
    const at = types.indexOf("agent.thread_context_compacted");
    expect(types.lastIndexOf("user.message")).toBeLessThan(at);
    expect(types.lastIndexOf("agent.message")).toBeGreaterThan(at);

    const [, , summaryRequest, after] = requestsOf(id);
    // The summary turn saw the whole conversation before the pending message, then the instruction.
    expect(summaryRequest).toEqual([
      { role: "user", content: [text("alpha one")] },
      { role: "assistant", content: [text("reply one")] },
      { role: "user", content: [text("alpha two")] },
      { role: "assistant", content: [text("reply two")] },
      { role: "user", content: [text(SUMMARY_INSTRUCTION)] },
    ]);
    // The next request: the summary, then the recent turn verbatim.
    expect(after).toEqual([{ role: "user", content: [text(summaryTurnText("SUMMARY of alpha")), text("alpha three")] }]);
    // The summary turn is paid for like any model call.
    const last = ofType(events, "session.usage").at(-1) as { usage?: unknown } | undefined;
    expect(last?.usage).toMatchObject({ input_tokens: 300 + 700 + 850 + 120, output_tokens: 20 + 150 + 40 + 10 });

    // A later turn under the threshold keeps building on the compacted conversation.
    await h.say(id, "alpha four");
    expect(await h.run(id, { contextWindows })).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(requestsOf(id).at(-1)).toEqual([
      { role: "user", content: [text(summaryTurnText("SUMMARY of alpha")), text("alpha three")] },
      { role: "assistant", content: [text("reply three")] },
      { role: "user", content: [text("alpha four")] },
    ]);
    expect(ofType(await h.events(id), "agent.thread_context_compacted")).toHaveLength(1);

    // Reply four reported 900 tokens: the second compaction summarizes the first summary and what followed it.
    await h.say(id, "alpha five");
    expect(await h.run(id, { contextWindows })).toEqual({ type: "idle", stopReason: "end_turn" });
    const [secondSummary, afterSecond] = requestsOf(id).slice(-2);
    expect(secondSummary).toEqual([
      { role: "user", content: [text(summaryTurnText("SUMMARY of alpha")), text("alpha three")] },
      { role: "assistant", content: [text("reply three")] },
      { role: "user", content: [text("alpha four")] },
      { role: "assistant", content: [text("reply four")] },
      { role: "user", content: [text(SUMMARY_INSTRUCTION)] },
    ]);
    expect(afterSecond).toEqual([{ role: "user", content: [text(summaryTurnText("SUMMARY 2 of alpha")), text("alpha five")] }]);
    expect(ofType(await h.events(id), "agent.thread_context_compacted")).toHaveLength(2);
  });

  it("rebuilds exactly the pre-crash context from the log after a crash", async () => {
    const id = await twoTurns("beta");
    // The process "dies" with the first request after the compaction in flight: nothing of it lands.
    const crash = new AbortController();
    const sent: ModelRequest[] = [];
    const dying: ModelPort = {
      retry: h.deps.model.retry,
      send: async (request, signal, observer) => {
        if (request.messages.length === 1) {
          sent.push(request);
          crash.abort();
          return { type: "aborted" };
        }
        return h.deps.model.send(request, signal, observer);
      },
    };
    expect(await runTurn({ ...h.deps, model: dying, contextWindows }, id, crash.signal)).toEqual({ type: "interrupted" });
    expect(sent).toHaveLength(1);
    const before = sent[0]?.messages;
    expect(before).toEqual([{ role: "user", content: [text(summaryTurnText("SUMMARY of beta")), text("beta three")] }]);

    // Rebuilt from the log alone, as a fresh process would.
    const events: LoggedEvent[] = [];
    await readNewEvents(h.t.store.storage, id, events);
    const state = scanLog(events);
    const rebuilt = await buildConversation(h.t.store.storage, state, new Map(), {
      compaction: await loadCompaction(h.t.store.storage, id, state),
    });
    expect(rebuilt).toEqual(before);

    // A fresh run sends that same context, without summarizing again.
    const summaries = requestsOf(id).length;
    expect(await h.run(id, { contextWindows })).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(requestsOf(id)).toHaveLength(summaries + 1);
    expect(requestsOf(id).at(-1)).toEqual(before);
    expect(ofType(await h.events(id), "agent.thread_context_compacted")).toHaveLength(1);
  });

  it("goes on with the whole conversation when the summary request fails", async () => {
    const id = await twoTurns("gamma");
    expect(await h.run(id, { contextWindows })).toEqual({ type: "idle", stopReason: "end_turn" });
    const events = await h.events(id);
    expect(ofType(events, "agent.thread_context_compacted")).toHaveLength(0);
    const error = ofType(events, "session.error").at(-1) as { error?: { message?: string; retry_status?: unknown } };
    expect(error.error?.message).toMatch(/^context compaction failed, the conversation goes on uncompacted: .*summary refused/);
    expect(requestsOf(id).at(-1)).toHaveLength(5);
    expect(ofType(events, "agent.message").at(-1)?.content).toEqual([text("reply three")]);
  });
});
