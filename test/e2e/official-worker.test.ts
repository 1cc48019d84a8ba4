/**
 * The unmodified official `EnvironmentWorker` from `@anthropic-ai/sdk` 1.10.0
 * serves a self-hosted session of ours end to end (both backends): the
 * official SDK creates the agent (with the agent toolset), a `self_hosted`
 * environment and a session; the brain runs in the server against the
 * scripted model, which asks in turn for `bash`, `write`, `read`, `edit`,
 * `glob` and `grep` (each turn matched on the previous tool result); the
 * worker runs them in a temp workdir and posts the results; the session ends
 * idle with `end_turn`, the worker force-stops its item and `run()` returns
 * when aborted. Completion is awaited on the SSE stream and on the worker's
 * own requests, never on sleeps.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { type ScriptedModel, startScriptedModel, type TurnInput } from "@openma/scripted-model";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";
import {
  allEvents,
  createSelfHostedEnvironment,
  endTurnIdle,
  isForceStop,
  type LoggedEvent,
  resultText,
  sendAndWait,
  startOfficialWorker,
} from "../support/worker-e2e.ts";

const MODEL_KEY = "sk-scripted-official-worker";
const USAGE = { input_tokens: 100, output_tokens: 10, cache_read_input_tokens: 5, cache_creation_input_tokens: 0 };

const toolTurn = (label: string, after: string | null, name: string, input: Record<string, unknown>): TurnInput => ({
  label,
  match: after ? { tool_result_for: after } : { last_user_text_contains: "RUN_TOOLS" },
  response: { content: [{ type: "tool_use", name, input }], usage: USAGE },
});

/** One tool per model turn, each matched on the result of the one before. */
const SCRIPT: TurnInput[] = [
  toolTurn("bash", null, "bash", { command: "echo hello-from-bash && pwd" }),
  toolTurn("write", "bash", "write", { file_path: "notes/a.txt", content: "alpha\nbeta\n" }),
  toolTurn("read", "write", "read", { file_path: "notes/a.txt" }),
  toolTurn("edit", "read", "edit", { file_path: "notes/a.txt", old_string: "beta", new_string: "gamma" }),
  toolTurn("glob", "edit", "glob", { pattern: "**/*.txt" }),
  toolTurn("grep", "glob", "grep", { pattern: "gamma" }),
  { label: "done", match: { tool_result_for: "grep" }, response: { content: [{ type: "text", text: "all six tools ran" }], usage: USAGE } },
];

describe.each(BACKENDS)("the official EnvironmentWorker against openma serve on %s", (dialect) => {
  let model: ScriptedModel;
  let t: TestServer;
  beforeAll(async () => {
    model = await startScriptedModel({ apiKey: MODEL_KEY, script: SCRIPT });
    t = await startTestServer(dialect, {
      OPENMA_BRAIN: "on",
      OPENMA_MODEL_BASE_URL: model.url,
      OPENMA_MODEL_API_KEY: MODEL_KEY,
    });
  });
  afterAll(async () => {
    await t?.close();
    await model?.close();
  });

  it("runs bash, write, read, edit, glob and grep in the worker's workdir and finishes the session", async () => {
    const { client } = t;
    const env = await createSelfHostedEnvironment(client, "hands");
    const agent = await client.beta.agents.create({
      name: "six-tools",
      model: "claude-test-1",
      tools: [{ type: "agent_toolset_20260401" }],
    });
    const session = await client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    const worker = startOfficialWorker({
      baseURL: t.baseURL,
      apiKey: t.apiKey,
      environmentId: env.id,
      environmentKey: env.key,
      // The worker lets go this long after the final `end_turn` idle (default 60 s).
      maxIdleMs: 200,
    });
    try {
      const seen = await sendAndWait(
        client,
        session.id,
        [{ type: "user.message", content: [{ type: "text", text: "RUN_TOOLS please" }] }],
        endTurnIdle,
      );
      expect(seen.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "end_turn" } });

      // The worker ends its item by itself (idle countdown) with a force-stop the server accepts.
      const stop = await worker.wire.next(isForceStop);
      expect(stop.status).toBe(200);
      const workId = stop.path.split("/").at(-2) as string;
      const item = await client.beta.environments.work.retrieve(workId, { environment_id: env.id });
      expect(item).toMatchObject({ state: "stopped", data: { type: "session", id: session.id } });

      const events = await allEvents(client, session.id);
      assertToolResults(events, worker.workdir);
      assertNoDuplicates(events);
      expect(events.filter((e) => e.type === "agent.message")).toHaveLength(1);
      expect(events.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "end_turn" } });

      // Seven model calls (six tool rounds and the answer), their usage summed on the session.
      const final = await client.beta.sessions.retrieve(session.id);
      expect(final.status).toBe("idle");
      expect(final.usage).toMatchObject({ input_tokens: 700, output_tokens: 70, cache_read_input_tokens: 35 });
      expect(model.requests.map((r) => r.outcome)).toEqual(Array(7).fill("completed"));
      expect(model.unusedTurns()).toEqual([]);
      // The file the tools edited is really in the worker's workdir.
      expect(readFileSync(join(worker.workdir, "notes/a.txt"), "utf8")).toBe("alpha\ngamma\n");
    } finally {
      await worker.stop();
    }
    // `run()` returned on abort without throwing (awaited by stop()).
    await expect(worker.done).resolves.toBeUndefined();
  });
});

function assertToolResults(events: LoggedEvent[], workdir: string): void {
  const uses = events.filter((e) => e.type === "agent.tool_use");
  expect(uses.map((e) => e.name)).toEqual(["bash", "write", "read", "edit", "glob", "grep"]);
  const results = events.filter((e) => e.type === "user.tool_result");
  expect(results).toHaveLength(6);
  const byTool = new Map(uses.map((u) => [u.name as string, results.find((r) => r.tool_use_id === u.id)]));
  for (const [name, r] of byTool) expect(r, `result for ${name}`).toBeDefined();
  const text = (name: string) => resultText(byTool.get(name) as LoggedEvent);
  const isError = (name: string) => (byTool.get(name) as LoggedEvent).is_error;

  expect(text("bash")).toContain("hello-from-bash");
  expect(text("bash")).toContain(workdir);
  expect(isError("bash")).toBe(false);
  expect(text("write")).toBe("wrote 11 bytes to notes/a.txt");
  expect(text("read")).toBe("alpha\nbeta\n");
  expect(text("edit")).toBe("edited notes/a.txt (1 replacement(s))");
  // The worker's `glob` uses Node's native `fs.glob` (Node >= 22): it lists the one .txt file by its full path.
  expect(isError("glob")).toBe(false);
  expect(text("glob").split("\n")).toEqual([join(workdir, "notes/a.txt")]);
  expect(isError("grep")).toBe(false);
  expect(text("grep")).toMatch(/notes\/a\.txt:2:gamma$/);
}

function assertNoDuplicates(events: LoggedEvent[]): void {
  const ids = events.map((e) => e.id);
  expect(new Set(ids).size).toBe(ids.length);
  const toolUseIds = events.filter((e) => e.type === "user.tool_result").map((e) => e.tool_use_id);
  expect(new Set(toolUseIds).size).toBe(toolUseIds.length);
}
