/**
 * E2B through the `e2b` SDK 2.x: every wire call is the SDK's (the REST
 * control plane, envd's Connect-RPC process API and its file endpoints).
 *
 * E2B sandboxes have no names, so the ownership marks live in the
 * sandbox's metadata (set at create, never changed) and an acquire finds
 * its earlier attempt by listing with them. A sandbox expires at its
 * timeout: the driver sets one at create and renews it on every heartbeat,
 * so a sandbox whose host died ends on its own even before the reaper gets
 * to it. `suspend` is E2B's pause (memory and processes kept); the next
 * acquire or tool call resumes it through `connect`. The envd access token
 * stays in this process's memory and never enters a lease.
 */
import type { OutputStream } from "@openma/contract";
import {
  type CloudProvider,
  type ProviderFailure,
  type ProviderRuntime,
  type RemoteCommand,
  type RemoteEnd,
  type RemoteSandboxApi,
  shellQuote,
} from "@openma/driver-kit/remote";
import {
  AuthenticationError,
  CommandExitError,
  type CommandHandle,
  type ConnectionOpts,
  InvalidArgumentError,
  NotFoundError,
  RateLimitError,
  Sandbox,
  SandboxError,
  ServiceBusyError,
  TimeoutError,
} from "e2b";

export interface E2BConfig {
  /** `E2B_API_KEY`. */
  apiKey: string;
  /** `E2B_API_URL`, `E2B_SANDBOX_URL`, `E2B_DOMAIN`: an E2B-compatible service (the SDK's defaults otherwise). */
  apiUrl?: string;
  sandboxUrl?: string;
  domain?: string;
  /** The template sandboxes start from (default `base`); it needs a POSIX shell, tar and, for the ama_worker lane, Node 24. */
  template?: string;
  /** A sandbox's lifetime without a heartbeat (default 1 h); every heartbeat renews it. */
  sandboxTimeoutMs?: number;
}

const NAME_KEY = "openma.name";
/**
 * Commands and file transfers run as the sandbox's root: OpenMA owns the
 * whole sandbox (it is the isolation boundary) and needs `/workspace` and
 * `/mnt/session/outputs` at the root of its filesystem.
 */
const USER = "root";
const DEFAULT_TIMEOUT_MS = 3_600_000;

interface Listed {
  sandboxId: string;
  metadata?: Record<string, string>;
  state?: "running" | "paused";
  startedAt?: Date;
}

function runtimeOf(info: Listed): ProviderRuntime {
  const metadata = info.metadata ?? {};
  return {
    id: info.sandboxId,
    name: metadata[NAME_KEY] ?? info.sandboxId,
    labels: metadata,
    state: info.state === "paused" ? "suspended" : "running",
    createdAt: info.startedAt ? info.startedAt.toISOString() : null,
  };
}

export class E2BProvider implements CloudProvider {
  readonly name = "e2b";
  readonly stdinEof = true;
  readonly #connection: ConnectionOpts;
  readonly #template: string;
  readonly #timeoutMs: number;
  /** Connected sandboxes of this process (they hold envd tokens, which never leave memory). */
  readonly #handles = new Map<string, Promise<Sandbox>>();

  constructor(config: E2BConfig) {
    if (!config.apiKey) throw new Error("e2b: an API key is required (E2B_API_KEY)");
    this.#connection = {
      apiKey: config.apiKey,
      ...(config.apiUrl ? { apiUrl: config.apiUrl } : {}),
      ...(config.sandboxUrl ? { sandboxUrl: config.sandboxUrl } : {}),
      ...(config.domain ? { domain: config.domain } : {}),
    };
    this.#template = config.template ?? "base";
    this.#timeoutMs = config.sandboxTimeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  async find(input: { labels: Readonly<Record<string, string>> }): Promise<ProviderRuntime | null> {
    const page = await Sandbox.list({ ...this.#connection, query: { metadata: { ...input.labels } }, limit: 2 }).nextItems();
    const first = page[0];
    return first ? runtimeOf(first) : null;
  }

  async create(input: { name: string; labels: Readonly<Record<string, string>>; signal: AbortSignal }): Promise<ProviderRuntime> {
    const metadata = { ...input.labels, [NAME_KEY]: input.name };
    const sandbox = await Sandbox.create(this.#template, {
      ...this.#connection,
      metadata,
      timeoutMs: this.#timeoutMs,
      signal: input.signal,
    });
    this.#handles.set(sandbox.sandboxId, Promise.resolve(sandbox));
    return { id: sandbox.sandboxId, name: input.name, labels: metadata, state: "running", createdAt: new Date().toISOString() };
  }

