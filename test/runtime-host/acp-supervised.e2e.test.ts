/**
 * The ACP harness in the `openma_supervised` lane, end to end (ADR 0034):
 * a real server (Postgres) that leaves self-hosted sessions' brains to the
 * Work item (`OPENMA_SELF_HOSTED_BRAIN=work_item`), and a runtime host in
 * its own process serving the ACP lane on bubblewrap. The official SDK
 * creates an agent selecting Codex (`openma.acp_agent`), a self-hosted
 * session pins it, and turns are sent with `sessions.events.send`.
 *
 * Inside the sandbox the bundled ACP harness runs the Session command loop
 * with the Work item's sessions token (over the bridged API socket), keeps
 * ONE real Codex child (`codex-acp`) across turns, posts the projected
 * events, sends `session/cancel` on a `user.interrupt`, and asks the host
 * for a fenced commit after each turn. Codex
 * reaches the scripted model only through the host-side model gateway (the
 * model demands the real key; Codex holds a placeholder), and asks for the
 * model the session's agent names (the host reads it and puts it on the
 * harness's launch line; the harness writes it into Codex's config.toml).
 *
 * Two turns and an interrupted one; then the runtime host is killed with SIGKILL while Codex waits
 * on turn 3's model request. A fresh runtime host reclaims the Work, a
 * fresh sandbox restores the workspace from the last published candidate,
 * and Codex continues its native session with `session/resume`: the retried
 * request carries turns 1 and 2, no recovery prompt, no warning.
 *
 * Then a crash between turn 4's published `session.status_idle` and its
 * fenced commit: the host process holds that commit once the workspace
 * candidate is uploaded (acp-runtime-host.child.ts wraps the workspace port)
 * and is killed with SIGKILL there; the active publication stays turn 3's.
 * A third host restores it; its native marker is behind the canonical idle,
 * so the placement is stale and takes the semantic recovery path: one
 * `acp_semantic_recovery` warning, turn 5's first model request is the
 * recovery prompt carrying the earlier turns, the turn completes. Idle past
 * its bound, that harness closes the ACP session and completes; the host
 * drains, publishes and stops the Work item. While
 * turn 3 runs, no sandboxed process holds a sessions token, the model key
 * or the environment key in its argv or environment.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { ensureAgentRelease, KNOWN_AGENT_RELEASES } from "@openma/acp";
import { assertBwrapInstalled } from "@openma/driver-bubblewrap/test-support";
import { sqlRuntimePorts } from "@openma/host";
import { ManualScheduler, type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { systemClock } from "@openma/storage";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";
import { allEvents, createSelfHostedEnvironment, endTurnIdle, type LoggedEvent, sendAndWait } from "../support/worker-e2e.ts";
import { bwrapLeftovers, sandboxedProcesses } from "./support.ts";

const REAL_KEY = "sk-real-model-key-acp-supervised";
/** The model the session's agent names: a model Codex knows, and not its setup's default. */
const AGENT_MODEL = "gpt-5.4";
const HELD_MS = 1000;
const CODEX = KNOWN_AGENT_RELEASES.find((r) => r.id === "codex-acp");
const SCRIPT = [
  // First: the recovery prompt quotes every earlier request, so its turn must win over theirs.
  { label: "recovered", match: { last_user_text_contains: "openma-recovery" }, response: "answer five" },
  { label: "one", match: { last_user_text_contains: "first task" }, response: "answer one" },
  { label: "two", match: { last_user_text_contains: "second task" }, response: "answer two" },
  // Held on the model's manual clock until the user interrupts.
  { label: "long", match: { last_user_text_contains: "long task" }, delay: { first_byte_ms: HELD_MS }, response: "too late" },
  // Held on the model's manual clock: the runtime host is killed while Codex waits for it.
  { label: "three", match: { last_user_text_contains: "third task" }, delay: { first_byte_ms: HELD_MS }, response: "answer three" },
  // Held on the model's manual clock until the test has armed the hold of turn 4's commit.
  { label: "four", match: { last_user_text_contains: "fourth task" }, delay: { first_byte_ms: HELD_MS }, response: "answer four" },
];

const said = (events: LoggedEvent[]) =>
  events
    .filter((e) => e.type === "agent.message")
    .flatMap((e) => (e.content as { type: string; text?: string }[]).map((b) => b.text ?? ""))
    .join("");
