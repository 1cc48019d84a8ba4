/** Custom tools, tool confirmations (allow / deny) and interrupts, end to end through the SDK and runTurn. */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { silentLogger } from "@openma/api";
import type { ExecInput, SandboxResolver, ToolSandboxPort } from "@openma/contract";
import { DENIED_BY_USER } from "@openma/harness";
import { ManualScheduler, startScriptedModel } from "@openma/scripted-model";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hostProbes, openBackend, sessionSandboxes } from "../../apps/openma/src/sandbox.ts";
import { countTypes, type Harness, MODEL_KEY, modelPort, ofType, startHarness, TOOLSET } from "./support.ts";

const LOOKUP = {
  type: "custom",
  name: "lookup",
  description: "Look a thing up.",
  input_schema: { type: "object", properties: { q: { type: "string" } } },
};
const ASK_TOOLSET = { type: "agent_toolset_20260401", default_config: { permission_policy: { type: "always_ask" } } };
const text = (t: string) => ({ content: [{ type: "text" as const, text: t }] });

describe.each(BACKENDS)("harness actions on %s", (dialect) => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness(dialect);
  });
  afterAll(async () => h?.close());

  it("custom tool → requires_action → user.custom_tool_result → the turn continues", async () => {
    h.model.load([
      {
        match: { last_user_text_contains: "look it up" },
        response: { content: [{ type: "tool_use", name: "lookup", input: { q: "x" } }] },
      },
      { match: { tool_result_for: "lookup", tool_result_contains: "42" }, response: text("The answer is 42.") },
    ]);
    const sessionId = await h.session(await h.agent([TOOLSET, LOOKUP]), await h.environment("cloud"), "look it up");
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "requires_action" });
    let events = await h.events(sessionId);
    const use = ofType(events, "agent.custom_tool_use")[0];
    expect(use).toMatchObject({ name: "lookup", input: { q: "x" } });
    expect(use).not.toHaveProperty("evaluated_permission");
    expect(events.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "requires_action", event_ids: [use?.id] } });

    // Nothing to do until the client answers; running again appends nothing.
    expect(await h.needsTurn(sessionId)).toBe(false);
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "requires_action" });
    expect(await h.events(sessionId)).toHaveLength(events.length);

    await h.t.client.beta.sessions.events.send(sessionId, {
      events: [{ type: "user.custom_tool_result", custom_tool_use_id: use?.id ?? "", content: [{ type: "text", text: "42" }] }],
    });
    expect(await h.needsTurn(sessionId)).toBe(true);
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    events = await h.events(sessionId);
    expect(events.slice(-7).map((e) => e.type)).toEqual([
      "user.custom_tool_result",
      "session.status_running",
      "span.model_request_start",
      "agent.message",
      "span.model_request_end",
      "session.usage",
      "session.status_idle",
    ]);
    expect(h.model.requests.at(-1)?.body).toMatchObject({
      messages: [
        { role: "user", content: [{ type: "text", text: "look it up" }] },
        { role: "assistant", content: [{ type: "tool_use", id: use?.id, name: "lookup", input: { q: "x" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: use?.id, content: [{ type: "text", text: "42" }] }] },
      ],
    });
  });

  it("always_ask holds the call until a confirmation allows it, then runs it", async () => {
    h.model.load([
      {
        match: { last_user_text_contains: "may I" },
        response: { content: [{ type: "tool_use", name: "bash", input: { command: "echo allowed" } }] },
      },
      { match: { tool_result_for: "bash", tool_result_contains: "allowed" }, response: text("Ran it.") },
    ]);
    const sessionId = await h.session(await h.agent([ASK_TOOLSET]), await h.environment("cloud"), "may I");
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "requires_action" });
    const use = ofType(await h.events(sessionId), "agent.tool_use")[0];
    expect(use).toMatchObject({ name: "bash", evaluated_permission: "ask", evaluation: { type: "always_ask" } });
    expect(ofType(await h.events(sessionId), "agent.tool_result")).toEqual([]);

    await h.t.client.beta.sessions.events.send(sessionId, {
      events: [{ type: "user.tool_confirmation", tool_use_id: use?.id ?? "", result: "allow" }],
    });
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    const result = ofType(await h.events(sessionId), "agent.tool_result")[0];
    expect(result).toMatchObject({ tool_use_id: use?.id, is_error: false, content: [{ type: "text", text: "allowed" }] });
  });

  it("a denied confirmation records an error result with the deny message and never runs the tool", async () => {
    h.model.load([
      {
        match: { last_user_text_contains: "delete" },
        response: { content: [{ type: "tool_use", name: "bash", input: { command: "touch ran.txt" } }] },
      },
      { match: { tool_result_for: "bash", tool_result_is_error: true }, response: text("Understood, not running it.") },
      {
        match: { last_user_text_contains: "again" },
        response: { content: [{ type: "tool_use", name: "write", input: { file_path: "x", content: "" } }] },
      },
      { match: { tool_result_contains: DENIED_BY_USER }, response: text("Fine.") },
    ]);
    const sessionId = await h.session(await h.agent([ASK_TOOLSET]), await h.environment("cloud"), "delete it");
    await h.run(sessionId);
    const use = ofType(await h.events(sessionId), "agent.tool_use")[0];
    await h.t.client.beta.sessions.events.send(sessionId, {
      events: [{ type: "user.tool_confirmation", tool_use_id: use?.id ?? "", result: "deny", deny_message: "not today" }],
    });
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(ofType(await h.events(sessionId), "agent.tool_result")[0]).toMatchObject({
      tool_use_id: use?.id,
      is_error: true,
      content: [{ type: "text", text: "not today" }],
    });
    expect(h.driver.portFor(sessionId).workdir).toBeTruthy();
    const listing = await h.driver
      .portFor(sessionId)
      .list({ path: h.driver.portFor(sessionId).workdir, recursive: true, maxEntries: 10, signal: new AbortController().signal });
    expect(listing).toEqual({ type: "ok", entries: [], truncated: false });

    // Without a deny_message the result says the user denied it.
    await h.say(sessionId, "again");
    await h.run(sessionId);
    const second = ofType(await h.events(sessionId), "agent.tool_use")[1];
    await h.t.client.beta.sessions.events.send(sessionId, {
      events: [{ type: "user.tool_confirmation", tool_use_id: second?.id ?? "", result: "deny" }],
    });
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(ofType(await h.events(sessionId), "agent.tool_result")[1]).toMatchObject({
      is_error: true,
      content: [{ type: "text", text: DENIED_BY_USER }],
    });
  });

  it("answering one of two blocking calls re-emits requires_action with the remainder", async () => {
    h.model.load([
      {
        match: { last_user_text_contains: "two things" },
        response: {
          content: [
            { type: "tool_use", name: "lookup", input: { q: "a" } },
            { type: "tool_use", name: "bash", input: { command: "echo b" } },
          ],
        },
      },
      { match: { tool_result_for: "lookup" }, response: text("Both done.") },
    ]);
    const sessionId = await h.session(await h.agent([ASK_TOOLSET, LOOKUP]), await h.environment("cloud"), "two things");
    await h.run(sessionId);
    let events = await h.events(sessionId);
    const custom = ofType(events, "agent.custom_tool_use")[0]?.id ?? "";
    const bash = ofType(events, "agent.tool_use")[0]?.id ?? "";
    expect(events.at(-1)).toMatchObject({ stop_reason: { type: "requires_action", event_ids: [custom, bash] } });
    await h.t.client.beta.sessions.events.send(sessionId, { events: [{ type: "user.custom_tool_result", custom_tool_use_id: custom }] });
    expect(await h.needsTurn(sessionId)).toBe(true);
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "requires_action" });
    events = await h.events(sessionId);
    expect(events.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "requires_action", event_ids: [bash] } });
    await h.t.client.beta.sessions.events.send(sessionId, {
      events: [{ type: "user.tool_confirmation", tool_use_id: bash, result: "allow" }],
    });
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(h.model.requests.at(-1)?.body).toMatchObject({
      messages: [
        {},
        {},
        {
          role: "user",
          content: [
            { type: "tool_result", tool_use_id: custom },
            { type: "tool_result", tool_use_id: bash, content: [{ type: "text", text: "b" }] },
          ],
        },
      ],
    });
  });

  it("an interrupt while the session waits for a confirmation ends the turn; the next message continues", async () => {
    h.model.load([
      {
        match: { last_user_text_contains: "risky" },
        response: { content: [{ type: "tool_use", name: "bash", input: { command: "echo no" } }] },
      },
      { match: { last_user_text_contains: "instead" }, response: text("OK, something else.") },
    ]);
    const sessionId = await h.session(await h.agent([ASK_TOOLSET]), await h.environment("cloud"), "risky");
    await h.run(sessionId);
    const use = ofType(await h.events(sessionId), "agent.tool_use")[0];
    await h.t.client.beta.sessions.events.send(sessionId, { events: [{ type: "user.interrupt" }] });
    expect(await h.needsTurn(sessionId)).toBe(true);
    expect(await h.run(sessionId)).toEqual({ type: "interrupted" });
    expect((await h.events(sessionId)).at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "end_turn" } });
    expect(await h.needsTurn(sessionId)).toBe(false);

    // A confirmation for the abandoned call changes nothing.
    await h.t.client.beta.sessions.events.send(sessionId, {
      events: [{ type: "user.tool_confirmation", tool_use_id: use?.id ?? "", result: "allow" }],
    });
    expect(await h.needsTurn(sessionId)).toBe(false);

    await h.say(sessionId, "do this instead");
    expect(await h.run(sessionId)).toEqual({ type: "idle", stopReason: "end_turn" });
    expect(ofType(await h.events(sessionId), "agent.tool_result")).toEqual([]);
    const messages = (h.model.requests.at(-1)?.body as { messages: unknown[] } | undefined)?.messages;
    expect(messages).toMatchObject([
      { role: "user" },
      { role: "assistant", content: [{ type: "tool_use", id: use?.id }] },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: use?.id, is_error: true },
          { type: "text", text: "do this instead" },
        ],
      },
    ]);
  });

  it("an interrupt during the model stream cancels the request and idles the session", async () => {
    const scheduler = new ManualScheduler();
    const slow = await startScriptedModel({
      apiKey: MODEL_KEY,
      scheduler,
      script: [{ delay: { first_byte_ms: 60_000 }, response: text("too late") }],
    });
    try {
      const sessionId = await h.session(await h.agent([TOOLSET]), await h.environment("cloud"), "think hard");
      const turn = h.run(sessionId, { model: modelPort(slow.url, []) });
      await scheduler.untilSleeping();
      await h.t.client.beta.sessions.events.send(sessionId, { events: [{ type: "user.interrupt" }] });
      expect(await turn).toEqual({ type: "interrupted" });
      const events = await h.events(sessionId);
      expect(events.map((e) => e.type)).toEqual([
        "user.message",
        "session.status_running",
        "span.model_request_start",
        "user.interrupt",
        "span.model_request_end",
        "session.status_idle",
      ]);
      expect(ofType(events, "span.model_request_end")[0]).toMatchObject({ is_error: null });
      expect(await h.needsTurn(sessionId)).toBe(false);
    } finally {
      await slow.close();
    }
  });

  it("terminated sessions never run: archiving mid-request stops the turn and nothing follows the termination", async () => {
    const scheduler = new ManualScheduler();
    const slow = await startScriptedModel({
      apiKey: MODEL_KEY,
      scheduler,
      script: [{ delay: { first_byte_ms: 60_000 }, response: text("never") }],
    });
    try {
      const sessionId = await h.session(await h.agent([TOOLSET]), await h.environment("cloud"), "work");
      const turn = h.run(sessionId, { model: modelPort(slow.url, []) });
      await scheduler.untilSleeping();
      await h.t.client.beta.sessions.archive(sessionId);
      expect(await turn).toMatchObject({ type: "failed" });
      const events = await h.events(sessionId);
      expect(events.at(-1)?.type).toBe("session.status_terminated");
      expect(await h.needsTurn(sessionId)).toBe(false);
      expect(await h.run(sessionId)).toMatchObject({ type: "failed" });
      expect(await h.events(sessionId)).toHaveLength(events.length);
    } finally {
      await slow.close();
    }
  });

  it("a deleted session is not found and not run", async () => {
    const sessionId = await h.session(await h.agent([TOOLSET]), await h.environment("cloud"), "bye");
    await h.t.client.beta.sessions.delete(sessionId);
    expect(await h.needsTurn(sessionId)).toBe(false);
    expect(await h.run(sessionId)).toEqual({ type: "failed", error: `session ${sessionId} was not found` });
  });

  it("an interrupt during a running tool kills it and idles the session", async () => {
    h.model.load([
      { response: { content: [{ type: "tool_use", name: "bash", input: { command: "echo started; sleep 30; echo finished" } }] } },
    ]);
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    // The real driver, with its output observed so the test knows the command is running.
    const observed: SandboxResolver = {
      async resolve(request) {
        const resolved = await h.driver.resolve(request);
        if (resolved.type !== "ready") return resolved;
        const port = resolved.port;
        const wrapped: ToolSandboxPort = {
          workdir: port.workdir,
          exec: (input: ExecInput) =>
            port.exec({ ...input, onOutput: (_s, chunk) => Buffer.from(chunk).toString().includes("started") && started() }),
          stat: (i) => port.stat(i),
          readFile: (i) => port.readFile(i),
          writeFile: (i) => port.writeFile(i),
          list: (i) => port.list(i),
          // `bash` runs in the persistent shell: observe that process's output.
          spawnProcess: (input) =>
            (port.spawnProcess as NonNullable<ToolSandboxPort["spawnProcess"]>)({
              ...input,
              onOutput: (stream, chunk) => {
                if (Buffer.from(chunk).toString().includes("started")) started();
                input.onOutput(stream, chunk);
              },
            }),
        };
        return { type: "ready", port: wrapped };
      },
    };
    const sessionId = await h.session(await h.agent([TOOLSET]), await h.environment("cloud"), "long job");
    const turn = h.run(sessionId, { sandboxes: observed });
    await running;
    await h.t.client.beta.sessions.events.send(sessionId, { events: [{ type: "user.interrupt" }] });
    expect(await turn).toEqual({ type: "interrupted" });
    const events = await h.events(sessionId);
    expect(ofType(events, "agent.tool_result")[0]).toMatchObject({
      is_error: true,
      content: [{ type: "text", text: "bash: aborted (the shell was stopped; the next call starts a new one)" }],
    });
    expect(events.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "end_turn" } });
    expect(countTypes(events.map((e) => e.type))["span.model_request_start"]).toBe(1);
  });

  it("a sandbox refused with a session error (the environment's packages) records session.error and an error tool result", async () => {
    h.model.load([
      { response: { content: [{ type: "tool_use", name: "bash", input: { command: "jq --help" } }] } },
      { response: { content: [{ type: "text", text: "the sandbox could not start" }] } },
    ]);
    const env = await h.t.client.beta.environments.create({
      name: "env-packages",
      config: { type: "cloud", packages: { apt: ["jq"] } },
    });
    // The serve lane's resolver over bubblewrap, which refuses apt packages with a session error instead of skipping them.
    const probe = await hostProbes.bubblewrap();
    if (!probe.ok) throw new Error(`bubblewrap is required for this test: ${probe.reason}`);
    const dataDir = await mkdtemp(join(tmpdir(), "openma-actions-packages-"));
    const sandboxes = sessionSandboxes(await openBackend({ type: "bubblewrap" }), { dataDir, logger: silentLogger });
    try {
      const sessionId = await h.session(await h.agent([TOOLSET]), env.id, "use jq");
      expect(await h.run(sessionId, { sandboxes })).toEqual({ type: "idle", stopReason: "end_turn" });
      const events = await h.events(sessionId);
      expect(ofType(events, "session.error")).toEqual([
        expect.objectContaining({
          error: expect.objectContaining({
            type: "unknown_error",
            message: expect.stringContaining("installing the environment's apt packages failed"),
            retry_status: { type: "terminal" },
          }),
        }),
      ]);
      expect(ofType(events, "agent.tool_result")[0]).toMatchObject({ is_error: true });
    } finally {
      await sandboxes.close();
      await rm(dataDir, { recursive: true, force: true });
    }
  });
});