  async get(input: { id: string; signal: AbortSignal }): Promise<ProviderRuntime | null> {
    try {
      return runtimeOf(await Sandbox.getInfo(input.id, { ...this.#connection, signal: input.signal }));
    } catch (err) {
      if (this.describe(err).notFound) return null;
      throw err;
    }
  }

  async list(input: { labels: Readonly<Record<string, string>> }): Promise<ProviderRuntime[]> {
    const paginator = Sandbox.list({ ...this.#connection, query: { metadata: { ...input.labels } }, limit: 100 });
    const out: ProviderRuntime[] = [];
    while (paginator.hasNext) for (const item of await paginator.nextItems()) out.push(runtimeOf(item));
    return out;
  }

  /** `connect` resumes a paused sandbox (memory and processes as they were) and sets its timeout. */
  async resume(input: { runtime: ProviderRuntime; signal: AbortSignal }): Promise<void> {
    const connecting = Sandbox.connect(input.runtime.id, { ...this.#connection, timeoutMs: this.#timeoutMs, signal: input.signal });
    this.#handles.set(input.runtime.id, connecting);
    await connecting.catch((err: unknown) => {
      this.#handles.delete(input.runtime.id);
      throw err;
    });
  }

  async suspend(input: { runtime: ProviderRuntime; signal: AbortSignal }): Promise<void> {
    // false: it was already paused, which is what was asked.
    await Sandbox.pause(input.runtime.id, { ...this.#connection, signal: input.signal });
    this.#handles.delete(input.runtime.id);
  }

  async destroy(input: { id: string; signal: AbortSignal }): Promise<"destroyed" | "not_found"> {
    this.#handles.delete(input.id);
    return (await Sandbox.kill(input.id, { ...this.#connection, signal: input.signal })) ? "destroyed" : "not_found";
  }

  /** E2B's own lease: the sandbox's timeout, pushed forward. */
  async renew(input: { runtime: ProviderRuntime; signal: AbortSignal }): Promise<void> {
    await Sandbox.setTimeout(input.runtime.id, this.#timeoutMs, { ...this.#connection, signal: input.signal });
  }

  async api(input: { id: string; signal: AbortSignal }): Promise<RemoteSandboxApi> {
    let handle = this.#handles.get(input.id);
    if (handle === undefined) {
      handle = Sandbox.connect(input.id, { ...this.#connection, timeoutMs: this.#timeoutMs, signal: input.signal });
      this.#handles.set(input.id, handle);
      handle.catch(() => this.#handles.delete(input.id));
    }
    return e2bApi(await handle);
  }

  describe(err: unknown): ProviderFailure {
    const message = err instanceof Error ? err.message : String(err);
    const status = (err as { statusCode?: unknown }).statusCode;
    if (err instanceof NotFoundError) return { retryable: false, notFound: true, conflict: false, message };
    if (err instanceof RateLimitError || err instanceof ServiceBusyError || err instanceof TimeoutError) {
      return { retryable: true, notFound: false, conflict: false, message };
    }
    if (err instanceof AuthenticationError || err instanceof InvalidArgumentError)
      return { retryable: false, notFound: false, conflict: false, message };
    if (err instanceof SandboxError && typeof status === "number") {
      return { retryable: status >= 500 || status === 429, notFound: status === 404, conflict: status === 409, message };
    }
    // fetch failures, aborted or timed-out calls, dropped streams: the service may answer later.
    return { retryable: true, notFound: false, conflict: false, message };
  }

  async close(): Promise<void> {
    this.#handles.clear();
  }
}

function e2bApi(sandbox: Sandbox): RemoteSandboxApi {
  return {
    stdinEof: true,
    start: ({ argv, onOutput, signal }) => startCommand(sandbox, argv, onOutput, signal),
    async readFile(path, signal) {
      try {
        return await sandbox.files.read(path, { format: "bytes", user: USER, signal });
      } catch (err) {
        if (err instanceof NotFoundError) return null;
        throw err;
      }
    },
    async writeFile(path, content, signal) {
      const bytes = Buffer.from(content);
      await sandbox.files.write(path, bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) as ArrayBuffer, {
        user: USER,
        signal,
      });
    },
  };
}

/** envd runs commands as `bash -l -c <string>`, so the kit's argv is quoted into one. */
async function startCommand(
  sandbox: Sandbox,
  argv: readonly string[],
  onOutput: (stream: OutputStream, chunk: Uint8Array) => void,
  signal: AbortSignal,
): Promise<RemoteCommand> {
  const handle: CommandHandle = await sandbox.commands.run(shellQuote(argv), {
    background: true,
    stdin: true,
    user: USER,
    // No deadline on the stream itself: a harness process runs for as long as it runs.
    timeoutMs: 0,
    signal,
    onStdout: (text) => onOutput("stdout", Buffer.from(text)),
    onStderr: (text) => onOutput("stderr", Buffer.from(text)),
  });
  const done: Promise<RemoteEnd> = handle.wait().then(
    (result) => ({ type: "exited", exitCode: result.exitCode }),
    (err: unknown) => {
      if (err instanceof CommandExitError) return { type: "exited", exitCode: err.exitCode < 0 ? 137 : err.exitCode };
      return { type: "lost", message: err instanceof Error ? err.message : String(err) };
    },
  );
  return {
    write: (chunk) => handle.sendStdin(chunk),
    closeStdin: () => handle.closeStdin(),
    kill: async () => {
      await handle.kill();
    },
    done,
  };
}
