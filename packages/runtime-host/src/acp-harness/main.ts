/**
 * The in-sandbox ACP harness of the `openma_supervised` lane (docs/acp.md
 * "In the runtime host", ADR 0034). Bundled into one file with its
 * dependencies (acp-harness-bundle.ts) and run on the sandbox's Node:
 *
 *   stdin   line 1: the launch message (launch.ts; the sessions token rides
 *           here and nowhere else), then openma-harness-supervisor-v1 from
 *           the host: start, checkpoint_result, drain, stop
 *   stdout  openma-harness-supervisor-v1 to the host, and nothing else
 *   stderr  a log
 *
 * It runs the Session command loop over the API (the bridge socket, the
 * Work item's sessions token): reads the log, runs a turn for every input
 * no finished turn took (`pendingTurn`, @openma/acp) in ONE ACP child kept across turns
 * (AcpSessionRunner over node ports: the child is a process of this
 * sandbox), posts the projected events to the harness event sink, sends
 * `session/cancel` on a `user.interrupt`, and has the host commit each
 * completed turn (the runner's order: marker, artifacts, idle, then the
 * `checkpoint_request` the host answers after its fenced commit). With no
 * input for `maxIdleMs` it closes the ACP session and reports `completed`.
 */
import { dirname } from "node:path";
import { createInterface } from "node:readline";
import Anthropic from "@anthropic-ai/sdk";
import {
  AcpSessionRunner,
  type CanonicalEvent,
  type EventDraft,
  KNOWN_AGENT_RELEASES,
  nodeSpawn,
  nodeStatePort,
  pendingTurn,
  releaseDir,
  sandboxAgentProcess,
  setupForRelease,
} from "@openma/acp";
import { forwardLoopbackTo } from "@openma/model-gateway/loopback";
import { type CheckpointOutcome, type ChildMessage, type HostMessage, hostMessage, PROTOCOL } from "@openma/supervisor/protocol";
import { ACP_PLACEHOLDER_KEY, ACP_SANDBOX_PATHS, type AcpHarnessLaunch, acpHarnessLaunch } from "./launch.ts";

const STOP_GRACE_MS = 2_000;
const RECONNECT_MS = 500;

const log = (text: string) => process.stderr.write(`acp-harness: ${text}\n`);
const send = (message: ChildMessage) => process.stdout.write(`${JSON.stringify(message)}\n`);
// A broken stdout means the host is gone: nobody is left to report to.
process.stdout.on("error", () => process.exit(1));

class Harness {
  #launch: AcpHarnessLaunch | null = null;
  #runner: AcpSessionRunner | null = null;
  #pendingCheckpoint: { turnId: string; resolve: (r: CheckpointOutcome) => void } | null = null;
  #drainRequested = false;
  #completed = false;
  #exiting = false;
  #heartbeat: NodeJS.Timeout | undefined;
  readonly #stop = new AbortController();
  /** The session's log as this placement saw it, in order. */
  readonly #events: CanonicalEvent[] = [];
  /** Ids in `#events`: a reconnected stream repeats what it already delivered. */
  readonly #eventIds = new Set<string>();
  #wake: (() => void) | null = null;
  #inTurn = false;

  onLine(line: string): void {
    if (line.trim() === "" || this.#exiting) return;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      this.#fail("protocol error: a line from the host is not JSON");
      return;
    }
    if (this.#launch === null) {
      const launch = acpHarnessLaunch.safeParse(value);
      if (!launch.success) {
        this.#fail("the first line is not a launch message");
        return;
      }
      this.#launch = launch.data;
      return;
    }
    const parsed = hostMessage.safeParse(value);
    if (!parsed.success) {
      this.#fail("protocol error: invalid message from the host");
      return;
    }
    this.#onMessage(parsed.data);
  }

