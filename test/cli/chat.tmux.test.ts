/**
 * `openma chat` in a real pseudo-terminal (tmux), as a person uses it: the
 * CLI child process talks to a real server whose brain runs the scripted
 * model and bubblewrap sandboxes. One turn: the agent (tools `always_ask`)
 * wants to run bash, the CLI asks, the test types `y`, the tool runs and the
 * final message appears. Fails (never skips) without tmux: `npm run
 * provision` installs it.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TestServer } from "../support/server.ts";
import { until } from "../support/until.ts";
import { agentAndEnvironment, startBrainServer } from "./support.ts";

const run = promisify(execFile);
const ROOT = join(import.meta.dirname, "..", "..");
const CLI = join(ROOT, "apps", "openma", "src", "cli.ts");
const SOCKET = `openma-chat-test-${process.pid}`;

describe("openma chat in a terminal", () => {
  let server: Awaited<ReturnType<typeof startBrainServer>>;
  let t: TestServer;
  let tmuxEnv: NodeJS.ProcessEnv;

  const tmux = (...args: string[]) => run("tmux", ["-L", SOCKET, ...args], { env: tmuxEnv });
  const screen = async () => (await tmux("capture-pane", "-p", "-J", "-t", "chat")).stdout;
  const sees = (text: string) => until(async () => (await screen()).includes(text), `"${text}" on the terminal`);

  beforeAll(async () => {
    server = await startBrainServer([
      {
        match: { last_user_text_contains: "may I" },
        response: { content: [{ type: "tool_use", name: "bash", input: { command: "echo allowed" } }] },
      },
      { match: { tool_result_for: "bash", tool_result_contains: "allowed" }, response: "Ran it: the sandbox said allowed." },
    ]);
    t = server.t;
    // The key reaches the CLI through the tmux server's environment (it starts with this one), not through argv.
    tmuxEnv = { ...process.env, OPENMA_BASE_URL: t.baseURL, OPENMA_API_KEY: t.apiKey };
  });
  afterAll(async () => {
    await tmux("kill-server").catch(() => undefined);
    await server?.close();
  });

  it("asks before the tool runs, sends the answer, and shows the final message", async () => {
    const { agentId, environmentId } = await agentAndEnvironment(t, "always_ask");

    const chat = `'${process.execPath}' --import tsx '${CLI}' chat --agent ${agentId} --environment ${environmentId}; echo "[chat exited $?]"; sleep 600`;
    await tmux("new-session", "-d", "-s", "chat", "-x", "160", "-y", "50", "-c", ROOT, chat);
    await sees("you> ");
    const sessionId = /session (sesn_\S+)/.exec(await screen())?.[1] ?? "";
    expect(sessionId).toMatch(/^sesn_/);

    await tmux("send-keys", "-t", "chat", "-l", "may I run it?");
    await tmux("send-keys", "-t", "chat", "Enter");
    await sees('allow bash {"command":"echo allowed"}? [y/N]');
    await tmux("send-keys", "-t", "chat", "y", "Enter");
    await sees("agent: Ran it: the sandbox said allowed.");
    const shown = await screen();
    expect(shown).toContain('→ tool bash {"command":"echo allowed"}');
    expect(shown).toMatch(/← result .*allowed/);

    // The answer went to the server as a confirmation of that very tool call.
    const events = [];
    for await (const e of t.client.beta.sessions.events.list(sessionId, { limit: 100 })) events.push(e);
    const use = events.find((e) => e.type === "agent.tool_use");
    expect(events).toContainEqual(expect.objectContaining({ type: "user.tool_confirmation", tool_use_id: use?.id, result: "allow" }));

    // A terminal gets color; ctrl-d at the next prompt leaves cleanly.
    expect((await tmux("capture-pane", "-p", "-e", "-t", "chat")).stdout).toContain(`${String.fromCharCode(27)}[`);
    await until(async () => (await screen()).split("you> ").length === 3, "the second prompt");
    await tmux("send-keys", "-t", "chat", "C-d");
    await sees("[chat exited 0]");
  });
});
