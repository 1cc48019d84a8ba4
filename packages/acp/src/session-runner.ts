/**
 * One Session's ACP harness: one ACP child across turns, native state bound,
 * restored and captured, recovery decided once per start.
 *
 * It runs where the agent runs (the supervised lane's process inside the
 * sandbox) and touches the outside only through its ports: `spawn` (the ACP
 * child), `state` (writeFile + exec), `publish` (Managed Agents events to the
 * Session), and `commitWorkspace` (the supervisor's checkpoint request; the
 * host does the fenced publication).
 *
 * Per completed turn, in the contract's order:
 *   1. advance `last_completed_turn_id` in acp-session.json,
 *   2. capture the declared native artifacts,
 *   3. publish the turn's events through `session.status_idle`,
 *   4. ask for the fenced workspace commit.
 * A crash after 1–2 and before 4 leaves the restored marker behind the
 * canonical log (the previous candidate is restored): stale → recovery. A
 * crash after 3 and before 4 likewise. Never a silent loss, never a partial
 * candidate (the host commits only whole candidates).
 */
import type { ContentBlock, PromptResponse } from "@agentclientprotocol/sdk/unstable";
import { AcpAgentClient, AcpResumeError, type AcpSpawn } from "./agent-client.ts";
import { type AcpStateBinding, bindAcpState } from "./binding.ts";
import { AcpNativeState, type AcpStatePort } from "./native-state.ts";
import { type EventDraft, modelRequestEnd, TurnProjection } from "./projection.ts";
import { buildRecoveryPrompt, type CanonicalEvent, RECOVERY_WARNING_MESSAGE, RECOVERY_WARNING_SOURCE } from "./recovery-prompt.ts";
import { type AcpRecoveryReason, canonicalWatermark, prepareResume } from "./watermarks.ts";

export interface AcpAgentLaunch {
  /** Registry id (selects the native-state profile). */
  id?: string;
  command: string;
  args: readonly string[];
  /** Non-secret settings (model name, gateway URL, placeholder key). Profile variables are added. */
  env: Readonly<Record<string, string>>;
}

export interface AcpSessionRunnerOptions {
  sessionId: string;
  agent: AcpAgentLaunch;
  spawn: AcpSpawn;
  state: AcpStatePort;
  /** The canonical event log at start, ascending. */
  history: readonly CanonicalEvent[];
  publish: (events: EventDraft[]) => Promise<void>;
  commitWorkspace: (turnId: string) => Promise<void>;
  workspaceRoot?: string;
  ephemeralRoot?: string;
  recoveryBudget?: number;
  /**
   * Writes the agent's configuration (model endpoint, permissions) into the
   * live native home before it starts, on every placement: configuration is
   * rebuilt, never restored from a checkpoint.
   */
  configure?: (binding: AcpStateBinding, state: AcpStatePort) => Promise<void>;
}

export type AcpStartOutcome = { mode: "new" | "resume" | "load"; recovery: AcpRecoveryReason | null; acpSessionId: string };

export interface AcpTurnResult {
  stopReason: PromptResponse["stopReason"];
  events: EventDraft[];
}

export class AcpSessionRunner {
  private client: AcpAgentClient | null = null;
  private acpSessionId: string | null = null;
  private recovery: AcpRecoveryReason | null = null;
  private projection: TurnProjection | null = null;
  private counter = 0;
  private readonly native: AcpNativeState;
  private readonly cwd: string;

  constructor(private readonly options: AcpSessionRunnerOptions) {
    const binding = bindAcpState({
      sessionId: options.sessionId,
      agent: { ...(options.agent.id ? { id: options.agent.id } : {}), command: options.agent.command },
      ...(options.workspaceRoot ? { workspaceRoot: options.workspaceRoot } : {}),
      ...(options.ephemeralRoot ? { ephemeralRoot: options.ephemeralRoot } : {}),
    });
    this.native = new AcpNativeState(options.state, binding);
    this.cwd = options.workspaceRoot ?? "/workspace";
  }

  get binding() {
    return this.native.binding;
  }

  private nextId = (): string => `sevt_${this.options.sessionId}_${Date.now().toString(36)}_${++this.counter}`;