  #onMessage(message: HostMessage): void {
    switch (message.type) {
      case "start": {
        const launch = this.#launch as AcpHarnessLaunch;
        send({ type: "ready", protocol: PROTOCOL, harness: launch.agent });
        this.#heartbeat = setInterval(() => send({ type: "heartbeat" }), Math.max(1, message.heartbeatIntervalMs));
        this.#run(launch).catch((err: unknown) => this.#fail(err instanceof Error ? err.message : String(err)));
        return;
      }
      case "checkpoint_result": {
        const pending = this.#pendingCheckpoint;
        if (pending === null || pending.turnId !== message.turnId) {
          this.#fail(`protocol error: checkpoint_result for ${message.turnId} that was not requested`);
          return;
        }
        this.#pendingCheckpoint = null;
        pending.resolve(message.result);
        return;
      }
      case "drain":
        this.#drainRequested = true;
        this.#wake?.();
        if (this.#completed) send({ type: "drained" });
        return;
      case "stop":
        this.stop();
        return;
    }
  }

  /** `stop`, end of stdin, SIGTERM: end the ACP child (bounded), then exit. */
  stop(): void {
    if (this.#exiting) return;
    this.#exiting = true;
    this.#stop.abort();
    void this.#endChild().then(() => this.#exit(0));
  }

  #fail(error: string): void {
    log(error);
    if (this.#exiting) return;
    this.#exiting = true;
    this.#stop.abort();
    send({ type: "failed", error: error.slice(0, 4000) });
    void this.#endChild().then(() => this.#exit(1));
  }

  async #endChild(): Promise<void> {
    const runner = this.#runner;
    this.#runner = null;
    if (!runner) return;
    await Promise.race([runner.shutdown().catch(() => {}), new Promise((r) => setTimeout(r, STOP_GRACE_MS))]);
  }

  #exit(code: number): void {
    clearInterval(this.#heartbeat);
    process.stdout.write("", () => process.exit(code));
  }

  async #run(launch: AcpHarnessLaunch): Promise<void> {
    const loopbacks = await Promise.all([forwardLoopbackTo(launch.apiSocket), forwardLoopbackTo(launch.modelSocket)]);
    // HTTP clients speak TCP and the sandbox has no network: loopback ports onto the bridged sockets, never keeping the process up.
    for (const { server } of loopbacks) server.unref();
    const [apiPort, modelPort] = loopbacks.map((l) => l.port);
    // No standing credential: every call authenticates with the Work item's sessions token.
    const client = new Anthropic({ baseURL: `http://127.0.0.1:${apiPort}`, apiKey: null, authToken: launch.sessionsToken, maxRetries: 4 });
    const sessionId = launch.sessionId;
    for await (const e of client.beta.sessions.events.list(sessionId, { limit: 1000 })) this.#record(e as unknown as CanonicalEvent);
    const follow = this.#follow(client, sessionId);

