/**
 * GKE dispatch (`poll_unacked_then_dispatch`): a self-hosted environment's
 * Work is polled with the environment key; each session item gets a
 * SandboxClaim on a configured SandboxWarmPool and is handed to the bound
 * pod, whose official EnvironmentWorker (our ama_worker launcher) heartbeats
 * it, serves the session and stops it.
 *
 * The dispatcher acknowledges the item itself, with the item's own sessions
 * token, once the pod is bound and the launcher installed, right before it
 * starts the worker: from then on the item is held by its Work lease (the
 * server's first-beat grace, then the TTL of the pod's heartbeats), never by
 * `reclaim_older_than_ms`. An item left unacked while the pod's worker
 * started could be polled again by the next pass, and a poll rotates the
 * sessions token, fencing the pod out (its ack and heartbeats got 401) and
 * making its claim look spent. The ack with the item's token is also the
 * fence of the hand-off: it fails when another poll took the item meanwhile.
 * Until the ack, everything is bounded by `readyTimeoutMs`, which is why the
 * default reclaim window is that deadline: an unacked item older than it is
 * one its dispatcher gave up on.
 *
 * One claim per dispatch attempt, named by Work id and attempt number, so
 * a retried create is idempotent (AlreadyExists → the same claim). The
 * attempt is recorded on the claim (`openma.dev/handoff`): a dispatcher
 * killed before the hand-off started leaves a claim without it, which the
 * next dispatch of that Work reuses (same name, same attempt); a claim whose
 * hand-off started is spent, so the Work coming back (its lease lapsed: the
 * pod did not take it) means that claim is reaped and the next attempt gets
 * a new claim. Beyond `maxDispatches` attempts the Work is force-stopped.
 * Claims whose Work has stopped (the session's turn is over) are reaped on
 * every pass.
 *
 * The work secret reaches the pod only on the exec's stdin, into a file
 * private to the pod that the launcher opens and unlinks before it starts:
 * never in argv, the claim, the pod spec or its environment.
 */
import type Anthropic from "@anthropic-ai/sdk";
import { sessionsTokenFromSecret } from "@anthropic-ai/sdk/lib/environments/worker";
import type { WorkerBundle } from "@openma/runtime-host";
import { REMOTE_LAUNCHER } from "@openma/runtime-host";
import { realScheduler, type Scheduler } from "@openma/time";
import type { ClusterPort, SandboxClaim } from "./cluster.ts";

export const LABEL_ENVIRONMENT = "openma.dev/environment-id";
export const LABEL_SESSION = "openma.dev/session-id";
export const LABEL_WORK = "openma.dev/work-id";
export const LABEL_DISPATCH = "openma.dev/dispatch-count";
export const LABEL_MANAGED_BY = "app.kubernetes.io/managed-by";
export const MANAGED_BY = "openma-dispatch-gke";
export const HANDOFF_ANNOTATION = "openma.dev/handoff";

type Work = Anthropic.Beta.Environments.BetaSelfHostedWork;

export interface GkeDispatcherOptions {
  /** An SDK client of the control plane; the dispatcher authenticates with the environment key only. */
  client: Anthropic;
  environmentId: string;
  /** A credential: never logged, never given to a pod (the pod gets the item's own work secret). */
  environmentKey: string;
  cluster: ClusterPort;
  warmPool: string;
  /** How the in-pod worker reaches the control plane. */
  apiUrl: string;
  /** The launcher bundle installed into each pod (`buildWorkerBundle()` of @openma/runtime-host). */
  bundle: () => Promise<WorkerBundle>;
  /** Dispatch attempts per Work before it is force-stopped (default 3). */
  maxDispatches?: number;
  /**
   * Passed to the poll: an item handed out and not acked this long ago is offered again. Default
   * `readyTimeoutMs`, the deadline of everything a dispatch does before its ack.
   */
  reclaimOlderThanMs?: number;
  /** How long a dispatch may take, once its claim exists, to bind a Ready pod and install the launcher before its ack (default 120 s). */
  readyTimeoutMs?: number;
  /** How long a poll waits on the server for Work (`block_ms`, at most 999; default 900). */
  pollBlockMs?: number;
  /** Pause between passes that found nothing (default 1 s). */
  idleMs?: number;
  /** Forwarded to the in-pod worker: how long it stays after the final `end_turn` idle. */
  workerMaxIdleMs?: number;
  /** The `Anthropic-Worker-ID` the dispatcher polls as. */
  dispatcherId?: string;
  scheduler?: Scheduler;
  log?: (line: string) => void;
}

export type DispatchOutcome =
  | { type: "idle" }
  | { type: "dispatched"; workId: string; claim: string; pod: string; attempt: number; reusedClaim: boolean }
  | { type: "capped"; workId: string; attempts: number }
  | { type: "stopped_non_session"; workId: string }
  | { type: "failed"; workId: string; claim: string; error: string };

const labelValue = (text: string) =>
  text
    .replace(/[^A-Za-z0-9_.-]/g, "-")
    .slice(0, 63)
    .replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, "");

