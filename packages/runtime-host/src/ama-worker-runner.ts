/**
 * The `ama_worker` HarnessRunner: inside the acquired sandbox it starts the
 * unmodified official EnvironmentWorker for the one work item this run
 * claimed (`sandbox/ama-worker.mjs` calls `handleItem()`), and maps what
 * happens to the host's vocabulary.
 *
 * Authority is split as the seed asks: the worker's own lease heartbeat
 * gates its tool results (a reclaimed item rotates the sessions token, so a
 * stale worker is refused by the API), while publication stays with the
 * host's fence: this runner only asks `commitTurn` at each turn boundary
 * (a `session.status_idle` that ends the turn, on the session's event
 * stream) and never sees the fence token. The work secret reaches the worker over stdin only.
 */
import Anthropic from "@anthropic-ai/sdk";
import type { ManagedSandboxLease, RuntimeResourceScope, SandboxProcessEnd, SandboxProcessPort } from "@openma/contract";
import { TailBuffer } from "@openma/driver-kit";
import type { HarnessRunInput, HarnessRunner, HarnessRunResult } from "@openma/host";
import { realScheduler, type Scheduler } from "@openma/time";

/** A claimed Environment Work item, as the poller yielded it. `secret` is a credential: never log it. */
export interface WorkTicket {
  workId: string;
  environmentId: string;
  sessionId: string;
  secret: string;
  /** The sessions token inside `secret` (for the host's own turn-boundary stream). */
  sessionsToken: string;
}

export interface AmaWorkerRunnerOptions {
  processes: SandboxProcessPort;
  /** The ticket of the run for this scope (set by the work loop before `host.run`). */
  ticketFor(scope: RuntimeResourceScope): WorkTicket | undefined;
  /** The control plane as the host reaches it (turn-boundary stream). */
  apiUrl: string;
  /**
   * How the worker reaches the control plane: the bridge socket inside a
   * local sandbox, or the control plane's public URL from a remote runtime.
   */
  apiSocketPath?: string;
  workerApiUrl?: string;
  /** Forwarded to the worker: how long it stays after the session went idle at `end_turn` (SDK default 60 s). */
  maxIdleMs?: number;
  /** Worker stderr lines (diagnostics; the worker never prints credentials). */
  onLog?: (line: string, scope: RuntimeResourceScope) => void;
  /** Paces reconnects of the turn-boundary stream. */
  scheduler?: Scheduler;
  /** The turn-boundary stream's fetch (default: the global one); tests wrap it to observe the wire. */
  fetch?: typeof fetch;
}

const STDERR_TAIL = 8 * 1024;
const RECONNECT_MS = 500;

export class AmaWorkerRunner implements HarnessRunner {
  readonly #options: AmaWorkerRunnerOptions;

  constructor(options: AmaWorkerRunnerOptions) {
    this.#options = options;
  }