    const release = KNOWN_AGENT_RELEASES.find((r) => r.id === launch.agent.id && r.version === launch.agent.version);
    if (!release) throw new Error(`unknown ACP agent release ${launch.agent.id}@${launch.agent.version}`);
    const model = launch.model ?? undefined;
    const setup = setupForRelease(release.id, { origin: `http://127.0.0.1:${modelPort}`, key: ACP_PLACEHOLDER_KEY, model });
    if (!setup) throw new Error(`no model setup is known for ACP agent ${release.id}`);
    const history = pendingTurn(this.#events)?.history ?? [...this.#events];
    const runner = new AcpSessionRunner({
      sessionId,
      agent: sandboxAgentProcess(release, setup, {
        agentDir: releaseDir(ACP_SANDBOX_PATHS.agents, release),
        // The sandbox's own Node (the image's) serves releases that need a newer one than `node` on PATH.
        nodeDir: dirname(process.execPath),
      }),
      spawn: nodeSpawn,
      state: nodeStatePort(),
      history,
      publish: (events) => this.#publish(client, sessionId, events),
      commitWorkspace: (turnId) => this.#checkpoint(turnId),
      ...(setup.configure ? { configure: setup.configure } : {}),
    });
    this.#runner = runner;
    const started = await runner.start();
    log(
      `ACP session ${started.acpSessionId} opened (${started.mode}${started.recovery ? `, recovery: ${started.recovery}` : ""}), model ${setup.model}`,
    );

    let served = -1;
    for (;;) {
      if (this.#stop.signal.aborted) return;
      const turn = this.#drainRequested ? null : pendingTurn(this.#events, served);
      if (turn) {
        served = turn.lastIndex;
        this.#inTurn = true;
        const result = await runner.runTurn(turn.turnId, turn.prompt);
        this.#inTurn = false;
        log(`turn ${turn.turnId}: ${result.stopReason}`);
        continue;
      }
      if (this.#drainRequested || this.#terminated()) break;
      if (!(await this.#nextEvent(launch.maxIdleMs))) break;
    }
    if (this.#stop.signal.aborted) return;
    // Idle long enough (or the session ended): close the ACP session and stop the child; the durable copy stays.
    this.#runner = null;
    await runner.shutdown();
    this.#stop.abort();
    await follow;
    this.#completed = true;
    send({ type: "completed" });
    if (this.#drainRequested) send({ type: "drained" });
  }

  /** Adds `e` to the log; false when it was already there. */
  #record(e: CanonicalEvent): boolean {
    if (this.#eventIds.has(e.id)) return false;
    this.#eventIds.add(e.id);
    this.#events.push(e);
    return true;
  }

  #terminated(): boolean {
    return this.#events.some((e) => e.type === "session.status_terminated");
  }

  /** Resolves true when an event arrived, false after `ms` without one. */
  #nextEvent(ms: number): Promise<boolean> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#wake = null;
        resolve(false);
      }, ms);
      this.#wake = () => {
        clearTimeout(timer);
        this.#wake = null;
        resolve(true);
      };
    });
  }

  /** Follows the log after what was listed (Last-Event-ID), reconnecting; a `user.interrupt` during a turn cancels it. */
  async #follow(client: Anthropic, sessionId: string): Promise<void> {
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      const lastId = this.#events.at(-1)?.id;
      try {
        const stream = await client.beta.sessions.events.stream(
          sessionId,
          {},
          { signal, headers: lastId ? { "Last-Event-ID": lastId } : {} },
        );
        for await (const event of stream) {
          if (!("id" in event)) continue;
          const e = event as unknown as CanonicalEvent;
          if (!this.#record(e)) continue;
          if (e.type === "user.interrupt" && this.#inTurn) {
            log("user.interrupt: session/cancel");
            void this.#runner?.interrupt().catch(() => {});
          }
          this.#wake?.();
        }
      } catch {
        if (signal.aborted) return;
        await new Promise((r) => setTimeout(r, RECONNECT_MS));
      }
    }
  }

  async #publish(client: Anthropic, sessionId: string, events: EventDraft[]): Promise<void> {
    if (events.length === 0) return;
    await client.post(`/v1/sessions/${encodeURIComponent(sessionId)}/harness/events`, { body: { events } });
  }

  /** The turn's fenced workspace commit, by the host. Rejected ends the run; a failed commit is carried by the next one. */
  async #checkpoint(turnId: string): Promise<void> {
    const result = await new Promise<CheckpointOutcome>((resolve) => {
      this.#pendingCheckpoint = { turnId, resolve };
      send({ type: "checkpoint_request", turnId });
    });
    if (result.type === "rejected") throw new Error(`the host rejected the checkpoint of ${turnId} (${result.reason})`);
    if (result.type === "failed") log(`checkpoint of ${turnId} failed (${result.error}); the next one carries it`);
    else log(`turn ${turnId}: committed revision ${result.revision}`);
  }
}

export function runAcpHarness(): void {
  const harness = new Harness();
  const lines = createInterface({ input: process.stdin, crlfDelay: Number.POSITIVE_INFINITY });
  lines.on("line", (line) => harness.onLine(line));
  // The host closing stdin means stop.
  lines.on("close", () => harness.stop());
  process.on("SIGTERM", () => harness.stop());
}
