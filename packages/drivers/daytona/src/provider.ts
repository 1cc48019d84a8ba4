/**
 * Daytona through `@daytonaio/sdk` 0.218: every wire call is the SDK's
 * (the REST API, in its polling mode, and each sandbox's toolbox).
 *
 * A sandbox has a stable name and replaceable labels, where the ownership
 * marks live. Commands run in a toolbox session of their own (created,
 * executed asynchronously, followed over the log WebSocket, then deleted;
 * deleting the session is the provider's kill); the session API cannot
 * close stdin, so the kit frames it in-band. `suspend` stops the sandbox
 * (processes end, the filesystem stays) and the next acquire starts it.
 * Daytona stops a sandbox left without activity for its auto-stop
 * interval: every heartbeat renews that lease (`refreshActivity`).
 */
import { randomBytes } from "node:crypto";
import {
  Daytona,
  DaytonaAuthenticationError,
  DaytonaBadRequestError,
  DaytonaConflictError,
  DaytonaError,
  DaytonaForbiddenError,
  DaytonaNotFoundError,
  type Sandbox,
} from "@daytonaio/sdk";
import type { OutputStream } from "@openma/contract";
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

export interface DaytonaConfig {
  /** `DAYTONA_API_KEY`. */
  apiKey: string;
  /** `DAYTONA_API_URL` (the SDK's default is Daytona's cloud). */
  apiUrl?: string;
  /** `DAYTONA_TARGET`: the region. */
  target?: string;
  /** The snapshot sandboxes start from (the platform's default otherwise). */
  snapshot?: string;
  /** Minutes without activity before Daytona stops a sandbox (default 15); heartbeats renew it. */
  autoStopMinutes?: number;
}

/** Daytona answers with `label` values it keeps; the SDK adds its language label on create. */
function runtimeOf(sandbox: {
  id: string;
  name: string;
  labels?: Record<string, string>;
  state?: string;
  createdAt?: string;
}): ProviderRuntime {
  return {
    id: sandbox.id,
    name: sandbox.name,
    labels: sandbox.labels ?? {},
    state: stateOf(sandbox.state),
    createdAt: sandbox.createdAt ?? null,
  };
}

function stateOf(state: string | undefined): ProviderState {
  switch (state) {
    case "started":
      return "running";
    case "stopped":
    case "stopping":
    case "archived":
    case "archiving":
    case "paused":
    case "pausing":
      return "suspended";
    case "error":
    case "build_failed":
    case "destroyed":
    case "destroying":
      return "failed";
    default:
      return "starting";
  }
}

export class DaytonaProvider implements CloudProvider {
  readonly name = "daytona";
  readonly stdinEof = false;
  readonly #client: Daytona;
  readonly #config: DaytonaConfig;

  constructor(config: DaytonaConfig) {
    if (!config.apiKey) throw new Error("daytona: an API key is required (DAYTONA_API_KEY)");
    this.#config = config;
    // Polling mode: state changes are read by polling the REST API, no event socket is opened.
    this.#client = new Daytona({ apiKey: config.apiKey, apiUrl: config.apiUrl, target: config.target, useDeprecatedPolling: true });
  }

