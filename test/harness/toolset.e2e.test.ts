/** A multi-step conversation that uses every toolset tool on the subprocess driver, with usage accounting. */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Harness, ofType, startHarness, TOOLSET } from "./support.ts";

const usage = (input: number, output: number, cacheRead = 0, cacheWrite = 0) => ({
  input_tokens: input,
  output_tokens: output,
  cache_read_input_tokens: cacheRead,
  cache_creation_input_tokens: cacheWrite,
});

const toolTurn = (after: string | null, name: string, input: Record<string, unknown>, u = usage(10, 5)) => ({
  ...(after ? { match: { tool_result_for: after } } : { match: { last_user_text_contains: "build the notes" } }),
  response: { content: [{ type: "tool_use" as const, name, input }], usage: u },
});

describe.each(BACKENDS)("harness toolset on %s", (dialect) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(dialect, [
      toolTurn(null, "bash", { command: "echo hello; mkdir -p src; printf 'oops' >&2; true" }, usage(100, 20, 50, 7)),
      toolTurn("bash", "write", { file_path: "src/notes.txt", content: "alpha\nbeta\n" }),
      toolTurn("write", "read", { file_path: "src/notes.txt" }),
      toolTurn("read", "edit", { file_path: "src/notes.txt", old_string: "beta", new_string: "gamma" }),
      toolTurn("edit", "glob", { pattern: "**/*.txt" }),
      toolTurn("glob", "grep", { pattern: "gam+a" }),
      { match: { tool_result_for: "grep" }, response: { content: [{ type: "text", text: "All done." }], usage: usage(30, 3) } },
    ]);
  });
  afterAll(async () => h?.close());

  it("runs bash, write, read, edit, glob and grep and ends the turn idle", async () => {
    const agentId = await h.agent([TOOLSET]);
    const envId = await h.environment("cloud");
    const sessionId = await h.session(agentId, envId, "build the notes");
    expect(await h.needsTurn(sessionId)).toBe(true);

    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(await h.needsTurn(sessionId)).toBe(false);

    const events = await h.events(sessionId);
    const toolTypes = ["agent.tool_use", "span.model_request_end", "session.usage", "agent.tool_result", "span.model_request_start"];
    expect(events.map((e) => e.type)).toEqual([
      "user.message",
      "session.status_running",
      "span.model_request_start",
      ...toolTypes,
      ...toolTypes,
      ...toolTypes,
      ...toolTypes,
      ...toolTypes,
      ...toolTypes,
      "agent.message",
      "span.model_request_end",
      "session.usage",
      "session.status_idle",
    ]);
    const workdir = h.driver.portFor(sessionId).workdir;
    const uses = ofType(events, "agent.tool_use");
    expect(uses.map((u) => u.name)).toEqual(["bash", "write", "read", "edit", "glob", "grep"]);
    for (const u of uses) expect(u).toMatchObject({ evaluated_permission: "allow", evaluation: { type: "always_allow" } });
    const results = ofType(events, "agent.tool_result");
    expect(results.map((r) => r.tool_use_id)).toEqual(uses.map((u) => u.id));
    expect(results.map((r) => [(r.content as Array<{ text: string }>)[0]?.text, r.is_error])).toEqual([
      ["hello\noops", false],
      ["wrote 11 bytes to src/notes.txt", false],
      ["alpha\nbeta\n", false],
      ["edited src/notes.txt (1 replacement(s))", false],
      [join(workdir, "src/notes.txt"), false],
      [`${join(workdir, "src/notes.txt")}:2:gamma`, false],
    ]);
    expect(readFileSync(join(workdir, "src/notes.txt"), "utf8")).toBe("alpha\ngamma\n");
    expect(ofType(events, "agent.message")[0]?.content).toEqual([{ type: "text", text: "All done." }]);
    expect(ofType(events, "session.status_idle")[0]).toMatchObject({ stop_reason: { type: "end_turn" }, stop_details: null });

    // Each span end carries its request's usage and points at its start; session.usage is cumulative.
    const starts = ofType(events, "span.model_request_start");
    const ends = ofType(events, "span.model_request_end");
    expect(ends.map((e) => e.model_request_start_id)).toEqual(starts.map((s) => s.id));
    expect(ends[0]).toMatchObject({ is_error: false, model_usage: usage(100, 20, 50, 7) });
    const last = ofType(events, "session.usage").at(-1);
    expect(last?.usage).toEqual({
      input_tokens: 100 + 5 * 10 + 30,
      output_tokens: 20 + 5 * 5 + 3,
      cache_read_input_tokens: 50,
      cache_creation: { ephemeral_5m_input_tokens: 7, ephemeral_1h_input_tokens: 0 },
      server_tool_use: { web_fetch_requests: 0, web_search_requests: 0 },
      active_seconds: expect.any(Number),
    });
    const session = await h.t.client.beta.sessions.retrieve(sessionId);
    expect(session.status).toBe("idle");
    // The session's usage is the last snapshot, with the running time measured up to the idle.
    expect({ ...session.usage, active_seconds: 0 }).toEqual({ ...(last?.usage as object), active_seconds: 0 });

    // The model saw a well-formed conversation: system prompt, tools, and every result answering its tool_use.
    const lastRequest = h.model.requests.at(-1)?.body as { system: string; tools: Array<{ name: string }>; messages: unknown[] };
    expect(lastRequest.system).toBe("You are a test agent.");
    expect(lastRequest.tools.map((t) => t.name)).toEqual(["bash", "read", "write", "edit", "glob", "grep"]);
    expect(lastRequest.messages).toHaveLength(13);
    expect(lastRequest.messages.at(-1)).toEqual({
      role: "user",
      content: [
        { type: "tool_result", tool_use_id: uses[5]?.id, content: [{ type: "text", text: `${join(workdir, "src/notes.txt")}:2:gamma` }] },
      ],
    });
    expect(h.model.unusedTurns()).toEqual([]);
  });
});
