/**
 * Superserve through `@superserve/sdk` 0.8: every wire call is the SDK's.
 * A runtime is a sandbox, addressed by the id the platform gives it, with
 * the kit's ownership labels as its metadata (the listing filters by
 * metadata, so orphans are found and reaped at the provider). Its stable
 * name is the sandbox's name.
 *
 * Suspend is the platform's pause, which keeps memory: processes and files
 * are there after a resume. The data plane takes a short-lived access token
 * that create, `/resume` and `/activate` issue, each retiring the previous
 * one; the SDK's sandbox object keeps the current one and, when the data
 * plane refuses a stale token (or a paused sandbox), activates and retries
 * once with the fresh one. One sandbox object per runtime is kept here, so
 * this process's calls share one token instead of retiring each other's.
 *
 * The SDK reads no sandbox without activating it (resuming a paused one),
 * so state is read from the listing, never by connecting.
 *
 * Commands: the exec WebSocket (`commands.spawn`), full duplex with a
 * stdin close; the command is one shell string (`exec` and the kit's argv, quoted).
 * Output arrives decoded as text (bytes that are not UTF-8 are replaced);
 * file contents go through the binary-safe files API instead.
 */
import {
  type CloudProvider,
  type ProviderFailure,
  type ProviderRuntime,
  type ProviderState,
  type RemoteCommand,
  type RemoteEnd,
  type RemoteSandboxApi,
  shellQuote,
} from "@openma/driver-kit/remote";
import { type CommandSession, NotFoundError, resolveConfig, Sandbox, SandboxError, type SandboxInfo } from "@superserve/sdk";
import { type DataPlaneRedirect, routeDataPlane } from "./data-plane.ts";

export interface SuperserveConfig {
  /** `SUPERSERVE_API_KEY`. */
  apiKey: string;
  /** `SUPERSERVE_BASE_URL`: the control plane (the SDK's default, or the region its key names, otherwise). */
  baseUrl?: string;
  /** `OPENMA_SUPERSERVE_DATA_PLANE_URL` / `_CA`: where the SDK's derived data-plane host is reached (see data-plane.ts). */
  dataPlane?: DataPlaneRedirect;
  /** `OPENMA_SUPERSERVE_TEMPLATE`: the template sandboxes start from (the platform's default otherwise). */
  template?: string;
}

const DRIVER_KEY = "openma.driver";

function stateOf(status: SandboxInfo["status"]): ProviderState {
  switch (status) {
    case "active":
      return "running";
    case "paused":
      return "suspended";
    case "resuming":
      return "starting";
    default:
      return "failed";
  }
}

function runtimeOf(info: Pick<SandboxInfo, "id" | "name" | "status" | "metadata" | "createdAt">): ProviderRuntime {
  return {
    id: info.id,
    name: info.name || info.id,
    labels: { ...info.metadata },
    state: stateOf(info.status),
    createdAt: Number.isNaN(info.createdAt.getTime()) ? null : info.createdAt.toISOString(),
  };
}

const messageOf = (err: unknown): string => (err instanceof Error ? err.message || err.name : String(err));

export class SuperserveProvider implements CloudProvider {
  readonly name = "superserve";
  readonly stdinEof = true;
  readonly #config: SuperserveConfig;
  /** One SDK sandbox object (and so one access token) per runtime. */
  readonly #sandboxes = new Map<string, Promise<Sandbox>>();