  async #sandbox(idOrName: string): Promise<Sandbox | null> {
    try {
      return await this.#client.get(idOrName);
    } catch (err) {
      if (err instanceof DaytonaNotFoundError) return null;
      throw err;
    }
  }

  async find(input: { name: string }): Promise<ProviderRuntime | null> {
    const sandbox = await this.#sandbox(input.name);
    return sandbox ? runtimeOf(sandbox) : null;
  }

  async create(input: { name: string; labels: Readonly<Record<string, string>> }): Promise<ProviderRuntime> {
    const sandbox = await this.#client.create(
      {
        name: input.name,
        labels: { ...input.labels },
        autoStopInterval: this.#config.autoStopMinutes ?? 15,
        ...(this.#config.snapshot ? { snapshot: this.#config.snapshot } : {}),
      },
      { timeout: 120 },
    );
    return runtimeOf(sandbox);
  }

  async get(input: { id: string }): Promise<ProviderRuntime | null> {
    const sandbox = await this.#sandbox(input.id);
    return sandbox ? runtimeOf(sandbox) : null;
  }

  async list(input: { labels: Readonly<Record<string, string>> }): Promise<ProviderRuntime[]> {
    const out: ProviderRuntime[] = [];
    for await (const sandbox of this.#client.list({ labels: { ...input.labels } })) out.push(runtimeOf(sandbox));
    return out;
  }

  async resume(input: { runtime: ProviderRuntime }): Promise<void> {
    const sandbox = await this.#required(input.runtime.id);
    await sandbox.start(120);
  }

  async suspend(input: { runtime: ProviderRuntime }): Promise<void> {
    const sandbox = await this.#required(input.runtime.id);
    await sandbox.stop(120);
  }

  async destroy(input: { id: string }): Promise<"destroyed" | "not_found"> {
    const sandbox = await this.#sandbox(input.id);
    if (sandbox === null) return "not_found";
    try {
      await sandbox.delete(60);
      return "destroyed";
    } catch (err) {
      if (err instanceof DaytonaNotFoundError) return "not_found";
      throw err;
    }
  }

  /** Daytona's activity lease: the auto-stop clock starts again. */
  async renew(input: { runtime: ProviderRuntime }): Promise<void> {
    const sandbox = await this.#required(input.runtime.id);
    await sandbox.refreshActivity();
  }

  async api(input: { id: string }): Promise<RemoteSandboxApi> {
    return daytonaApi(await this.#required(input.id));
  }

  async #required(id: string): Promise<Sandbox> {
    const sandbox = await this.#sandbox(id);
    if (sandbox === null) throw new DaytonaNotFoundError(`Sandbox ${id} not found`, 404);
    return sandbox;
  }

  describe(err: unknown): ProviderFailure {
    const message = err instanceof Error ? err.message : String(err);
    if (err instanceof DaytonaNotFoundError) return { retryable: false, notFound: true, conflict: false, message };
    if (err instanceof DaytonaConflictError) return { retryable: false, notFound: false, conflict: true, message };
    if (err instanceof DaytonaAuthenticationError || err instanceof DaytonaForbiddenError || err instanceof DaytonaBadRequestError) {
      return { retryable: false, notFound: false, conflict: false, message };
    }
    if (err instanceof DaytonaError) {
      const status = err.statusCode;
      return {
        retryable: status === undefined || status >= 500 || status === 429 || status === 408,
        notFound: false,
        conflict: false,
        message,
      };
    }
    return { retryable: true, notFound: false, conflict: false, message };
  }

  async close(): Promise<void> {
    await this.#client[Symbol.asyncDispose]();
  }
}

function daytonaApi(sandbox: Sandbox): RemoteSandboxApi {
  return {
    stdinEof: false,
    start: ({ argv, onOutput }) => startCommand(sandbox, argv, onOutput),
    async readFile(path) {
      try {
        return await sandbox.fs.downloadFile(path, 600);
      } catch (err) {
        if (err instanceof DaytonaNotFoundError) return null;
        throw err;
      }
    },
    async writeFile(path, content) {
      await sandbox.fs.uploadFile(Buffer.from(content), path, 600);
    },
  };
}

/**
 * A session of its own per command: started asynchronously, its output
 * followed over the log WebSocket until the command ends, then its exit
 * code read and the session deleted.
 */
async function startCommand(
  sandbox: Sandbox,
  argv: readonly string[],
  onOutput: (stream: OutputStream, chunk: Uint8Array) => void,
): Promise<RemoteCommand> {
  const sessionId = `openma-${randomBytes(8).toString("hex")}`;
  await sandbox.process.createSession(sessionId);
  let commandId: string;
  try {
    const started = await sandbox.process.executeSessionCommand(sessionId, { command: shellQuote(argv), runAsync: true });
    commandId = started.cmdId;
  } catch (err) {
    await sandbox.process.deleteSession(sessionId).catch(() => {});
    throw err;
  }
  const done: Promise<RemoteEnd> = (async () => {
    try {
      await sandbox.process.getSessionCommandLogs(
        sessionId,
        commandId,
        (text) => onOutput("stdout", Buffer.from(text)),
        (text) => onOutput("stderr", Buffer.from(text)),
      );
      const command = await sandbox.process.getSessionCommand(sessionId, commandId);
      if (typeof command.exitCode !== "number") return { type: "lost", message: "the log stream ended before the command did" };
      return { type: "exited", exitCode: command.exitCode };
    } catch (err) {
      return { type: "lost", message: err instanceof Error ? err.message : String(err) };
    } finally {
      await sandbox.process.deleteSession(sessionId).catch(() => {});
    }
  })();
  return {
    write: (chunk) => sandbox.process.sendSessionCommandInput(sessionId, commandId, Buffer.from(chunk).toString("utf8")),
    closeStdin: async () => {
      throw new Error("Daytona session commands have no end of input");
    },
    kill: async () => {
      await sandbox.process.deleteSession(sessionId);
    },
    done,
  };
}
