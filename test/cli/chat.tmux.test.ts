/**
 * `openma chat` in a real pseudo-terminal (tmux), as a person uses it: the
 * CLI child process talks to a real server whose brain runs the scripted
 * model and bubblewrap sandboxes. One turn: the agent (tools `always_ask`)
 * wants to run bash, the CLI asks, the test types `y`, the tool runs and the
 * final message appears. Then a turn the model holds: a spinner runs, Ctrl-C
 * interrupts the turn (chat goes on), and Ctrl-C twice leaves. Fails (never skips) without tmux: `npm run
 * provision` installs it.
 */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { ManualScheduler } from "@openma/scripted-model";
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
    server = await startBrainServer(
      [
        {
          match: { last_user_text_contains: "may I" },
          response: { content: [{ type: "tool_use", name: "bash", input: { command: "echo allowed" } }] },
        },
        { match: { tool_result_for: "bash", tool_result_contains: "allowed" }, response: "Ran it: the sandbox said allowed." },
        // Held by the test's clock, which never advances: the turn runs until it is interrupted.
        { match: { last_user_text_contains: "take your time" }, delay: { first_byte_ms: 600_000 }, response: "Too late." },
      ],
      new ManualScheduler(),
    );
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
  });

  it("shows a spinner while a turn runs; ctrl-c interrupts the turn and chat goes on, ctrl-c twice leaves", async () => {
    const sessionId = /session (sesn_\S+)/.exec(await screen())?.[1] ?? "";
    const interrupts = async () => {
      const events = [];
      for await (const e of t.client.beta.sessions.events.list(sessionId, { limit: 1000 })) events.push(e);
      return { count: events.filter((e) => e.type === "user.interrupt").length, idle: events.at(-1)?.type === "session.status_idle" };
    };
    const slowTurn = async () => {
      await tmux("send-keys", "-t", "chat", "-l", "take your time");
      await tmux("send-keys", "-t", "chat", "Enter");
      await until(async () => /[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] working \d+s/.test(await screen()), "the spinner");
    };

    await slowTurn();
    await tmux("send-keys", "-t", "chat", "C-c");
    await sees("interrupting the turn (ctrl-c again to leave)");
    await until(async () => {
      const now = await interrupts();
      return now.count === 1 && now.idle;
    }, "the interrupt to reach the session and end its turn");
    // Still chatting: a new prompt, no exit.
    await until(async () => (await screen()).split("you> ").length === 4, "the prompt after the interrupted turn");
    expect(await screen()).not.toContain("[chat exited");

    await slowTurn();
    await tmux("send-keys", "-t", "chat", "C-c");
    await tmux("send-keys", "-t", "chat", "C-c");
    await sees("[chat exited 0]");
    expect((await interrupts()).count).toBe(2);
  });
});
