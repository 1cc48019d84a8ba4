/**
 * Codex (`@zed-industries/codex-acp`) as a session's harness THROUGH THE
 * SERVER: the official SDK creates an agent that selects the ACP agent with
 * the OpenMA extension (`metadata["openma.acp_agent"]`), a session pins the
 * release, and two turns sent with `sessions.events.send` are run by the real
 * Codex in a real bubblewrap sandbox (apps/openma/src/acp-sessions.ts),
 * against the scripted model through the host-side model gateway: the agent
 * holds a placeholder key, the scripted model demands the real one.
 *
 * Checked: each turn's `agent.message` (streamed through the SDK), that turn
 * 2's model request carries turn 1 (one ACP session across turns), the
 * session's pinned release, that Codex asks for the model the agent names
 * (its config.toml), that changing the agent's selection and model leaves
 * the live session on its release and model, that a `user.interrupt` cancels a turn
 * (`session/cancel`), that a message sent while a turn runs gets a turn of
 * its own afterwards, and that archiving ends the placement. Then the
 * scenario every real agent runs through the server (server-scenario.ts):
 * two turns, `openma serve` killed with SIGKILL mid-turn 3, a restarted
 * server continues Codex's native session (`session/resume`), so does one
 * after a graceful restart, then deleted native state → one semantic
 * recovery with one warning.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import type Anthropic from "@anthropic-ai/sdk";
import { ensureAgentRelease, KNOWN_AGENT_RELEASES } from "@openma/acp";
import { pinnedAcpRelease } from "@openma/api";
import { assertBwrapInstalled } from "@openma/driver-bubblewrap/test-support";
import { ManualScheduler, type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";
import { allEvents, endTurnIdle, sendAndWait } from "../support/worker-e2e.ts";
import {
  AGENT_MODEL,
  HELD_MS,
  modelsAsked,
  REAL_KEY,
  requestWith,
  runServerScenario,
  SCRIPT,
  said,
  userMessage,
} from "./server-scenario.ts";

const CODEX = KNOWN_AGENT_RELEASES.find((r) => r.id === "codex-acp");

describe("Codex as a session harness through openma serve and the official SDK", () => {
  let model: ScriptedModel;
  let srv: TestServer;
  let client: Anthropic;
  let integrity: string;
  let clock: ManualScheduler;

  beforeAll(async () => {
    assertBwrapInstalled();
    if (!CODEX) throw new Error("codex-acp is not a known release");
    integrity = (await ensureAgentRelease(CODEX)).integrity;
    clock = new ManualScheduler();
    model = await startScriptedModel({ apiKey: REAL_KEY, scheduler: clock, script: { turns: SCRIPT } });
    srv = await startTestServer("sqlite", {
      OPENMA_BRAIN: "on",
      OPENMA_SANDBOX: "bubblewrap",
      OPENMA_MODEL_BASE_URL: model.url,
      OPENMA_MODEL_API_KEY: REAL_KEY,
    });
    client = srv.client;
  }, 600_000);
  afterAll(async () => {
    await srv?.close();
    await model?.close();
  });

  it("two turns of one ACP session; the release is pinned on the session", async () => {
    const agent = await client.beta.agents.create({
      name: "codex",
      model: AGENT_MODEL.codex,
      metadata: { "openma.acp_agent": `codex-acp@${CODEX?.version}` },
    });
    const env = await client.beta.environments.create({ name: "acp" });
    const session = await client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    const pin = { id: "codex-acp", package: CODEX?.package, version: CODEX?.version, integrity };
    expect(await pinnedAcpRelease(srv.store.storage.db, session.id)).toEqual(pin);

    const first = await sendAndWait(client, session.id, userMessage("first task"), endTurnIdle);
    expect(said(first)).toContain("answer one");
    expect(first.map((e) => e.type)).toEqual(expect.arrayContaining(["session.status_running", "span.model_request_end"]));

    expect(modelsAsked(model)).toEqual(new Set([AGENT_MODEL.codex]));

    // The agent now selects another release and another model: the live session keeps its agent version's.
    await client.beta.agents.update(agent.id, { version: agent.version, model: "gpt-5.2", metadata: { "openma.acp_agent": "gemini" } });
    const second = await sendAndWait(client, session.id, userMessage("second task"), endTurnIdle);
    expect(said(second)).toContain("answer two");
    expect(await pinnedAcpRelease(srv.store.storage.db, session.id)).toEqual(pin);

    // Turn 2's model request carries turn 1: the same ACP session continued.
    const request = model.requests.find((r) => JSON.stringify(r.view?.messages ?? []).includes("second task"));
    const carried = JSON.stringify(request?.view?.messages ?? []);
    expect(carried).toContain("first task");
    expect(carried).toContain("answer one");
    // Codex answered (OpenAI Responses), not the default harness (Anthropic Messages), and only with the real key.
    expect(new Set(model.requests.map((r) => r.dialect))).toEqual(new Set(["openai-responses"]));
    expect(modelsAsked(model)).toEqual(new Set([AGENT_MODEL.codex]));
    expect(model.requests.filter((r) => JSON.stringify(r.headers).includes("openma-placeholder"))).toEqual([]);
    // No session.error: every answered request came through the gateway with the real key.
    expect((await allEvents(client, session.id)).filter((e) => e.type === "session.error")).toEqual([]);

    // A user.interrupt while Codex waits on its model: session/cancel, Codex drops the request, the turn ends.
    const stream = await client.beta.sessions.events.stream(session.id);
    await client.beta.sessions.events.send(session.id, { events: userMessage("long task") as never });
    await clock.untilSleeping();
    const held = requestWith(model, "long task");
    await client.beta.sessions.events.send(session.id, { events: [{ type: "user.interrupt" }] });
    for await (const e of stream) if (e.type === "session.status_idle") break;
    stream.controller.abort();
    await model.idle();
    expect(model.requests[held]?.outcome).toBe("aborted");
    expect(said(await allEvents(client, session.id))).not.toContain("too late");

    // A message sent while a turn runs (its model request held) gets a turn of its own afterwards (pendingTurn).
    const busy = await client.beta.sessions.events.stream(session.id);
    await client.beta.sessions.events.send(session.id, { events: userMessage("third task") as never });
    await clock.untilSleeping();
    const third = requestWith(model, "third task");
    await client.beta.sessions.events.send(session.id, { events: userMessage("fourth task") as never });
    clock.advance(HELD_MS);
    for await (const e of busy) if (e.type === "session.status_idle") break;
    busy.controller.abort();
    const answered = async () => {
      const events = await allEvents(client, session.id);
      return said(events).includes("answer four") && endTurnIdle(events.at(-1) as (typeof events)[number]);
    };
    await expect.poll(answered, { timeout: 60_000, interval: 250 }).toBe(true);
    expect(said(await allEvents(client, session.id))).toContain("answer three");
    // Its own model request, after turn 3's: not folded into the running turn.
    expect(requestWith(model, "fourth task")).toBeGreaterThan(third);

    // Archiving the session ends its placement: the ACP session closes and its model gateway stops listening.
    const socket = join(srv.store.dataDir, "acp-gateway", `${session.id}.sock`);
    expect(existsSync(socket)).toBe(true);
    await client.beta.sessions.archive(session.id);
    expect(existsSync(socket)).toBe(false);
  }, 600_000);
});

describe("a Codex session through openma serve survives kill -9 mid-turn, then loses its native state", () => {
  it("a restarted server resumes Codex's native session (session/resume), so does a gracefully restarted one; without native state it recovers once", async () => {
    expect(await runServerScenario("codex")).toEqual({ continuedWith: "resume" });
  }, 900_000);
});