const userMessage = (text: string) => [{ type: "user.message", content: [{ type: "text", text }] }];

interface HostProcess {
  child: ChildProcess;
  log: () => string;
  /** The runs it finished, by result type, in order. */
  results: string[];
  exited: Promise<void>;
  /** Holds the turn's fenced commit (see the child); resolves once the hold is armed. */
  hold(turnId: string): Promise<void>;
  /** Resolves when a held commit's workspace candidate was created and the commit stopped there. */
  held: Promise<{ turnId: string; candidate: string }>;
}

/** Starts test/runtime-host/acp-runtime-host.child.ts; its configuration (the environment key among it) goes over stdin. */
async function startHostProcess(config: Record<string, unknown>): Promise<HostProcess> {
  const child = spawn(process.execPath, ["--import", "tsx", join(import.meta.dirname, "acp-runtime-host.child.ts")], {
    stdio: ["pipe", "pipe", "pipe"],
  });
  let log = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    log += chunk.toString("utf8");
    if (process.env.DEBUG_ACP) process.stderr.write(chunk);
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  // stdin stays open: later lines arm commit holds.
  child.stdin?.write(`${JSON.stringify(config)}\n`);
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  const results: string[] = [];
  let armed: (() => void) | null = null;
  let onHeld: (held: { turnId: string; candidate: string }) => void = () => {};
  const held = new Promise<{ turnId: string; candidate: string }>((resolve) => {
    onHeld = resolve;
  });
  await new Promise<void>((resolve, reject) => {
    lines.on("line", (line) => {
      const message = JSON.parse(line) as {
        ready?: boolean;
        result?: { type: string };
        armed?: string;
        held?: { turnId: string; candidate: string };
      };
      if (message.result) results.push(message.result.type);
      if (message.armed) armed?.();
      if (message.held) onHeld(message.held);
      if (message.ready) resolve();
    });
    void exited.then(() => reject(new Error(`the runtime host exited before it was ready:\n${log}`)));
  });
  const hold = (turnId: string) =>
    new Promise<void>((resolve) => {
      armed = resolve;
      child.stdin?.write(`${JSON.stringify({ hold: turnId })}\n`);
    });
  return { child, log: () => log, results, exited, hold, held };
}