  /** Binds, decides resume vs recovery, starts the child and opens its ACP session. */
  async start(): Promise<AcpStartOutcome> {
    await this.native.materialize();
    const canonical = canonicalWatermark(this.options.history);
    const { plan } = await prepareResume(this.native, canonical);
    const b = this.native.binding;
    await this.options.configure?.(b, this.options.state);
    this.client = await AcpAgentClient.start(
      this.options.spawn,
      { command: this.options.agent.command, args: this.options.agent.args, cwd: this.cwd, env: { ...this.options.agent.env, ...b.env } },
      { onUpdate: (n) => this.projection?.apply(n.update) },
    );
    let mode: AcpStartOutcome["mode"] = "new";
    let recovery: AcpRecoveryReason | null = plan.type === "new" ? plan.recovery : null;
    if (plan.type === "resume") {
      try {
        mode = await this.client.continueSession(plan.acpSessionId, this.cwd);
        this.acpSessionId = plan.acpSessionId;
      } catch (error) {
        if (!(error instanceof AcpResumeError)) throw error;
        // The agent could not continue from its restored files: canonical recovery, once.
        recovery = canonical.completedTurnId === undefined ? null : "native-state-missing";
      }
    }
    if (this.acpSessionId === null) this.acpSessionId = await this.client.newSession(this.cwd);
    this.recovery = recovery;
    await this.native.writeCheckpoint({
      acpSessionId: this.acpSessionId,
      ...(recovery === null && canonical.completedTurnId !== undefined ? { lastCompletedTurnId: canonical.completedTurnId } : {}),
    });
    return { mode, recovery, acpSessionId: this.acpSessionId };
  }

  /**
   * Runs one turn for the canonical input event `turnId` and commits it.
   * The first turn after a recovery start carries the recovery prompt and
   * publishes the one `session.warning`.
   */
  async runTurn(turnId: string, prompt: string): Promise<AcpTurnResult> {
    const client = this.client;
    const sid = this.acpSessionId;
    if (!client || !sid) throw new Error("the ACP session is not started");
    const lead: EventDraft[] = [];
    let text = prompt;
    if (this.recovery) {
      const reason = this.recovery;
      this.recovery = null;
      text = buildRecoveryPrompt({
        reason,
        events: this.options.history,
        currentPrompt: prompt,
        ...(this.options.recoveryBudget ? { budget: this.options.recoveryBudget } : {}),
      });
      lead.push({
        id: this.nextId(),
        type: "session.warning",
        source: RECOVERY_WARNING_SOURCE,
        message: RECOVERY_WARNING_MESSAGE,
        details: { reason },
      });
    }
    const start: EventDraft = { id: this.nextId(), type: "span.model_request_start" };
    await this.options.publish([...lead, { id: this.nextId(), type: "session.status_running" }, start]);
    this.projection = new TurnProjection(this.nextId);
    let response: PromptResponse | null = null;
    let events: EventDraft[] = [];
    try {
      response = await client.prompt(sid, [{ type: "text", text } satisfies ContentBlock]);
    } finally {
      events = this.projection.take();
      this.projection = null;
      events.push({ id: this.nextId(), type: "span.model_request_end", ...modelRequestEnd(start.id, response) });
      if (response) {
        // 1–2: marker, then the artifacts; 3: the idle; 4: the fenced workspace commit.
        await this.native.writeCheckpoint({ acpSessionId: sid, lastCompletedTurnId: turnId });
        await this.native.capture();
        const stop = response.stopReason === "refusal" ? "refusal" : "end_turn";
        events.push({ id: this.nextId(), type: "session.status_idle", stop_reason: { type: stop } });
        await this.options.publish(events);
        await this.options.commitWorkspace(turnId);
      } else {
        await this.options.publish(events);
      }
    }
    return { stopReason: (response as PromptResponse).stopReason, events: [...lead, ...events] };
  }

  /** `session/cancel` for the running turn (a user interrupt). */
  async interrupt(): Promise<void> {
    if (this.client && this.acpSessionId) await this.client.cancel(this.acpSessionId);
  }

  /** Graceful end of this placement: close, stop the child, drop the live home; the durable copy stays. */
  async shutdown(): Promise<void> {
    if (this.client) {
      if (this.acpSessionId) await this.client.close(this.acpSessionId).catch(() => {});
      await this.client.dispose();
      this.client = null;
    }
    await this.native.release();
  }

  /** Session deletion: both copies go. */
  async destroy(): Promise<void> {
    await this.shutdown();
    await this.native.destroy();
  }
}
