/**
 * The host side of one supervisor process: the protocol state machine.
 *
 *   starting --ready--> running --completed--> completed --drain--> draining --drained--> (stop) ended
 *       \                  |                       |                    |
 *        `-- any fault ----+-----------------------+--------------------+--> stopping --> ended
 *
 * Faults (no ready in time, a missed heartbeat, a protocol error, the child's
 * `failed`, a drain that does not finish) end in a hard kill: the host owns
 * that responsibility and never waits on a misbehaving child. A cooperative
 * end (abort of the run, the stop after `drained`) sends `stop`, waits a
 * bounded time for the exit, then kills. Every wait is on the injected
 * Scheduler.
 *
 * A phase accepts only its messages; anything else is a protocol error. Any
 * valid message counts as a sign of life for the heartbeat deadline.
 */
import type { HarnessDriver, SandboxProcessEnd } from "@openma/contract";
import type { HarnessRunInput, HarnessRunResult, TurnCommitResult } from "@openma/host";
import type { Scheduler } from "@openma/time";
import type { ChannelEvent, SupervisorChannel } from "./channel.ts";
import { Deadline, within } from "./deadline.ts";
import { type SandboxProbe, sandboxLoss } from "./loss.ts";
import { type CheckpointOutcome, type ChildMessage, MAX_ERROR_LENGTH, PROTOCOL, preview } from "./protocol.ts";

export type SupervisedDriver = Extract<HarnessDriver, { type: "openma_supervised" }>;

export interface SessionTimings {
  /** After `stop`, how long the child may take to exit before it is killed. */
  stopTimeoutMs: number;
  /** After a kill, how long to wait for the process to be gone before reporting it. */
  killTimeoutMs: number;
  /** How long a sandbox may take to look gone after the supervisor died with it (see loss.ts). */
  lossSettleMs: number;
}

type Phase = "starting" | "running" | "completed" | "draining" | "stopping";

/** The messages each phase accepts; anything else is a protocol error. */
const ACCEPTS: Record<Phase, ReadonlySet<ChildMessage["type"]>> = {
  starting: new Set(["ready", "failed"]),
  running: new Set(["heartbeat", "checkpoint_request", "completed", "failed"]),
  // Between run and drain: alive, but nothing to commit (answered not_running).
  completed: new Set(["heartbeat", "checkpoint_request", "failed"]),
  draining: new Set(["heartbeat", "checkpoint_request", "drained", "failed"]),
  stopping: new Set(),
};

/** What ends a run() or drain() wait. */
type Decision =
  | { type: "completed" }
  | { type: "drained" }
  | { type: "fault"; error: string }
  | { type: "abort"; reason: string }
  | { type: "ended"; end: SandboxProcessEnd };

export type DrainResult = { type: "drained" } | { type: "failed"; error: string };

export class SupervisorSession {
  readonly #channel: SupervisorChannel;
  readonly #driver: SupervisedDriver;
  readonly #scheduler: Scheduler;
  readonly #timings: SessionTimings;
  readonly #probe: SandboxProbe | null;
  readonly #readyDeadline: Deadline;
  readonly #heartbeatDeadline: Deadline;
  readonly #drainDeadline: Deadline;
  #phase: Phase = "starting";
  #decide: ((decision: Decision) => void) | null = null;
  #commitTurn: ((turnId: string) => Promise<TurnCommitResult>) | null = null;
  #commitInFlight = false;
  /** Why the session died while no run() or drain() was waiting. */
  #fault: string | null = null;
  #end: SandboxProcessEnd | null = null;
  /** The phase the process was in when it ended (a clean exit after `completed` still drains). */
  #endedIn: Phase | null = null;
  #stopping = false;

