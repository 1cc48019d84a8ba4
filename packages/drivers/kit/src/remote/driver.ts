/**
 * RemoteSandboxDriver: a ManagedSandboxPort, SandboxInventoryPort and
 * tool/process port over any CloudProvider. One runtime per (scope,
 * generation, acquire key), with a deterministic name and ownership labels,
 * so any process can find, heartbeat, kill or reap it from the serialized
 * lease alone, and a retried acquire adopts the runtime an earlier attempt
 * made instead of starting a second one.
 *
 * Expected failures are values: a provider that refuses (4xx) makes acquire
 * `unavailable` and not retryable; 5xx, 429, a timeout or a network error
 * make it retryable. A runtime created by an acquire that then fails (its
 * directories could not be made, the call was aborted) is destroyed before
 * the acquire answers, so an unanswered create never becomes an unowned
 * runtime; if even that destroy fails, the runtime still carries its
 * ownership labels, and the inventory lists it for the reaper.
 */
import type {
  ManagedSandboxLease,
  ManagedSandboxPort,
  OrphanReapInput,
  OrphanReapResult,
  OwnedRuntime,
  SandboxAcquireResult,
  SandboxCapabilities,
  SandboxHeartbeatResult,
  SandboxInspectResult,
  SandboxInventoryPort,
  SandboxListResult,
  SandboxProcessPort,
  SandboxSuspendResult,
  SandboxTerminateResult,
} from "@openma/contract";
import { OUTPUTS_MOUNT_PATH, sandboxLeaseIssues, WORKSPACE_MOUNT_PATH } from "@openma/contract";
import type { RemoteSandboxApi } from "./api.ts";
import { ProviderTimeoutError, withDeadline } from "./deadline.ts";
import { carriesLabels, OWNERSHIP_KEYS, ownershipLabels, ownershipOf, runtimeNameFor } from "./ownership.ts";
import type { CloudProvider, ProviderRuntime } from "./provider.ts";
import { RemoteToolSandbox, type RemoteToolSandboxOptions, spawnSandboxProcess } from "./tool-sandbox.ts";

type Input<M extends "acquire" | "heartbeat" | "suspend" | "terminate" | "inspect"> = Parameters<ManagedSandboxPort[M]>[0];
type AcquireInput = Omit<Input<"acquire">, "plan"> & Partial<Pick<Input<"acquire">, "plan">>;

export interface RemoteDriverOptions {
  /** Runtime name prefix (default `openma`). */
  namePrefix?: string;
  /** Extra labels written on every runtime and required when listing (e.g. a runtime host's identity). */
  labels?: Readonly<Record<string, string>>;
  /** Defaults for the tool port of every lease. */
  tools?: RemoteToolSandboxOptions;
  /** Bound on each provider call (default 120 s): past it the call counts as a retryable failure. */
  callTimeoutMs?: number;
}

const DEFAULT_CALL_TIMEOUT_MS = 120_000;
/** How many times a timed-out create is looked for afterwards. */
const LATE_SWEEPS = 6;

export class RemoteSandboxDriver implements ManagedSandboxPort, SandboxInventoryPort {
  readonly capabilities: SandboxCapabilities;
  readonly provider: CloudProvider;
  readonly #options: RemoteDriverOptions;

  constructor(provider: CloudProvider, capabilities: SandboxCapabilities, options: RemoteDriverOptions = {}) {
    if (capabilities.provider !== provider.name) throw new Error(`capabilities describe ${capabilities.provider}, not ${provider.name}`);
    this.provider = provider;
    this.capabilities = capabilities;
    this.#options = options;
  }

  /** One provider call under the driver's deadline; `late` receives what an abandoned call still produced. */
  #call<T>(what: string, signal: AbortSignal, work: (signal: AbortSignal) => Promise<T>, late?: (value: T) => void): Promise<T> {
    return withDeadline(`${this.provider.name} ${what}`, this.#options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS, signal, work, late);
  }