  constructor(config: SuperserveConfig) {
    if (!config.apiKey) throw new Error("superserve: an API key is required (SUPERSERVE_API_KEY)");
    this.#config = config;
    if (config.dataPlane) routeDataPlane(resolveConfig(this.#connection).sandboxHost, config.dataPlane);
  }

  get #connection() {
    return { apiKey: this.#config.apiKey, ...(this.#config.baseUrl ? { baseUrl: this.#config.baseUrl } : {}) };
  }

  /** This process's sandbox object for `id`, activating (and so resuming) it on first use. */
  #sandbox(id: string, signal: AbortSignal): Promise<Sandbox> {
    let known = this.#sandboxes.get(id);
    if (known === undefined) {
      known = Sandbox.connect(id, { ...this.#connection, signal });
      this.#sandboxes.set(id, known);
      known.catch(() => this.#sandboxes.delete(id));
    }
    return known;
  }

  async #list(metadata: Readonly<Record<string, string>>, signal: AbortSignal): Promise<SandboxInfo[]> {
    return Sandbox.list({ ...this.#connection, metadata: { ...metadata }, signal });
  }

  async find(input: { name: string; labels: Readonly<Record<string, string>>; signal: AbortSignal }): Promise<ProviderRuntime | null> {
    const listed = await this.#list(input.labels, input.signal);
    const found = listed.find((info) => info.name === input.name);
    return found ? runtimeOf(found) : null;
  }

  async create(input: { name: string; labels: Readonly<Record<string, string>>; signal: AbortSignal }): Promise<ProviderRuntime> {
    const created = Sandbox.create({
      ...this.#connection,
      name: input.name,
      metadata: { ...input.labels },
      ...(this.#config.template ? { fromTemplate: this.#config.template } : {}),
      signal: input.signal,
    });
    const sandbox = await created;
    this.#sandboxes.set(sandbox.id, created);
    return { id: sandbox.id, name: sandbox.name || sandbox.id, labels: { ...sandbox.metadata }, state: "running", createdAt: null };
  }

  /** From the listing: reading one sandbox through the SDK would activate it. */
  async get(input: { id: string; signal: AbortSignal }): Promise<ProviderRuntime | null> {
    const listed = await this.#list({ [DRIVER_KEY]: this.name }, input.signal);
    const found = listed.find((info) => info.id === input.id);
    return found ? runtimeOf(found) : null;
  }

  async list(input: { labels: Readonly<Record<string, string>>; signal: AbortSignal }): Promise<ProviderRuntime[]> {
    return (await this.#list(input.labels, input.signal)).map(runtimeOf);
  }

  /** `POST /resume` (a new token, which the sandbox object keeps); a sandbox already running needs nothing. */
  async resume(input: { runtime: ProviderRuntime; signal: AbortSignal }): Promise<void> {
    const known = this.#sandboxes.has(input.runtime.id);
    const sandbox = await this.#sandbox(input.runtime.id, input.signal);
    // A first connect activated it already (which resumes); otherwise resume explicitly.
    if (known && input.runtime.state === "suspended") await sandbox.resume();
  }

  /** Pause: memory, processes and files are kept. */
  async suspend(input: { runtime: ProviderRuntime; signal: AbortSignal }): Promise<void> {
    if (input.runtime.state === "suspended") return;
    const sandbox = await this.#sandbox(input.runtime.id, input.signal);
    await sandbox.pause();
  }

  async destroy(input: { id: string; signal: AbortSignal }): Promise<"destroyed" | "not_found"> {
    this.#sandboxes.delete(input.id);
    try {
      await Sandbox.killById(input.id, { ...this.#connection, signal: input.signal });
      return "destroyed";
    } catch (err) {
      if (err instanceof NotFoundError) return "not_found";
      throw err;
    }
  }

  /** No provider lease to renew: the sandbox runs until paused or deleted (no auto-pause timeout is set). */
  async renew(): Promise<void> {}

  async api(input: { id: string; signal: AbortSignal }): Promise<RemoteSandboxApi> {
    return superserveApi(await this.#sandbox(input.id, input.signal));
  }

  describe(err: unknown): ProviderFailure {
    const status = err instanceof SandboxError ? err.statusCode : undefined;
    const message = messageOf(err);
    if (status !== undefined) {
      return {
        retryable: status >= 500 || status === 429,
        notFound: status === 404,
        conflict: status === 409,
        message: `${status} ${message}`,
      };
    }
    // A network error, a timeout, a dropped socket: the platform may answer later.
    return { retryable: true, notFound: false, conflict: false, message };
  }

  async close(): Promise<void> {
    this.#sandboxes.clear();
  }
}

function superserveApi(sandbox: Sandbox): RemoteSandboxApi {
  return {
    stdinEof: true,
    async start({ argv, onOutput }) {
      // `exec`: the kit's wrapper replaces the platform's shell, so its process group and signals are its own.
      const session = await sandbox.commands.spawn(`exec ${shellQuote(argv)}`, {
        onStdout: (text) => onOutput("stdout", Buffer.from(text)),
        onStderr: (text) => onOutput("stderr", Buffer.from(text)),
      });
      return sessionCommand(session);
    },
    async readFile(path, signal) {
      try {
        return await sandbox.files.read(path, { signal });
      } catch (err) {
        if (err instanceof NotFoundError) return null;
        throw err;
      }
    },
    async writeFile(path, content, signal) {
      await sandbox.files.write(path, content, { signal });
    },
  };
}

function sessionCommand(session: CommandSession): RemoteCommand {
  const done: Promise<RemoteEnd> = session.wait().then(
    (result) => ({ type: "exited", exitCode: result.exitCode }),
    (err: unknown) => ({ type: "lost", message: messageOf(err) }),
  );
  return {
    async write(chunk) {
      session.stdin.write(chunk);
    },
    async closeStdin() {
      session.stdin.close();
    },
    async kill() {
      session.kill("SIGKILL");
    },
    done,
  };
}