  constructor(opts: {
    channel: SupervisorChannel;
    driver: SupervisedDriver;
    scheduler: Scheduler;
    timings: SessionTimings;
    probe: SandboxProbe | null;
  }) {
    this.#channel = opts.channel;
    this.#driver = opts.driver;
    this.#scheduler = opts.scheduler;
    this.#timings = opts.timings;
    this.#probe = opts.probe;
    this.#readyDeadline = new Deadline(opts.scheduler);
    this.#heartbeatDeadline = new Deadline(opts.scheduler);
    this.#drainDeadline = new Deadline(opts.scheduler);
  }

  get ended(): boolean {
    return this.#end !== null;
  }

  /** The run phase: start, ready, heartbeats and turn commits until `completed`, a fault, an abort or the end of the process. */
  async run(input: HarnessRunInput): Promise<HarnessRunResult> {
    this.#commitTurn = input.commitTurn;
    const decision = this.#wait(input.signal);
    const { readyTimeoutMs, heartbeatTimeoutMs } = this.#driver;
    this.#readyDeadline.arm(readyTimeoutMs, () => this.#fail(`the supervisor sent no ready within ${readyTimeoutMs} ms`));
    // Only what the harness needs to place itself: no fence token, no owner id, no credential.
    this.#post({
      type: "start",
      protocol: PROTOCOL,
      scope: { environmentId: input.scope.environmentId, sessionId: input.scope.sessionId },
      generation: input.fence.generation,
      attempt: input.attempt,
      restored: input.restored === null ? null : { candidateId: input.restored.id, contentHash: input.restored.contentHash },
      heartbeatIntervalMs: Math.max(1, Math.floor(heartbeatTimeoutMs / 3)),
    });
    // Whatever the child said before this point (it may not wait for start) is handled now, with the deadline armed.
    this.#channel.listen((event) => this.#onEvent(event));
    const outcome = await decision;
    switch (outcome.type) {
      case "completed":
        return { type: "completed" };
      case "abort":
        await this.#stop();
        return { type: "failed", error: `the run was stopped (${outcome.reason})` };
      case "ended":
        return this.#classifyEnd(outcome.end, input);
      default:
        return { type: "failed", error: await this.#killFor(outcome.type === "fault" ? outcome.error : "unexpected drained") };
    }
  }

  /** After `completed`: drain within `drainTimeoutMs`, then a bounded stop. The process is gone when this resolves `drained`. */
  async drain(signal: AbortSignal): Promise<DrainResult> {
    if (this.#end !== null) {
      // Exiting cleanly after `completed` leaves no writer behind, which is all a drain asks.
      if (this.#endedIn === "completed" && this.#end.type === "exited" && this.#end.exitCode === 0) return { type: "drained" };
      return { type: "failed", error: this.#fault ?? `the supervisor ${describeEnd(this.#end)} before drain${this.#stderr()}` };
    }
    if (this.#phase === "stopping") return { type: "failed", error: await this.#killFor(this.#fault ?? "the supervisor is stopping") };
    if (this.#phase !== "completed") return { type: "failed", error: `drain requested while the supervisor is ${this.#phase}` };
    this.#phase = "draining";
    const decision = this.#wait(signal);
    const { drainTimeoutMs } = this.#driver;
    this.#drainDeadline.arm(drainTimeoutMs, () => this.#fail(`the supervisor did not drain within ${drainTimeoutMs} ms`));
    this.#post({ type: "drain" });
    const outcome = await decision;
    switch (outcome.type) {
      case "drained":
        // Writers are quiesced; the exit (or, failing that, the kill) makes sure no late one appears before the checkpoint.
        return (await this.#stop())
          ? { type: "drained" }
          : { type: "failed", error: `the supervisor did not end within ${this.#timings.killTimeoutMs} ms of a kill` };
      case "ended":
        if (outcome.end.type === "exited" && outcome.end.exitCode === 0) return { type: "drained" };
        return { type: "failed", error: `the supervisor ${describeEnd(outcome.end)} while draining${this.#stderr()}` };
      case "abort":
        return { type: "failed", error: await this.#killFor(`the drain was aborted (${outcome.reason})`) };
      default:
        return { type: "failed", error: await this.#killFor(outcome.type === "fault" ? outcome.error : "unexpected completed") };
    }
  }

  // ---- events ---------------------------------------------------------------

  #onEvent(event: ChannelEvent): void {
    if (event.type === "ended") this.#onEnded(event.end);
    else if (this.#stopping) return;
    else if (event.type === "protocol_error") this.#fail(`protocol error: ${event.error}`);
    else this.#onMessage(event.message);
  }

  #onMessage(message: ChildMessage): void {
    const phase = this.#phase;
    if (phase === "running") this.#armHeartbeat();
    if (!ACCEPTS[phase].has(message.type)) {
      this.#fail(`protocol error: unexpected ${message.type} while ${phase}`);
      return;
    }
    switch (message.type) {
      case "ready":
        this.#onReady(message);
        break;
      case "heartbeat":
        break;
      case "checkpoint_request":
        this.#onCheckpointRequest(message.turnId);
        break;
      case "completed":
        this.#heartbeatDeadline.cancel();
        this.#phase = "completed";
        this.#resolve({ type: "completed" });
        break;
      case "drained":
        this.#drainDeadline.cancel();
        this.#resolve({ type: "drained" });
        break;
      case "failed":
        this.#fail(`the supervisor failed: ${message.error.slice(0, MAX_ERROR_LENGTH)}`);
        break;
    }
  }

  #onReady(ready: Extract<ChildMessage, { type: "ready" }>): void {
    const expected = this.#driver.harness;
    if (ready.protocol !== PROTOCOL) {
      this.#fail(`the supervisor speaks ${preview(ready.protocol)}, expected ${PROTOCOL}`);
      return;
    }
    if (ready.harness.id !== expected.id || ready.harness.version !== expected.version) {
      const got = preview(`${ready.harness.id}@${ready.harness.version}`);
      this.#fail(`the supervisor runs harness ${got}, the profile expects ${expected.id}@${expected.version}`);
      return;
    }
    this.#readyDeadline.cancel();
    this.#phase = "running";
    this.#armHeartbeat();
  }

  #armHeartbeat(): void {
    const ms = this.#driver.heartbeatTimeoutMs;
    this.#heartbeatDeadline.arm(ms, () => this.#fail(`heartbeat timeout: nothing from the supervisor for ${ms} ms`));
  }

  /** One request in flight at a time; outside the run phase the host is not committing, so the answer is `not_running`. */
  #onCheckpointRequest(turnId: string): void {
    if (this.#commitInFlight) {
      this.#fail(`protocol error: checkpoint_request ${preview(turnId)} while another is in flight`);
      return;
    }
    const commit = this.#phase === "running" ? this.#commitTurn : null;
    if (commit === null) {
      this.#answer(turnId, { type: "rejected", reason: "not_running" });
      return;
    }
    this.#commitInFlight = true;
    void commit(turnId)
      .catch((err: unknown): TurnCommitResult => ({ type: "failed", error: describeError(err) }))
      .then((result) => {
        this.#commitInFlight = false;
        this.#answer(turnId, outcomeOf(result));
      });
  }

  #answer(turnId: string, result: CheckpointOutcome): void {
    if (this.#end === null && !this.#stopping) this.#post({ type: "checkpoint_result", turnId, result });
  }

  #onEnded(end: SandboxProcessEnd): void {
    this.#end = end;
    this.#endedIn = this.#phase;
    this.#cancelDeadlines();
    this.#resolve({ type: "ended", end });
  }

  // ---- decisions ------------------------------------------------------------

  /** Registers the one waiter (run or drain); an abort of `signal` decides it too. */
  #wait(signal: AbortSignal): Promise<Decision> {
    return new Promise<Decision>((resolve) => {
      const onAbort = () => this.#resolve({ type: "abort", reason: describeError(signal.reason) });
      this.#decide = (decision) => {
        signal.removeEventListener("abort", onAbort);
        this.#decide = null;
        resolve(decision);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      if (signal.aborted) onAbort();
    });
  }

  #resolve(decision: Decision): void {
    this.#decide?.(decision);
  }

  /** A fault: the waiter kills and reports it; with no waiter (between run and drain) it is recorded and the kill starts now. */
  #fail(error: string): void {
    this.#cancelDeadlines();
    // Nothing the child says after a fault changes the outcome.
    this.#stopping = true;
    if (this.#decide !== null) {
      this.#resolve({ type: "fault", error });
      return;
    }
    this.#fault ??= error;
    void this.#kill();
  }

  // ---- ending the process ---------------------------------------------------

  /** Kills and returns `error`, noting when the process would not even die. */
  async #killFor(error: string): Promise<string> {
    const gone = await this.#kill();
    return gone ? error : `${error} (and it did not end within ${this.#timings.killTimeoutMs} ms of a kill)`;
  }

  /** SIGKILL to the supervisor and its tree; true once the process is gone within `killTimeoutMs`. */
  async #kill(): Promise<boolean> {
    this.#enterStopping();
    if (this.#end !== null) return true;
    await this.#channel.kill().catch(() => {});
    return within(this.#scheduler, this.#timings.killTimeoutMs, this.#channel.done);
  }

  /** `stop` and end of stdin, a bounded wait for the exit, then the kill. */
  async #stop(): Promise<boolean> {
    this.#enterStopping();
    if (this.#end !== null) return true;
    this.#post({ type: "stop" });
    try {
      this.#channel.closeStdin();
    } catch {
      // already closed: the exit (or the kill below) follows
    }
    if (await within(this.#scheduler, this.#timings.stopTimeoutMs, this.#channel.done)) return true;
    return this.#kill();
  }

  #enterStopping(): void {
    this.#stopping = true;
    this.#phase = "stopping";
    this.#cancelDeadlines();
  }

  #cancelDeadlines(): void {
    this.#readyDeadline.cancel();
    this.#heartbeatDeadline.cancel();
    this.#drainDeadline.cancel();
  }

  /**
   * Fire and forget: a child that stops reading stdin must not block the
   * host on a full pipe. A failed write means the process is going away; its
   * end event (or a deadline) decides what happens next.
   */
  #post(message: Parameters<SupervisorChannel["send"]>[0]): void {
    this.#channel.send(message).catch(() => {});
  }

  /**
   * An end nobody asked for. With a probe, a sandbox that is gone makes it
   * `sandbox_lost` (the host cold-restarts from the last publication);
   * without one, only an outside kill is read as the sandbox going away.
   */
  async #classifyEnd(end: SandboxProcessEnd, input: HarnessRunInput): Promise<HarnessRunResult> {
    const what = `the supervisor ${describeEnd(end)} before completing${this.#stderr()}`;
    if (this.#probe !== null) {
      const target = { scope: input.scope, fence: input.fence, lease: input.sandbox };
      const lost = await sandboxLoss(this.#probe, this.#scheduler, this.#timings.lossSettleMs, target);
      return lost === null ? { type: "failed", error: what } : { type: "sandbox_lost", reason: `${lost}; ${what}` };
    }
    return end.type === "killed" ? { type: "sandbox_lost", reason: what } : { type: "failed", error: what };
  }

  #stderr(): string {
    const tail = this.#channel.stderrTail;
    return tail === "" ? "" : `; stderr: ${preview(tail, 500)}`;
  }
}

function outcomeOf(result: TurnCommitResult): CheckpointOutcome {
  if (result.type === "failed") return { type: "failed", error: result.error.slice(0, MAX_ERROR_LENGTH) };
  return result;
}

export function describeEnd(end: SandboxProcessEnd): string {
  if (end.type === "exited") return `exited with code ${end.exitCode}${end.signal ? ` (${end.signal})` : ""}`;
  if (end.type === "killed") return "was killed";
  return `failed (${end.message})`;
}

export function describeError(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