describe("Codex in the openma_supervised lane of a runtime host", () => {
  let model: ScriptedModel;
  let t: TestServer;
  let clock: ManualScheduler;
  let host: HostProcess | null = null;

  beforeAll(async () => {
    assertBwrapInstalled();
    if (!CODEX) throw new Error("codex-acp is not a known release");
    await ensureAgentRelease(CODEX);
    clock = new ManualScheduler();
    model = await startScriptedModel({ apiKey: REAL_KEY, scheduler: clock, script: { turns: SCRIPT } });
    t = await startTestServer("postgres", {
      OPENMA_SELF_HOSTED_BRAIN: "work_item",
      // Short Work leases: the fresh runtime host reclaims the killed one's item within seconds.
      OPENMA_WORK_TTL_SECONDS: "4",
    });
  }, 600_000);
  afterAll(async () => {
    if (host) {
      host.child.kill("SIGTERM");
      await host.exited;
    }
    await t?.close();
    await model?.close();
  });

  it("two turns in one ACP child, an interrupt; kill -9 of the runtime host mid-turn 3; a fresh host resumes Codex's native session; kill -9 between turn 4's idle and its commit: one semantic recovery", async () => {
    const { client } = t;
    const env = await createSelfHostedEnvironment(client, "acp-supervised");
    const agent = await client.beta.agents.create({
      name: "codex",
      // Not the Codex setup's default: Codex can only have learnt it from the session's agent (the launch line).
      model: AGENT_MODEL,
      metadata: { "openma.acp_agent": `codex-acp@${CODEX?.version}` },
    });
    const session = await client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    const config = {
      apiUrl: t.baseURL,
      environmentId: env.id,
      environmentKey: env.key,
      databaseUrl: t.store.databaseUrl,
      pgSchema: t.store.pgSchema,
      dataDir: t.store.dataDir,
      stateDir: join(t.store.dataDir, "runtime-host"),
      model: { baseUrl: model.url, apiKey: REAL_KEY },
      fenceTtlMs: 4000,
      // The placement outlives the gap between turns: turn 2 runs in the same ACP child.
      maxIdleMs: 120_000,
    };
    host = await startHostProcess(config);
    const first = host;

    const one = await sendAndWait(client, session.id, userMessage("first task"), endTurnIdle);
    expect(said(one)).toContain("answer one");
    expect(one.map((e) => e.type)).toEqual(
      expect.arrayContaining(["session.status_running", "span.model_request_start", "span.model_request_end"]),
    );
    const two = await sendAndWait(client, session.id, userMessage("second task"), endTurnIdle);
    expect(said(two)).toContain("answer two");
    // Turn 2's request carries turn 1, and one ACP session served both: opened once (new), never resumed in between.
    const second = model.requests.find((r) => JSON.stringify(r.view?.messages ?? []).includes("second task"));
    expect(JSON.stringify(second?.view?.messages ?? [])).toContain("answer one");
    expect(first.log().match(/ACP session \S+ opened/g)).toHaveLength(1);
    expect(first.log()).toContain("opened (new)");
    // Codex answered (OpenAI Responses) with the real key only the gateway holds.
    expect(new Set(model.requests.map((r) => r.dialect))).toEqual(new Set(["openai-responses"]));
    expect(new Set(model.requests.map((r) => r.view?.model))).toEqual(new Set([AGENT_MODEL]));
    expect(model.requests.filter((r) => JSON.stringify(r.headers).includes("openma-placeholder"))).toEqual([]);

    // A user.interrupt while Codex waits on its model: session/cancel, Codex drops the request, the turn ends idle.
    const stream = await client.beta.sessions.events.stream(session.id);
    await client.beta.sessions.events.send(session.id, { events: userMessage("long task") as never });
    await clock.untilSleeping();
    const held = model.requests.findIndex((r) => JSON.stringify(r.view?.messages ?? []).includes("long task"));
    await client.beta.sessions.events.send(session.id, { events: [{ type: "user.interrupt" }] });
    for await (const e of stream) if (e.type === "session.status_idle") break;
    stream.controller.abort();
    await model.idle();
    expect(model.requests[held]?.outcome).toBe("aborted");
    expect(said(await allEvents(client, session.id))).not.toContain("too late");
    expect(first.log()).toContain("user.interrupt: session/cancel");

    // Turn 3: Codex's model request is held; the runtime host is killed under it.
    await client.beta.sessions.events.send(session.id, { events: userMessage("third task") as never });
    await clock.untilSleeping();
    const hung = model.requests.findIndex((r) => JSON.stringify(r.view?.messages ?? []).includes("third task"));
    expect(hung).toBeGreaterThanOrEqual(0);
    // No secret in any sandboxed process: no sessions token, no model key, no environment key (the placeholder is allowed).
    const sandboxed = await sandboxedProcesses();
    expect(sandboxed.some((p) => p.argv.includes("acp-harness.mjs"))).toBe(true);
    expect(sandboxed.some((p) => p.environ.includes("OPENMA_MODEL_API_KEY=openma-placeholder"))).toBe(true);
    const leaks = sandboxed.filter((p) =>
      [REAL_KEY, env.key, "sk-ant-req-", "sk-ant-oat01-"].some((s) => p.argv.includes(s) || p.environ.includes(s)),
    );
    expect(leaks.map((p) => p.argv)).toEqual([]);
    first.child.kill("SIGKILL");
    await first.exited;
    host = null;
    await model.idle();
    expect(model.requests[hung]?.outcome).toBe("aborted");

    host = await startHostProcess(config);
    const restarted = host;
    const finished = async () => {
      const events = await allEvents(client, session.id);
      return said(events).includes("answer three") && endTurnIdle(events.at(-1) as LoggedEvent);
    };
    // The retried request sleeps on the model's clock too: let it answer.
    await clock.untilSleeping();
    clock.advance(HELD_MS);
    try {
      await expect.poll(finished, { timeout: 120_000, interval: 500 }).toBe(true);
    } catch (error) {
      throw new Error(`turn 3 did not finish; the fresh runtime host said:\n${restarted.log()}`, { cause: error });
    }
    const retried = model.requests.findIndex((r, i) => i > hung && JSON.stringify(r.view?.messages ?? []).includes("third task"));
    expect(retried).toBeGreaterThan(hung);
    const carried = JSON.stringify(model.requests[retried]?.view?.messages ?? []);
    expect(carried).toContain("first task");
    expect(carried).toContain("answer two");
    expect(carried).not.toContain("openma-recovery");
    expect(restarted.log()).toContain("opened (resume)");
    expect((await allEvents(client, session.id)).filter((e) => e.type === "session.warning" || e.type === "session.error")).toEqual([]);

    // Turn 4 runs in the same placement; its fenced commit is held after the turn's idle is published (the
    // candidate is uploaded, not published), and the runtime host is killed with SIGKILL there.
    const scope = { environmentId: env.id, sessionId: session.id };
    const { fences } = sqlRuntimePorts(t.store.storage.db, systemClock);
    const active = () => fences.active({ scope, signal: AbortSignal.timeout(10_000) });
    await client.beta.sessions.events.send(session.id, { events: userMessage("fourth task") as never });
    await clock.untilSleeping();
    const fourth = (await allEvents(client, session.id)).filter((e) => e.type === "user.message").at(-1) as LoggedEvent;
    expect(JSON.stringify(fourth.content)).toContain("fourth task");
    await restarted.hold(fourth.id);
    clock.advance(HELD_MS);
    const holding = await restarted.held;
    expect(holding.turnId).toBe(fourth.id);
    const beforeKill = await allEvents(client, session.id);
    expect(said(beforeKill)).toContain("answer four");
    expect(endTurnIdle(beforeKill.at(-1) as LoggedEvent)).toBe(true);
    const published = await active();
    expect(published?.workspace?.id).toBeDefined();
    expect(published?.workspace?.id).not.toBe(holding.candidate);
    restarted.child.kill("SIGKILL");
    await restarted.exited;
    host = null;
    // Nothing published is lost, and the uploaded candidate never became active.
    expect(await active()).toEqual(published);

    // A third host restores that candidate, whose native marker (turn 3) is behind the canonical idle (turn 4): stale, so
    // the placement opens a new ACP session and turn 5's first model request is the recovery prompt, with one warning.
    // This one lets its harness end soon after the session is idle: the run completes and publishes.
    const beforeFifth = model.requests.length;
    await client.beta.sessions.events.send(session.id, { events: userMessage("fifth task") as never });
    host = await startHostProcess({ ...config, maxIdleMs: 2000 });
    const recovered = host;
    const fifthDone = async () => said(await allEvents(client, session.id)).includes("answer five");
    try {
      await expect.poll(fifthDone, { timeout: 120_000, interval: 500 }).toBe(true);
    } catch (error) {
      throw new Error(`turn 5 did not finish; the third runtime host said:\n${recovered.log()}`, { cause: error });
    }
    expect(recovered.log()).toContain("opened (new, recovery: native-state-stale)");
    const recovery = JSON.stringify(model.requests[beforeFifth]?.view?.messages ?? []);
    expect(recovery).toContain("openma-recovery");
    expect(recovery).toContain("first task");
    expect(recovery).toContain("answer four");
    expect(recovery).toContain("fifth task");
    const log = await allEvents(client, session.id);
    expect(endTurnIdle(log.at(-1) as LoggedEvent)).toBe(true);
    expect(log.filter((e) => e.type === "session.warning")).toEqual([
      expect.objectContaining({ source: "acp_semantic_recovery", details: { reason: "native-state-stale" } }),
    ]);
    expect(log.filter((e) => e.type === "session.error")).toEqual([]);
    expect(said(log)).toContain("answer four");
    // Every placement (the first, the resumed one, the recovered one) asked for the session's agent's model.
    expect(new Set(model.requests.map((r) => r.view?.model))).toEqual(new Set([AGENT_MODEL]));

    // Idle past maxIdleMs: the harness closes its ACP session and completes; the host drains, publishes, stops the item.
    await expect.poll(() => recovered.results, { timeout: 60_000, interval: 200 }).toEqual(["completed"]);
    expect((await active())?.revision).toBeGreaterThan(published?.revision ?? Number.POSITIVE_INFINITY);
    const live = await t.store.storage.db
      .selectFrom("work_items")
      .select("state")
      .where("session_id", "=", session.id)
      .where("state", "!=", "stopped")
      .execute();
    expect(live).toEqual([]);
    // Nothing of either host's sandboxes is left (the killed one's died with it, the completed one was terminated).
    await expect.poll(() => bwrapLeftovers([config.stateDir]), { timeout: 30_000, interval: 200 }).toEqual([]);
  }, 300_000);
});
