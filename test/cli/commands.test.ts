/**
 * The client commands (`openma agents|environments|sessions`) in-process
 * against a real server whose brain runs the scripted model in bubblewrap
 * sandboxes, talking over HTTP through the official SDK. `sessions tail`
 * follows a turn whose stream is cut mid-way by a proxy and still prints
 * the session's log exactly once, in order.
 */
import { ManualScheduler } from "@openma/scripted-model";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clientCommand } from "../../apps/openma/src/cli/index.ts";
import { type CutProxy, startCutProxy } from "../console/cut-proxy.ts";
import type { TestServer } from "../support/server.ts";
import { until } from "../support/until.ts";
import { agentAndEnvironment, captureIo, startBrainServer } from "./support.ts";

const ANSI = new RegExp(`${String.fromCharCode(27)}\\[`);

describe("openma client commands", () => {
  let clock: ManualScheduler;
  let server: Awaited<ReturnType<typeof startBrainServer>>;
  let t: TestServer;
  let proxy: CutProxy;
  let env: Record<string, string>;

  beforeAll(async () => {
    clock = new ManualScheduler();
    server = await startBrainServer(
      [
        {
          match: { last_user_text_contains: "run it" },
          response: { content: [{ type: "tool_use", name: "bash", input: { command: "echo from-the-sandbox" } }] },
        },
        // Held by the test's clock: the turn is mid-way while the stream is cut.
        {
          match: { tool_result_for: "bash", tool_result_contains: "from-the-sandbox" },
          delay: { first_byte_ms: 60_000 },
          response: "All done.",
        },
      ],
      clock,
    );
    t = server.t;
    proxy = await startCutProxy(t.baseURL);
    env = { OPENMA_BASE_URL: proxy.url, OPENMA_API_KEY: t.apiKey };
  });
  afterAll(async () => {
    await proxy?.close();
    await server?.close();
  });

  async function run(argv: string[], opts: { tty?: boolean } = {}) {
    const io = captureIo(env, opts);
    const [command = "", ...rest] = argv;
    await clientCommand(command, rest, io);
    return io;
  }

  it("creates and lists agents, environments and sessions, as tables and as JSON", async () => {
    const agent = JSON.parse((await run(["agents", "create", "--name", "cli-agent", "--model", "claude-test-1", "--json"])).out());
    expect(agent).toMatchObject({ name: "cli-agent", model: { id: "claude-test-1" } });
    const created = (await run(["environments", "create", "--name", "cli-env"])).out();
    expect(created).toMatch(/^created environment env_\S+\n$/);

    const agents = await run(["agents", "list"]);
    expect(agents.out()).toMatch(/^ID\s+NAME\s+MODEL\s+VERSION\n/);
    expect(agents.out()).toContain(`${agent.id}  cli-agent  claude-test-1`);
    expect(agents.out()).not.toMatch(ANSI);
    // A terminal gets color.
    expect((await run(["agents", "list"], { tty: true })).out()).toMatch(ANSI);

    const environments = JSON.parse((await run(["environments", "list", "--json"])).out());
    expect(environments).toEqual([expect.objectContaining({ name: "cli-env", config: expect.objectContaining({ type: "cloud" }) })]);
    const session = JSON.parse(
      (
        await run(["sessions", "create", "--agent", agent.id, "--environment", environments[0].id, "--title", "from the cli", "--json"])
      ).out(),
    );
    expect(session.id).toMatch(/^sesn_/);
    const sessions = (await run(["sessions", "list"])).out();
    expect(sessions).toContain(session.id);
    expect(sessions).toContain("from the cli");
  });

  it("explains bad input and a missing key instead of calling the server", async () => {
    const missing = await run(["agents", "create", "--name", "x"]);
    expect(missing.err()).toContain("missing --model");
    const unknown = await run(["sessions", "frobnicate"]);
    expect(unknown.err()).toContain("unknown sessions command: frobnicate");
    const io = captureIo({ OPENMA_BASE_URL: proxy.url });
    await clientCommand("agents", ["list"], io);
    expect(io.err()).toContain("no API key");
    process.exitCode = 0;
  });

  it("tails a turn live across a dropped stream, each event once and in order", async () => {
    const { agentId, environmentId } = await agentAndEnvironment(t, "always_allow");
    const { id: sessionId } = await t.client.beta.sessions.create({ agent: agentId, environment_id: environmentId });
    expect((await run(["sessions", "send", sessionId, "please", "run it"])).out()).toBe("sent\n");

    const io = captureIo(env);
    const tail = clientCommand("sessions", ["tail", sessionId, "--until-idle", "--json"], io);
    // The tool ran; the model's answer waits for the test's clock. Now the network drops, and comes back.
    await until(async () => io.out().includes('"type":"agent.tool_result"'), "the tool's result, tailed");
    await clock.untilSleeping(1);
    proxy.cut();
    clock.advance(60_000);
    await until(async () => (await t.client.beta.sessions.retrieve(sessionId)).status === "idle", "the turn's end, logged while cut");
    proxy.restore();
    await tail;

    const printed = io
      .out()
      .trimEnd()
      .split("\n")
      .map((line) => JSON.parse(line) as { id: string; type: string });
    const log: string[] = [];
    for await (const e of t.client.beta.sessions.events.list(sessionId, { limit: 1000 })) log.push(e.id);
    expect(printed.map((e) => e.id)).toEqual(log);
    expect(printed.map((e) => e.type)).toEqual(
      expect.arrayContaining(["agent.tool_use", "agent.tool_result", "agent.message", "session.status_idle"]),
    );
    expect(io.err()).toContain("reconnecting");

    // For people: the same turn as text, no color in a pipe.
    const text = await run(["sessions", "tail", sessionId, "--until-idle"]);
    expect(text.out()).toContain("you: please run it");
    expect(text.out()).toContain('→ tool bash {"command":"echo from-the-sandbox"}');
    expect(text.out()).toMatch(/← result .*from-the-sandbox/);
    expect(text.out()).toContain("agent: All done.");
    expect(text.out()).toContain("[idle: end_turn]");
    expect(text.out()).not.toMatch(ANSI);
  });
});