/** The claim name of a Work's attempt: deterministic, a DNS-1123 subdomain. */
export function claimName(workId: string, attempt: number): string {
  const id = workId
    .toLowerCase()
    .replace(/[^a-z0-9-]/g, "-")
    .slice(0, 200);
  return `openma-${id}-${attempt}`.replace(/-+/g, "-");
}

const attemptOf = (claim: SandboxClaim) => Number(claim.metadata.labels?.[LABEL_DISPATCH] ?? "0") || 0;

export class GkeDispatcher {
  readonly #o: Required<Omit<GkeDispatcherOptions, "workerMaxIdleMs" | "log">> & Pick<GkeDispatcherOptions, "workerMaxIdleMs" | "log">;
  readonly #work: Anthropic["beta"]["environments"]["work"];

  constructor(options: GkeDispatcherOptions) {
    const readyTimeoutMs = options.readyTimeoutMs ?? 120_000;
    this.#o = {
      maxDispatches: 3,
      reclaimOlderThanMs: readyTimeoutMs,
      readyTimeoutMs,
      idleMs: 1000,
      pollBlockMs: 900,
      dispatcherId: `openma-dispatch-gke-${process.pid}`,
      scheduler: realScheduler,
      ...options,
    };
    // Every call of the dispatcher authenticates with the environment key, as a worker's poller does.
    this.#work = options.client.withOptions({ apiKey: null, authToken: options.environmentKey }).beta.environments.work;
  }

  #envSelector(extra = ""): string {
    return `${LABEL_ENVIRONMENT}=${labelValue(this.#o.environmentId)}${extra}`;
  }

  /** Runs passes until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      let outcome: DispatchOutcome;
      try {
        outcome = await this.pass(signal);
      } catch (err) {
        this.#o.log?.(`dispatch pass failed: ${err instanceof Error ? err.message : String(err)}`);
        outcome = { type: "idle" };
      }
      if (outcome.type === "idle") await this.#o.scheduler.sleep(this.#o.idleMs, signal).catch(() => {});
    }
  }

  /** One pass: reap claims of finished Work, then poll one item and dispatch it. */
  async pass(signal: AbortSignal): Promise<DispatchOutcome> {
    await this.reap();
    const work = await this.#work.poll(this.#o.environmentId, {
      block_ms: this.#o.pollBlockMs,
      reclaim_older_than_ms: this.#o.reclaimOlderThanMs,
      "Anthropic-Worker-ID": this.#o.dispatcherId,
    });
    if (work === null) return { type: "idle" };
    return this.dispatch(work, signal);
  }

  /** Deletes the claims whose Work is over (stopping, stopped, or no longer listed). Returns the names deleted. */
  async reap(): Promise<string[]> {
    const claims = await this.#o.cluster.listClaims(this.#envSelector());
    if (claims.length === 0) return [];
    const wanted = new Set(claims.map((c) => c.metadata.labels?.[LABEL_WORK]).filter((id): id is string => id !== undefined));
    const states = new Map<string, Work["state"]>();
    for await (const item of this.#work.list(this.#o.environmentId)) {
      if (wanted.has(item.id)) states.set(item.id, item.state);
      if (states.size === wanted.size) break;
    }
    const reaped: string[] = [];
    for (const claim of claims) {
      const state = states.get(claim.metadata.labels?.[LABEL_WORK] ?? "");
      if (state === undefined || state === "stopping" || state === "stopped") {
        await this.#o.cluster.deleteClaim(claim.metadata.name);
        reaped.push(claim.metadata.name);
      }
    }
    return reaped;
  }

  async dispatch(work: Work, signal: AbortSignal): Promise<DispatchOutcome> {
    if (work.data.type !== "session") {
      await this.#work.stop(work.id, { environment_id: this.#o.environmentId, force: true });
      return { type: "stopped_non_session", workId: work.id };
    }
    const sessionId = work.data.id;
    const claims = await this.#o.cluster.listClaims(this.#envSelector(`,${LABEL_SESSION}=${labelValue(sessionId)}`));
    // A claim of this Work whose hand-off never started is this very attempt, interrupted: reuse it.
    const resumable = claims.find(
      (c) => c.metadata.labels?.[LABEL_WORK] === labelValue(work.id) && c.metadata.annotations?.[HANDOFF_ANNOTATION] === undefined,
    );
    const attempt = resumable
      ? attemptOf(resumable)
      : Math.max(0, ...claims.filter((c) => c.metadata.labels?.[LABEL_WORK] === labelValue(work.id)).map(attemptOf)) + 1;
    // Every other claim of the session is stale: an earlier Work, or an attempt the pod did not take. They go
    // only after the new claim exists, so the attempt count survives a crash in between.
    const stale = claims.filter((c) => c !== resumable);
    if (attempt > this.#o.maxDispatches) {
      for (const claim of stale) await this.#o.cluster.deleteClaim(claim.metadata.name);
      await this.#work.stop(work.id, { environment_id: this.#o.environmentId, force: true });
      this.#o.log?.(`work ${work.id} stopped after ${attempt - 1} dispatches`);
      return { type: "capped", workId: work.id, attempts: attempt - 1 };
    }
    const name = claimName(work.id, attempt);
    const { created } = await this.#o.cluster.createClaim({
      metadata: {
        name,
        labels: {
          [LABEL_ENVIRONMENT]: labelValue(this.#o.environmentId),
          [LABEL_SESSION]: labelValue(sessionId),
          [LABEL_WORK]: labelValue(work.id),
          [LABEL_DISPATCH]: String(attempt),
          [LABEL_MANAGED_BY]: MANAGED_BY,
        },
      },
      spec: { warmPoolRef: { name: this.#o.warmPool } },
    });
    for (const claim of stale) await this.#o.cluster.deleteClaim(claim.metadata.name);
    // Binding and installing must end before the poll's reclaim window does: past it the item may be another's.
    const deadline = new AbortController();
    const onAbort = () => deadline.abort(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    void this.#o.scheduler.sleep(this.#o.readyTimeoutMs, deadline.signal).then(
      () => deadline.abort(new Error(`SandboxClaim ${name} was not bound and handed off within ${this.#o.readyTimeoutMs} ms`)),
      () => {},
    );
    try {
      const pod = await this.#o.cluster.waitForPod(name, deadline.signal);
      await this.#handOff(name, pod, work, deadline.signal);
      return { type: "dispatched", workId: work.id, claim: name, pod, attempt, reusedClaim: !created };
    } catch (err) {
      // The claim stays, marked spent unless the hand-off never began: the Work returns (after the reclaim window
      // when it was never acked, after its lease when it was) and the next attempt reaps it.
      const error = err instanceof Error ? err.message : String(err);
      this.#o.log?.(`dispatch of work ${work.id} through ${name} failed: ${error}`);
      return { type: "failed", workId: work.id, claim: name, error };
    } finally {
      signal.removeEventListener("abort", onAbort);
      deadline.abort();
    }
  }

  async #handOff(claim: string, pod: string, work: Work, deadline: AbortSignal): Promise<void> {
    const sessionsToken = sessionsTokenFromSecret(work.secret);
    if (work.secret === null || sessionsToken === null) throw new Error(`work ${work.id} came without a usable secret`);
    const bundle = await this.#o.bundle();
    const dir = REMOTE_LAUNCHER.slice(0, REMOTE_LAUNCHER.lastIndexOf("/"));
    const installed = await this.#o.cluster.exec(
      pod,
      ["sh", "-c", 'mkdir -p "$1" && cat > "$2.part" && mv "$2.part" "$2"', "sh", dir, REMOTE_LAUNCHER],
      bundle.content,
    );
    if (installed.exitCode !== 0) throw new Error(`installing the worker in pod ${pod} failed: ${installed.stderr.trim()}`);
    deadline.throwIfAborted();
    // From here on the attempt counts: the item is acked and the pod may already hold it.
    await this.#o.cluster.annotateClaim(claim, { [HANDOFF_ANNOTATION]: "started" });
    // Acked with the item's own token: refused (401) if another poll took the item meanwhile, so no second pod
    // serves it. The lease now runs until the pod's first heartbeat is due.
    const acked = await this.#o.client
      .withOptions({ apiKey: null, authToken: sessionsToken })
      .beta.environments.work.ack(work.id, { environment_id: this.#o.environmentId });
    if (acked.state !== "starting") throw new Error(`work ${work.id} is ${acked.state}, not startable`);
    const launch = {
      env: {
        ANTHROPIC_WORK_ID: work.id,
        ANTHROPIC_ENVIRONMENT_ID: this.#o.environmentId,
        ANTHROPIC_SESSION_ID: work.data.id,
        ANTHROPIC_WORK_SECRET: work.secret,
      },
      apiUrl: this.#o.apiUrl,
      workdir: "/workspace",
      ...(this.#o.workerMaxIdleMs === undefined ? {} : { maxIdleMs: this.#o.workerMaxIdleMs }),
    };
    const started = await this.#o.cluster.exec(
      pod,
      ["sh", "-c", LAUNCH_SCRIPT, "sh", dir, REMOTE_LAUNCHER],
      Buffer.from(`${JSON.stringify(launch)}\n`),
    );
    if (started.exitCode !== 0) throw new Error(`starting the worker in pod ${pod} failed: ${started.stderr.trim()}`);
    await this.#o.cluster.annotateClaim(claim, { [HANDOFF_ANNOTATION]: "done" });
  }
}

/**
 * Saves stdin (the launch message) to a file only the pod's user can read,
 * then starts the launcher detached from the exec session, so it outlives
 * the dispatcher; the detached shell records its pid (`worker.pid`: the
 * launcher's, since it execs), opens the file and unlinks it before the
 * launcher runs, so the secret is on disk only for that instant.
 */
const LAUNCH_SCRIPT = [
  "set -e",
  "umask 077",
  'f=$(mktemp "$1/launch.XXXXXX")',
  'cat > "$f"',
  `setsid -f sh -c 'echo $$ > "$3/worker.pid"; exec 3<"$1"; rm -f "$1"; exec node "$2" <&3 >>"$3/worker.log" 2>&1' sh "$f" "$2" "$1"`,
].join("\n");