  async run(input: HarnessRunInput): Promise<HarnessRunResult> {
    const ticket = this.#options.ticketFor(input.scope);
    if (ticket === undefined) return { type: "failed", error: "no claimed work item for this session" };
    if (input.plan.driver.type !== "ama_worker")
      return { type: "failed", error: `the ama_worker runner cannot run ${input.plan.driver.type}` };
    // The profile names the launcher (e.g. `node /openma/launcher/ama-worker.mjs`); it is part of the harness identity.
    const launcher = input.plan.driver.process;
    const stderr = new TailBuffer(STDERR_TAIL);
    let partial = "";
    const started = await this.#options.processes.spawn(input.sandbox, {
      command: [launcher.command, ...(launcher.args ?? [])],
      cwd: launcher.cwd ?? input.workspace.mountPath,
      onOutput: (stream, chunk) => {
        if (stream !== "stderr") return;
        stderr.push(Buffer.from(chunk));
        partial += Buffer.from(chunk).toString("utf8");
        const lines = partial.split("\n");
        partial = lines.pop() ?? "";
        for (const line of lines) if (line.trim()) this.#options.onLog?.(line, input.scope);
      },
    });
    if (started.type === "error") return lostOrFailed(started.message);
    const child = started.process;
    const stopWatching = new AbortController();
    const onAbort = () => void child.kill();
    input.signal.addEventListener("abort", onAbort, { once: true });
    try {
      await child.write(`${JSON.stringify(this.#launchMessage(ticket, input))}\n`);
      child.closeStdin();
    } catch {
      // The process died before reading its launch message: `done` says why.
    }
    const watcher = watchTurnBoundaries(
      this.#options,
      ticket,
      stopWatching.signal,
      (eventId) => input.commitTurn(eventId),
      this.#options.scheduler ?? realScheduler,
    );
    try {
      const end = await child.done;
      return resultOf(end, stderr.text());
    } finally {
      input.signal.removeEventListener("abort", onAbort);
      stopWatching.abort();
      await watcher;
    }
  }

  /** The worker has exited by the time the host drains (its run ends with the process): nothing writes any more. */
  async drain(_input: { sandbox: ManagedSandboxLease; signal: AbortSignal }): Promise<{ type: "drained" }> {
    return { type: "drained" };
  }

  #launchMessage(ticket: WorkTicket, input: HarnessRunInput) {
    return {
      env: {
        ANTHROPIC_WORK_ID: ticket.workId,
        ANTHROPIC_ENVIRONMENT_ID: ticket.environmentId,
        ANTHROPIC_SESSION_ID: ticket.sessionId,
        ANTHROPIC_WORK_SECRET: ticket.secret,
      },
      ...(this.#options.workerApiUrl !== undefined ? { apiUrl: this.#options.workerApiUrl } : { apiSocket: this.#options.apiSocketPath }),
      workdir: input.workspace.mountPath,
      ...(this.#options.maxIdleMs !== undefined ? { maxIdleMs: this.#options.maxIdleMs } : {}),
    };
  }
}

function resultOf(end: SandboxProcessEnd, stderr: string): HarnessRunResult {
  if (end.type === "exited" && end.exitCode === 0) return { type: "completed" };
  if (end.type === "exited") return { type: "failed", error: `the worker exited with code ${end.exitCode}: ${lastLine(stderr)}` };
  if (end.type === "killed") return { type: "failed", error: "the worker was killed" };
  return lostOrFailed(end.message);
}

/** A sandbox that is gone is a cold restart for the host; anything else is the worker's failure. */
function lostOrFailed(message: string): HarnessRunResult {
  return /not running/.test(message) ? { type: "sandbox_lost", reason: message } : { type: "failed", error: message };
}

function lastLine(text: string): string {
  return text.trim().split("\n").at(-1)?.slice(0, 500) ?? "";
}

/**
 * Follows the session's events with the item's sessions token and asks for a
 * turn commit at every `session.status_idle`. Reconnects after the last
 * event seen (Last-Event-ID), so a dropped stream misses no boundary.
 */
async function watchTurnBoundaries(
  api: Pick<AmaWorkerRunnerOptions, "apiUrl" | "fetch">,
  ticket: WorkTicket,
  signal: AbortSignal,
  commit: (eventId: string) => Promise<unknown>,
  scheduler: Scheduler,
): Promise<void> {
  const client = new Anthropic({
    baseURL: api.apiUrl,
    apiKey: null,
    authToken: ticket.sessionsToken,
    maxRetries: 2,
    ...(api.fetch ? { fetch: api.fetch } : {}),
  });
  let lastId: string | undefined;
  while (!signal.aborted) {
    try {
      const stream = await client.beta.sessions.events.stream(
        ticket.sessionId,
        {},
        { signal, headers: lastId ? { "Last-Event-ID": lastId } : {} },
      );
      for await (const event of stream) {
        if (!("id" in event)) continue;
        lastId = event.id;
        // `requires_action` pauses a turn for tool results (the worker is about to write): not a boundary.
        if (event.type === "session.status_idle" && event.stop_reason?.type !== "requires_action") await commit(event.id);
        if (event.type === "session.status_terminated") return;
      }
    } catch {
      if (signal.aborted) return;
      // The server restarts or the token was rotated: back off briefly; the final commit still covers the end.
      await scheduler.sleep(RECONNECT_MS, signal).catch(() => {});
    }
  }
}
