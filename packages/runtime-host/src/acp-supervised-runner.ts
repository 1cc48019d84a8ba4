/**
 * The ACP harness placement of the `openma_supervised` lane (ADR 0034): a
 * HarnessRunner that runs the in-sandbox ACP harness (acp-harness/main.ts)
 * under the supervisor protocol, through @openma/supervisor's host runner.
 *
 * Per claimed Work item it resolves the session's pinned ACP release, opens
 * (or reuses) the host-side model gateway for that agent's key style, and
 * starts the harness with a launch line on stdin that carries the item's
 * sessions token; the supervisor protocol follows on the same pipe. The
 * harness's ready must name the pinned release. This runner keeps what the
 * seed leaves to the outer Runtime Host: the Work claim (it heartbeats the
 * item's lease and stops the item once the run completed; a failed run's
 * item is left to lapse and be reclaimed), the fenced publication (the
 * harness only requests commits) and the hard kill (the supervisor runner's
 * bounds).
 */
import Anthropic from "@anthropic-ai/sdk";
import { type PinnedAcpRelease, setupForRelease } from "@openma/acp";
import type { ManagedSandboxLease, ManagedSandboxPort, RuntimeResourceScope, SandboxProcessPort } from "@openma/contract";
import type { HarnessRunInput, HarnessRunner, HarnessRunResult } from "@openma/host";
import type { ModelKeyStyle } from "@openma/model-gateway";
import { type DrainResult, SupervisedHarnessRunner, type SupervisorLogEntry } from "@openma/supervisor";
import type { Scheduler } from "@openma/time";
import { ACP_PLACEHOLDER_KEY, ACP_SANDBOX_PATHS, type AcpHarnessLaunch } from "./acp-harness/launch.ts";
import type { WorkTicket } from "./ama-worker-runner.ts";

export interface AcpSupervisedRunnerOptions {
  processes: SandboxProcessPort;
  scheduler: Scheduler;
  /** Tells a lost sandbox from a crashed harness (the host cold-restarts the first). */
  sandbox?: Pick<ManagedSandboxPort, "heartbeat">;
  ticketFor(scope: RuntimeResourceScope): WorkTicket | undefined;
  /** The release the session pinned at creation (sessions.acp_release), or null. */
  pinnedRelease(sessionId: string): Promise<PinnedAcpRelease | null>;
  /** The model id the session's agent version names, or null. */
  agentModel(sessionId: string): Promise<string | null>;
  /** Whether the agent cache holds exactly that tarball (same integrity). */
  installed(pinned: PinnedAcpRelease): Promise<boolean>;
  /** The sandbox path of the model gateway socket for this key style (opened on first use). */
  modelSocket(keyStyle: ModelKeyStyle): Promise<string>;
  /** The control plane as the host reaches it (the Work lease heartbeat and stop). */
  apiUrl: string;
  /** How long the harness stays after the session went idle with no more input. */
  maxIdleMs: number;
  onLog?: (runtimeId: string, entry: SupervisorLogEntry) => void;
}

const DEFAULT_LEASE_BEAT_MS = 5_000;

export class AcpSupervisedRunner implements HarnessRunner {
  readonly #options: AcpSupervisedRunnerOptions;
  readonly #supervised: SupervisedHarnessRunner;
  /** The launch line of the run about to start in each sandbox (written before the protocol's start). */
  readonly #launches = new Map<string, string>();

