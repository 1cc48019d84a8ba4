/**
 * `openma serve`'s embedded default sandbox, end to end on both backends: the
 * brain runs the default harness against the scripted model, which asks for
 * `bash`, `write` and `read`; the tools run in the session's bubblewrap
 * sandbox (its own pid namespace and hostname), and the written file lands
 * in the session's host workspace under the data dir. Archiving the session
 * kills its sandbox before the archive call returns: no host process bound to
 * its workspace is left. Completion is observed on the SSE stream, never by
 * waiting on time. Fails (never skips) when bubblewrap is not usable here.
 */
import { readFile } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";
import { hostProcesses } from "@openma/driver-bubblewrap";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

const MODEL_KEY = "sk-scripted-local-sandbox";
type Event = { type: string; id: string; [k: string]: unknown };

const SCRIPT = [
  {
    match: { last_user_text_contains: "sandbox" },
    response: { content: [{ type: "tool_use" as const, name: "bash", input: { command: "echo $$; hostname; ls /workspace" } }] },
  },
  {
    match: { tool_result_for: "bash" },
    response: {
      content: [
        { type: "tool_use" as const, name: "write", input: { file_path: "/workspace/notes.txt", content: "written in the sandbox\n" } },
      ],
    },
  },
  {
    match: { tool_result_for: "write" },
    response: { content: [{ type: "tool_use" as const, name: "read", input: { file_path: "notes.txt" } }] },
  },
  { match: { tool_result_for: "read" }, response: "Done." },
].map((turn) => ({ ...turn, times: 100 }));

const text = (result: Event | undefined) =>
  ((result?.content as Array<{ text?: string }> | undefined) ?? []).map((block) => block.text ?? "").join("");

describe.each(BACKENDS)("openma serve's local sandbox on %s", (dialect) => {
  let model: ScriptedModel;
  let t: TestServer;

  beforeAll(async () => {
    model = await startScriptedModel({ apiKey: MODEL_KEY, script: SCRIPT });
    t = await startTestServer(dialect, {
      OPENMA_BRAIN: "on",
      OPENMA_SANDBOX: "bubblewrap",
      OPENMA_MODEL_BASE_URL: model.url,
      OPENMA_MODEL_API_KEY: MODEL_KEY,
      OPENMA_EXECUTION_POLL_MS: "600000", // bus wake-ups only
    });
  });
  afterAll(async () => {
    await t?.close();
    await model?.close();
  });

  it("runs bash, write and read inside the session's bubblewrap sandbox over its host workspace, and archive kills the sandbox", async () => {
    const env = (await t.client.beta.environments.create({ name: "cloud" })).id;
    const agent = await t.client.beta.agents.create({
      name: "sandboxed",
      model: "claude-test-1",
      tools: [{ type: "agent_toolset_20260401", default_config: { permission_policy: { type: "always_allow" } } }],
    });
    const sessionId = (await t.client.beta.sessions.create({ agent: agent.id, environment_id: env })).id;

    const stream = await t.client.beta.sessions.events.stream(sessionId);
    await t.client.beta.sessions.events.send(sessionId, {
      events: [{ type: "user.message", content: [{ type: "text", text: "use the sandbox" }] }],
    });
    const events: Event[] = [];
    for await (const event of stream) {
      events.push(event as unknown as Event);
      if (event.type === "session.status_idle") break;
    }
    stream.controller.abort();

    expect(events.filter((e) => e.type === "session.error")).toEqual([]);
    const results = events.filter((e) => e.type === "agent.tool_result");
    expect(results.map((r) => r.is_error)).toEqual([false, false, false]);
    const [pid, host] = text(results[0]).trim().split("\n");
    // A fresh pid namespace numbers from 1; the host's pids are far above; the sandbox has its own hostname.
    expect(Number(pid)).toBeGreaterThan(0);
    expect(Number(pid)).toBeLessThan(20);
    expect(host).toBe("sandbox");
    expect(host).not.toBe(hostname());
    expect(text(results[2])).toContain("written in the sandbox");
    const workspace = join(t.store.dataDir, "workspaces", sessionId);
    expect(await readFile(join(workspace, "notes.txt"), "utf8")).toBe("written in the sandbox\n");

    // The sandbox outlives the turn (until idle): its bwrap processes bind the session's workspace.
    const sandboxProcesses = async () => (await hostProcesses()).filter((p) => p.argv.includes(workspace)).map((p) => p.argv);
    expect((await sandboxProcesses()).length).toBeGreaterThan(0);
    // Archive returns once the sandbox is gone; its files stay on the host.
    await t.client.beta.sessions.archive(sessionId);
    expect(await sandboxProcesses()).toEqual([]);
    expect(await readFile(join(workspace, "notes.txt"), "utf8")).toBe("written in the sandbox\n");
  });
});