  /** The plan is optional: the runtime is the same whatever harness lane runs in it. */
  async acquire(input: AcquireInput): Promise<SandboxAcquireResult> {
    const name = runtimeNameFor(this.#options.namePrefix ?? "openma", input.scope, input.fence.generation, input.idempotencyKey);
    const labels = ownershipLabels(this.provider.name, input.fence, input.idempotencyKey, this.#options.labels);
    let created: ProviderRuntime | null = null;
    try {
      let runtime = await this.#call("find", input.signal, (signal) => this.provider.find({ name, labels, signal }));
      if (runtime !== null && !carriesLabels(runtime.labels, labels)) {
        return {
          type: "unavailable",
          reason: `${this.provider.name} runtime ${name} exists but does not carry this acquire's ownership labels`,
          retryable: false,
        };
      }
      if (runtime?.state === "failed") {
        const failed = runtime;
        await this.#call("destroy", input.signal, (signal) => this.provider.destroy({ id: failed.id, signal }));
        runtime = null;
      }
      if (runtime === null) {
        if (input.signal.aborted) return { type: "unavailable", reason: "acquire aborted", retryable: true };
        runtime = created = await this.#create(name, labels, input.signal);
      } else if (runtime.state === "suspended") {
        const suspended = runtime;
        await this.#call("resume", input.signal, (signal) => this.provider.resume({ runtime: suspended, signal }));
      }
      if (input.signal.aborted) throw new Error("acquire aborted");
      await this.#prepare(runtime, input.signal);
      return { type: "acquired", lease: this.#lease(runtime, input.fence.generation) };
    } catch (err) {
      // Never leave a runtime this acquire made and did not hand out.
      if (created !== null) await this.provider.destroy({ id: created.id, signal: AbortSignal.timeout(60_000) }).catch(() => {});
      const failure = this.provider.describe(err);
      return {
        type: "unavailable",
        reason: `${this.provider.name}: ${failure.message}`,
        retryable: failure.retryable || input.signal.aborted,
      };
    }
  }

  /**
   * A concurrent acquire of the same key may win the name: its runtime is
   * this acquire's answer. A create that answers after its deadline made a
   * runtime nobody will use: it is destroyed at once.
   */
  async #create(name: string, labels: Record<string, string>, signal: AbortSignal): Promise<ProviderRuntime> {
    const discard = (late: ProviderRuntime) => {
      void this.provider.destroy({ id: late.id, signal: AbortSignal.timeout(DEFAULT_CALL_TIMEOUT_MS) }).catch(() => {});
    };
    try {
      return await this.#call("create", signal, (bound) => this.provider.create({ name, labels, signal: bound }), discard);
    } catch (err) {
      // The request may have reached the provider even though no answer came back in time.
      if (err instanceof ProviderTimeoutError) void this.#sweepLate(name, labels);
      if (!this.provider.describe(err).conflict) throw err;
      const winner = await this.#call("find", signal, (bound) => this.provider.find({ name, labels, signal: bound }));
      if (winner === null || !carriesLabels(winner.labels, labels)) throw err;
      return winner;
    }
  }

  /**
   * After a create that timed out: looks for the runtime it may still have
   * made (by this acquire's name and labels, which no later acquire reuses)
   * a few times, and destroys it. Best effort; the inventory lists whatever
   * this misses, for the reaper.
   */
  async #sweepLate(name: string, labels: Record<string, string>): Promise<void> {
    const timeout = this.#options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS;
    for (let attempt = 0; attempt < LATE_SWEEPS; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, Math.min(timeout, 5_000)));
      try {
        const found = await this.#call("find", AbortSignal.timeout(timeout), (signal) => this.provider.find({ name, labels, signal }));
        if (found !== null && carriesLabels(found.labels, labels)) {
          await this.#call("destroy", AbortSignal.timeout(timeout), (signal) => this.provider.destroy({ id: found.id, signal }));
          return;
        }
      } catch {
        // The provider is still unwell: try again.
      }
    }
  }

  /** The mount points the host's bindings and the harness expect, made inside the runtime. */
  async #prepare(runtime: ProviderRuntime, signal: AbortSignal): Promise<void> {
    const tools = this.#tools(runtime.id);
    const made = await tools.exec({
      command: ["mkdir", "-p", WORKSPACE_MOUNT_PATH, OUTPUTS_MOUNT_PATH],
      cwd: "/",
      timeoutMs: 120_000,
      signal,
    });
    if (made.type !== "exited" || made.exitCode !== 0) {
      const why =
        made.type === "exited"
          ? Buffer.from(made.stderr).toString("utf8").trim() || `exit ${made.exitCode}`
          : made.type === "error"
            ? made.message
            : made.type;
      throw new Error(`preparing ${WORKSPACE_MOUNT_PATH} in the runtime failed: ${why}`);
    }
  }

  /**
   * The lease this acquire will answer, known before it runs when the
   * provider derives ids from names; null otherwise. A host that cannot
   * list the provider records it first, so a process killed mid-acquire
   * leaves a record whose runtime can still be reaped (ADR 0028).
   */
  plannedLease(input: Pick<AcquireInput, "scope" | "fence" | "idempotencyKey">): ManagedSandboxLease | null {
    if (this.provider.idFor === undefined) return null;
    const name = runtimeNameFor(this.#options.namePrefix ?? "openma", input.scope, input.fence.generation, input.idempotencyKey);
    return this.#lease({ id: this.provider.idFor(name), name }, input.fence.generation);
  }

  #lease(runtime: Pick<ProviderRuntime, "id" | "name">, generation: number): ManagedSandboxLease {
    return { provider: this.provider.name, runtimeId: runtime.id, metadata: { name: runtime.name, generation } };
  }

  async heartbeat(input: Input<"heartbeat">): Promise<SandboxHeartbeatResult> {
    const refused = this.#leaseProblem(input.lease);
    if (refused) return { type: "lost", reason: refused };
    const runtime = await this.#owned(input.lease, input.signal);
    if (runtime === null) return { type: "lost", reason: `${this.provider.name} runtime ${input.lease.runtimeId} no longer exists` };
    if (runtime.state === "running" || runtime.state === "sleeping" || runtime.state === "starting") {
      await this.#call("renew", input.signal, (signal) => this.provider.renew({ runtime, signal }));
      return { type: "alive" };
    }
    return { type: "lost", reason: `${this.provider.name} runtime ${input.lease.runtimeId} is ${runtime.state}` };
  }

  async suspend(input: Input<"suspend">): Promise<SandboxSuspendResult> {
    const refused = this.#leaseProblem(input.lease);
    if (refused) return { type: "failed", error: refused };
    try {
      const runtime = await this.#owned(input.lease, input.signal);
      if (runtime === null) return { type: "failed", error: `${this.provider.name} runtime ${input.lease.runtimeId} no longer exists` };
      await this.#call("suspend", input.signal, (signal) => this.provider.suspend({ runtime, signal }));
      return { type: "suspended", lease: input.lease };
    } catch (err) {
      return { type: "failed", error: `${this.provider.name}: ${this.provider.describe(err).message}` };
    }
  }

  async terminate(input: Input<"terminate">): Promise<SandboxTerminateResult> {
    const result = await this.#remove(input.lease, input.signal);
    return result.type === "failed" ? result : { type: "terminated" };
  }

  /** From the serialized lease alone: no state of the process that acquired it is needed. */
  reap(input: OrphanReapInput): Promise<OrphanReapResult> {
    return this.#remove(input.lease, input.signal);
  }

  /** Hard kill and delete, idempotent: a runtime already gone is `not_found`. Failures are values. */
  async #remove(lease: ManagedSandboxLease, signal: AbortSignal): Promise<OrphanReapResult> {
    const refused = this.#leaseProblem(lease);
    if (refused) return { type: "failed", error: refused };
    try {
      const runtime = await this.provider.get({ id: lease.runtimeId, signal });
      if (runtime === null) return { type: "not_found" };
      // A runtime that is not ours (or not this lease's generation) is never killed.
      if (!this.#isLeaseOf(runtime, lease))
        return { type: "failed", error: `${this.provider.name} runtime ${lease.runtimeId} is not owned by this lease` };
      const gone = await this.provider.destroy({ id: runtime.id, signal });
      return gone === "destroyed" ? { type: "reaped" } : { type: "not_found" };
    } catch (err) {
      const failure = this.provider.describe(err);
      if (failure.notFound) return { type: "not_found" };
      return { type: "failed", error: `${this.provider.name}: ${failure.message}` };
    }
  }

  async inspect(input: Input<"inspect">): Promise<SandboxInspectResult> {
    if (this.#leaseProblem(input.lease)) return { state: "unknown" };
    try {
      const runtime = await this.#owned(input.lease, input.signal);
      if (runtime === null) return { state: "stopped" };
      if (runtime.state === "running" || runtime.state === "starting") return { state: "running" };
      if (runtime.state === "failed") return { state: "stopped" };
      return { state: "suspended" };
    } catch {
      return { state: "unknown" };
    }
  }

  async listOwned(input: { signal: AbortSignal }): Promise<SandboxListResult> {
    const wanted = { ...this.#options.labels, [OWNERSHIP_KEYS.managed]: "true", [OWNERSHIP_KEYS.driver]: this.provider.name };
    try {
      const runtimes: OwnedRuntime[] = [];
      for (const runtime of await this.#call("list", input.signal, (signal) => this.provider.list({ labels: wanted, signal }))) {
        const owner = carriesLabels(runtime.labels, wanted) ? ownershipOf(runtime.labels, this.provider.name) : null;
        if (owner === null) continue;
        const state: OwnedRuntime["state"] =
          runtime.state === "running" || runtime.state === "starting" ? "running" : runtime.state === "failed" ? "stopped" : "suspended";
        runtimes.push({ lease: this.#lease(runtime, owner.generation), ...owner, state, createdAt: runtime.createdAt });
      }
      return { type: "listed", runtimes };
    } catch (err) {
      const failure = this.provider.describe(err);
      return { type: "failed", error: `${this.provider.name}: ${failure.message}`, retryable: failure.retryable };
    }
  }

  /** The runtime behind a lease when it is still the one the lease names; null when gone. Provider errors throw. */
  async #owned(lease: ManagedSandboxLease, signal: AbortSignal): Promise<ProviderRuntime | null> {
    let runtime: ProviderRuntime | null;
    try {
      runtime = await this.#call("get", signal, (bound) => this.provider.get({ id: lease.runtimeId, signal: bound }));
    } catch (err) {
      if (this.provider.describe(err).notFound) return null;
      throw err;
    }
    return runtime !== null && this.#isLeaseOf(runtime, lease) ? runtime : null;
  }

  #isLeaseOf(runtime: ProviderRuntime, lease: ManagedSandboxLease): boolean {
    const owner = ownershipOf(runtime.labels, this.provider.name);
    if (owner === null) return false;
    const generation = lease.metadata?.generation;
    return typeof generation !== "number" || owner.generation === generation;
  }

  #leaseProblem(lease: ManagedSandboxLease): string | null {
    const issues = sandboxLeaseIssues(lease);
    if (issues.length > 0) return `invalid lease: ${issues.join("; ")}`;
    if (lease.provider !== this.provider.name) return `lease belongs to provider ${lease.provider}, not ${this.provider.name}`;
    return null;
  }

  #tools(runtimeId: string, options: RemoteToolSandboxOptions = {}): RemoteToolSandbox {
    return new RemoteToolSandbox(
      lazyApi(this.provider.stdinEof, () => this.provider.api({ id: runtimeId, signal: AbortSignal.timeout(120_000) })),
      {
        ...this.#options.tools,
        ...options,
        ...(this.provider.streamingStdin === false ? { streamingStdin: false } : {}),
      },
    );
  }

  /** The tool port of a leased runtime (exec, streaming, files) for the harness outside the sandbox. */
  toolSandbox(lease: ManagedSandboxLease, options: RemoteToolSandboxOptions = {}): RemoteToolSandbox {
    const refused = this.#leaseProblem(lease);
    if (refused) throw new Error(refused);
    return this.#tools(lease.runtimeId, options);
  }

  /** Long-running duplex processes in leased runtimes (the harness lanes). */
  processes(): SandboxProcessPort {
    return {
      spawn: async (lease, input) => {
        const refused = this.#leaseProblem(lease);
        if (refused) return { type: "error", message: refused };
        return spawnSandboxProcess(this.toolSandbox(lease), input);
      },
    };
  }

  close(): Promise<void> {
    return this.provider.close();
  }
}

/** A RemoteSandboxApi resolved on first use (connecting may take a provider round trip). */
function lazyApi(stdinEof: boolean, open: () => Promise<RemoteSandboxApi>): RemoteSandboxApi {
  let opened: Promise<RemoteSandboxApi> | null = null;
  const api = () => {
    opened ??= open().catch((err: unknown) => {
      opened = null;
      throw err;
    });
    return opened;
  };
  return {
    stdinEof,
    start: async (input) => (await api()).start(input),
    readFile: async (path, signal) => (await api()).readFile(path, signal),
    writeFile: async (path, content, signal) => (await api()).writeFile(path, content, signal),
  };
}

/** A port's planned lease (see `RemoteSandboxDriver.plannedLease`), or null for any other port. */
export function plannedLeaseOf(port: object, input: Pick<AcquireInput, "scope" | "fence" | "idempotencyKey">): ManagedSandboxLease | null {
  return port instanceof RemoteSandboxDriver ? port.plannedLease(input) : null;
}