  constructor(options: AcpSupervisedRunnerOptions) {
    this.#options = options;
    this.#supervised = new SupervisedHarnessRunner({
      processes: this.#launchingProcesses(options.processes),
      scheduler: options.scheduler,
      ...(options.sandbox ? { sandbox: options.sandbox } : {}),
      ...(options.onLog ? { onLog: options.onLog } : {}),
    });
  }

  async run(input: HarnessRunInput): Promise<HarnessRunResult> {
    const driver = input.plan.driver;
    if (driver.type !== "openma_supervised") return { type: "failed", error: `the ACP runner cannot run a ${driver.type} driver` };
    const ticket = this.#options.ticketFor(input.scope);
    if (ticket === undefined) return { type: "failed", error: "no claimed work item for this session" };
    const pinned = await this.#options.pinnedRelease(input.scope.sessionId);
    if (pinned === null) return { type: "failed", error: `session ${input.scope.sessionId} pinned no ACP agent release` };
    if (!(await this.#options.installed(pinned)))
      return {
        type: "failed",
        error: `the session's ACP agent ${pinned.package}@${pinned.version} (${pinned.integrity}) is not in the agent cache`,
      };
    const setup = setupForRelease(pinned.id, { origin: "http://127.0.0.1", key: ACP_PLACEHOLDER_KEY });
    if (setup === null) return { type: "failed", error: `no model setup is known for ACP agent ${pinned.id}` };
    const launch: AcpHarnessLaunch = {
      type: "acp_launch",
      sessionId: input.scope.sessionId,
      sessionsToken: ticket.sessionsToken,
      apiSocket: ACP_SANDBOX_PATHS.apiSocket,
      modelSocket: await this.#options.modelSocket(setup.keyStyle),
      agent: { id: pinned.id, version: pinned.version },
      model: await this.#options.agentModel(input.scope.sessionId),
      maxIdleMs: this.#options.maxIdleMs,
    };
    const lease = new AbortController();
    const stopLease = () => lease.abort();
    input.signal.addEventListener("abort", stopLease, { once: true });
    const signal = AbortSignal.any([input.signal, lease.signal]);
    const keeper = keepWorkLease(this.#options, ticket, lease, this.#options.scheduler);
    const key = leaseKey(input.sandbox);
    this.#launches.set(key, `${JSON.stringify(launch)}\n`);
    let result: HarnessRunResult;
    try {
      // The harness must run the release the session pinned: its ready is checked against it.
      const plan = { ...input.plan, driver: { ...driver, harness: { id: pinned.id, version: pinned.version } } };
      result = await this.#supervised.run({ ...input, plan, signal });
    } finally {
      this.#launches.delete(key);
      input.signal.removeEventListener("abort", stopLease);
      lease.abort();
      await keeper;
    }
    // Done with the item: stop it (new input after this point requeues the session). A failed run's item lapses and is reclaimed.
    if (result.type === "completed") await stopWork(this.#options.apiUrl, ticket).catch(() => {});
    return result;
  }

  drain(input: Parameters<HarnessRunner["drain"]>[0]): Promise<DrainResult> {
    return this.#supervised.drain(input);
  }

  /** Writes the run's launch line first, so the supervisor protocol's `start` follows it on the same stdin. */
  #launchingProcesses(inner: SandboxProcessPort): SandboxProcessPort {
    return {
      spawn: async (lease, spawnInput) => {
        const line = this.#launches.get(leaseKey(lease));
        if (line === undefined) return { type: "error", message: "no ACP launch is pending for this sandbox" };
        const started = await inner.spawn(lease, spawnInput);
        if (started.type !== "started") return started;
        try {
          await started.process.write(line);
        } catch (err) {
          await started.process.kill().catch(() => {});
          return { type: "error", message: `the ACP harness did not take its launch line: ${String(err)}` };
        }
        return started;
      },
    };
  }
}

function leaseKey(lease: ManagedSandboxLease): string {
  return JSON.stringify([lease.provider, lease.runtimeId]);
}

const itemClient = (apiUrl: string, ticket: WorkTicket) =>
  new Anthropic({ baseURL: apiUrl, apiKey: null, authToken: ticket.sessionsToken, maxRetries: 2 });

/**
 * Heartbeats the Work item's lease with its sessions token until `lease` is
 * aborted; a lost lease (412, or the item stopping) aborts `lease`, which
 * stops the run (a reclaim rotates the token, so the harness is refused anyway).
 */
async function keepWorkLease(api: { apiUrl: string }, ticket: WorkTicket, lease: AbortController, scheduler: Scheduler): Promise<void> {
  const client = itemClient(api.apiUrl, ticket);
  let last = "NO_HEARTBEAT";
  let every = DEFAULT_LEASE_BEAT_MS;
  while (!lease.signal.aborted) {
    try {
      const beat = await client.beta.environments.work.heartbeat(
        ticket.workId,
        { environment_id: ticket.environmentId, expected_last_heartbeat: last },
        { signal: lease.signal },
      );
      last = beat.last_heartbeat;
      if (beat.ttl_seconds > 0) every = Math.max(1_000, Math.min((beat.ttl_seconds * 1000) / 3, DEFAULT_LEASE_BEAT_MS));
      if (beat.state === "stopping" || beat.state === "stopped" || !beat.lease_extended) lease.abort();
    } catch (err) {
      if (lease.signal.aborted) return;
      if ((err as { status?: number }).status === 412) {
        lease.abort();
        return;
      }
    }
    await scheduler.sleep(every, lease.signal).catch(() => {});
  }
}

async function stopWork(apiUrl: string, ticket: WorkTicket): Promise<void> {
  await itemClient(apiUrl, ticket).beta.environments.work.stop(ticket.workId, { environment_id: ticket.environmentId, force: true });
}
