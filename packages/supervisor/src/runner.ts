/**
 * SupervisedHarnessRunner: the `openma_supervised` lane of the Runtime Host.
 * It starts the profile's supervisor command inside the acquired sandbox
 * (through any SandboxProcessPort: bubblewrap, Docker, ...) and speaks
 * openma-harness-supervisor-v1 with it (see protocol.ts and
 * docs/supervisor-protocol.md).
 *
 * The runner receives a FenceIdentity, never the fence token, and sends the
 * child only what protocol.ts's `start` lists; the child's argv is the
 * profile's supervisor command and its environment names the protocol. A
 * turn commit is a request: the host checkpoints and publishes under its own
 * fence and answers. Every bound the runner enforces ends in a hard kill.
 *
 * `run()` returns `completed` with the process still alive; `drain()` of the
 * same sandbox lease finishes it. Sessions are keyed by the sandbox lease,
 * so one runner serves any number of concurrent scopes.
 */
import type { ManagedSandboxLease, ManagedSandboxPort, SandboxProcessPort } from "@openma/contract";
import type { HarnessRunInput, HarnessRunner, HarnessRunResult } from "@openma/host";
import type { Scheduler } from "@openma/time";
import { SupervisorChannel, type SupervisorLogEntry } from "./channel.ts";
import { type SandboxProbe, sandboxLoss } from "./loss.ts";
import { PROTOCOL } from "./protocol.ts";
import { type DrainResult, describeError, type SupervisedDriver, SupervisorSession } from "./session.ts";

export interface SupervisedHarnessRunnerOptions {
  processes: SandboxProcessPort;
  scheduler: Scheduler;
  /** After `stop`, how long the supervisor may take to exit before it is killed. Keep it below the host's `abortGraceMs`. */
  stopTimeoutMs?: number;
  /** After a kill, how long to wait for the process to be gone. */
  killTimeoutMs?: number;
  /** With `sandbox`: how long after an unexpected end the sandbox may take to look gone (see loss.ts). */
  lossSettleMs?: number;
  /**
   * The sandbox port, asked once when the supervisor ends unexpectedly: a
   * `lost` heartbeat makes the run `sandbox_lost` (the host cold-restarts),
   * anything else `failed`. Without it only an outside kill counts as loss.
   */
  sandbox?: Pick<ManagedSandboxPort, "heartbeat">;
  /** Protocol traffic, stderr lines and process ends, per sandbox runtime (for logs and tests). */
  onLog?: (runtimeId: string, entry: SupervisorLogEntry) => void;
}

export const DEFAULT_STOP_TIMEOUT_MS = 5_000;
export const DEFAULT_KILL_TIMEOUT_MS = 10_000;
export const DEFAULT_LOSS_SETTLE_MS = 2_000;
/** Ended sessions kept for a drain that may never come (the host skips drain after an interrupted run). */
const MAX_ENDED_SESSIONS = 16;

export class SupervisedHarnessRunner implements HarnessRunner {
  readonly #options: SupervisedHarnessRunnerOptions;
  readonly #sessions = new Map<string, SupervisorSession>();

  constructor(options: SupervisedHarnessRunnerOptions) {
    this.#options = options;
  }

  async run(input: HarnessRunInput): Promise<HarnessRunResult> {
    const driver = input.plan.driver;
    if (driver.type !== "openma_supervised") return { type: "failed", error: `the supervised runner cannot run a ${driver.type} driver` };
    if (driver.protocol !== PROTOCOL) return { type: "failed", error: `unsupported supervisor protocol ${driver.protocol}` };
    if (input.signal.aborted) return { type: "failed", error: "the run was stopped before the supervisor started" };
    const key = leaseKey(input.sandbox);
    const existing = this.#sessions.get(key);
    if (existing && !existing.ended)
      return { type: "failed", error: `a supervisor is already running in sandbox ${input.sandbox.runtimeId}` };
    this.#sessions.delete(key);
    this.#sweepEnded();

    const { onLog } = this.#options;
    const channel = new SupervisorChannel((entry) => onLog?.(input.sandbox.runtimeId, entry));
    const session = new SupervisorSession({
      channel,
      driver,
      scheduler: this.#options.scheduler,
      timings: {
        stopTimeoutMs: this.#options.stopTimeoutMs ?? DEFAULT_STOP_TIMEOUT_MS,
        killTimeoutMs: this.#options.killTimeoutMs ?? DEFAULT_KILL_TIMEOUT_MS,
        lossSettleMs: this.#lossSettleMs,
      },
      probe: this.#probe(),
    });
    const started = await this.#spawn(input, driver, channel);
    if (started !== null) return this.#spawnFailed(input, started);
    this.#sessions.set(key, session);
    const result = await session.run(input);
    // Only a completed run leaves a process for drain(); every other outcome has already ended (or killed) it.
    if (result.type !== "completed") this.#sessions.delete(key);
    return result;
  }

  async drain(input: Parameters<HarnessRunner["drain"]>[0]): Promise<DrainResult> {
    const key = leaseKey(input.sandbox);
    const session = this.#sessions.get(key);
    if (session === undefined) return { type: "failed", error: `no supervisor is running in sandbox ${input.sandbox.runtimeId}` };
    try {
      return await session.drain(input.signal);
    } finally {
      if (this.#sessions.get(key) === session) this.#sessions.delete(key);
    }
  }

  /** Starts the supervisor; `null` on success, else why it could not start. */
  async #spawn(input: HarnessRunInput, driver: SupervisedDriver, channel: SupervisorChannel): Promise<string | null> {
    const { command, args = [], cwd } = driver.supervisor;
    try {
      const spawned = await this.#options.processes.spawn(input.sandbox, {
        command: [command, ...args],
        cwd,
        // Non-secret by construction; the port's base environment is the sandbox's own.
        env: { OPENMA_SUPERVISOR_PROTOCOL: PROTOCOL },
        onOutput: channel.onOutput,
      });
      if (spawned.type === "error") return spawned.message;
      channel.attach(spawned.process);
      return null;
    } catch (err) {
      return describeError(err);
    }
  }

  async #spawnFailed(input: HarnessRunInput, message: string): Promise<HarnessRunResult> {
    const what = `the supervisor could not be started: ${message}`;
    const probe = this.#probe();
    if (probe === null) return { type: "failed", error: what };
    const target = { scope: input.scope, fence: input.fence, lease: input.sandbox };
    const lost = await sandboxLoss(probe, this.#options.scheduler, this.#lossSettleMs, target);
    return lost === null ? { type: "failed", error: what } : { type: "sandbox_lost", reason: `${lost}; ${what}` };
  }

  get #lossSettleMs(): number {
    return this.#options.lossSettleMs ?? DEFAULT_LOSS_SETTLE_MS;
  }

  #probe(): SandboxProbe | null {
    const sandbox = this.#options.sandbox;
    if (sandbox === undefined) return null;
    return ({ scope, fence, lease }) => sandbox.heartbeat({ scope, fence, lease, signal: new AbortController().signal });
  }

  #sweepEnded(): void {
    const ended = [...this.#sessions].filter(([, session]) => session.ended);
    for (const [key] of ended.slice(0, Math.max(0, ended.length - MAX_ENDED_SESSIONS))) this.#sessions.delete(key);
  }
}

function leaseKey(lease: ManagedSandboxLease): string {
  return JSON.stringify([lease.provider, lease.runtimeId]);
}
