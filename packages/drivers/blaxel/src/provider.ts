/**
 * Blaxel through `@blaxel/core` 0.3: every wire call is the SDK's. A
 * sandbox is addressed by its name, so the runtime id is the name;
 * ownership lives in its metadata labels. Suspend is Blaxel's archive (the
 * filesystem is kept, memory and processes are not) and resume its
 * unarchive. Blaxel has no lease to renew: an idle sandbox goes to standby
 * on its own and wakes on the next request.
 *
 * Commands run through sandbox-api's streaming exec (`POST /process` with
 * `Accept: text/event-stream`), whose NDJSON events carry each output chunk
 * verbatim; the `stdout:`-prefixed log stream would lose line ends. The
 * process gets a name of ours, so stdin (`POST /process/{name}/stdin`), its
 * end and the kill can address it while the exec call is still streaming.
 * The SDK does not say when that process exists, so the command first
 * writes a one-time marker line to stderr: once it arrives, the process is
 * registered and stdin can go to it (the marker is removed from the output).
 *
 * The SDK keeps its configuration in module state (`initialize`, and the
 * `BL_API_URL`/`BL_RUN_URL` variables it reads), so a process talks to one
 * Blaxel endpoint at a time: the provider binds its configuration before
 * every call, and two providers with different endpoints must not be used
 * concurrently.
 */
import { randomBytes } from "node:crypto";
import { initialize, ResponseError, SandboxInstance } from "@blaxel/core";
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

export interface BlaxelConfig {
  /** `BL_API_KEY`. */
  apiKey: string;
  /** `BL_WORKSPACE`. */
  workspace: string;
  /** `BL_API_URL`; the SDK's default is the platform's control plane. */
  apiUrl?: string;
  /** `BL_RUN_URL`; the SDK's default is the platform's run gateway. */
  runUrl?: string;
  /** `BL_REGION`: where sandboxes are created (the platform picks one when absent). */
  region?: string;
  /** `BL_DISABLE_H2`: use HTTP/1.1 fetch instead of the SDK's HTTP/2 pool. */
  disableH2?: boolean;
  /** The sandbox image (default `blaxel/base-image:latest`, the SDK's own default). */
  image?: string;
  /** Memory in MB (default 4096, the SDK's default). */
  memory?: number;
  /** Runtime name prefix, listed by (default `openma-`). */
  listPrefix?: string;
}

interface SandboxModel {
  metadata?: { name?: string; labels?: Record<string, string>; createdAt?: string };
  status?: string;
}

const GONE = new Set(["TERMINATED", "DELETING", "DEACTIVATING", "DEACTIVATED"]);

function stateOf(status: string | undefined): ProviderState {
  switch (status) {
    case "DEPLOYED":
    case undefined:
      return "running";
    case "ARCHIVED":
      return "suspended";
    case "FAILED":
      return "failed";
    default:
      // UPLOADING, BUILDING, DEPLOYING, ARCHIVING, UNARCHIVING: on their way.
      return "starting";
  }
}

function runtimeOf(sandbox: SandboxModel): ProviderRuntime {
  const name = sandbox.metadata?.name ?? "";
  return {
    id: name,
    name,
    labels: { ...(sandbox.metadata?.labels ?? {}) },
    state: stateOf(sandbox.status),
    createdAt: sandbox.metadata?.createdAt ?? null,
  };
}

/** The HTTP status a failure carries: sandbox-api's ResponseError, or the control plane's error body. */
function statusOf(err: unknown): number | null {
  if (err instanceof ResponseError) return err.status ?? null;
  if (typeof err === "object" && err !== null) {
    const body = err as { code?: unknown; status_code?: unknown; status?: unknown };
    if (typeof body.code === "number") return body.code;
    if (typeof body.status_code === "number") return body.status_code;
    if (typeof body.status === "number") return body.status;
  }
  return null;
}

function messageOf(err: unknown): string {
  if (err instanceof Error) return err.message;
  if (typeof err === "object" && err !== null) {
    const body = err as { message?: unknown; error?: unknown };
    if (typeof body.message === "string") return body.message;
    if (typeof body.error === "string") return body.error;
  }
  return String(err);
}

export class BlaxelProvider implements CloudProvider {
  readonly name = "blaxel";
  readonly stdinEof = true;
  readonly #config: BlaxelConfig;
  readonly #prefix: string;

  constructor(config: BlaxelConfig) {
    if (!config.apiKey) throw new Error("blaxel: an API key is required (BL_API_KEY)");
    if (!config.workspace) throw new Error("blaxel: a workspace is required (BL_WORKSPACE)");
    this.#config = config;
    this.#prefix = config.listPrefix ?? "openma-";
    this.#bind();
  }

  /** Points the SDK's module state at this provider's account and endpoints. */
  #bind(): void {
    const { apiUrl, runUrl } = this.#config;
    if (apiUrl) process.env.BL_API_URL = apiUrl;
    if (runUrl) process.env.BL_RUN_URL = runUrl;
    initialize({ apikey: this.#config.apiKey, workspace: this.#config.workspace, disableH2: this.#config.disableH2 });
  }

  async find(input: { name: string }): Promise<ProviderRuntime | null> {
    return this.get({ id: input.name });
  }

  async create(input: { name: string; labels: Readonly<Record<string, string>> }): Promise<ProviderRuntime> {
    this.#bind();
    const created = await SandboxInstance.create({
      name: input.name,
      labels: { ...input.labels },
      image: this.#config.image,
      memory: this.#config.memory,
      region: this.#config.region,
    });
    return runtimeOf(created);
  }

  async get(input: { id: string }): Promise<ProviderRuntime | null> {
    this.#bind();
    try {
      const found = await SandboxInstance.get(input.id);
      return GONE.has(found.status ?? "") ? null : runtimeOf(found);
    } catch (err) {
      if (this.describe(err).notFound) return null;
      throw err;
    }
  }

  /** By name prefix, then labels: the listing has no label filter. */
  async list(input: { labels: Readonly<Record<string, string>> }): Promise<ProviderRuntime[]> {
    this.#bind();
    const out: ProviderRuntime[] = [];
    for await (const sandbox of await SandboxInstance.list({ limit: 100 })) {
      const runtime = runtimeOf(sandbox);
      if (!runtime.name.startsWith(this.#prefix) || GONE.has(sandbox.status ?? "")) continue;
      if (Object.entries(input.labels).every(([k, v]) => runtime.labels[k] === v)) out.push(runtime);
    }
    return out;
  }

  /** Unarchive: the sandbox starts again over its archived filesystem. */
  async resume(input: { runtime: ProviderRuntime }): Promise<void> {
    this.#bind();
    await SandboxInstance.unarchive(input.runtime.id);
  }

  /** Archive: the filesystem is kept, memory and running processes are not. */
  async suspend(input: { runtime: ProviderRuntime }): Promise<void> {
    this.#bind();
    await SandboxInstance.archive(input.runtime.id);
  }

  async destroy(input: { id: string }): Promise<"destroyed" | "not_found"> {
    this.#bind();
    try {
      await SandboxInstance.delete(input.id);
      return "destroyed";
    } catch (err) {
      if (this.describe(err).notFound) return "not_found";
      throw err;
    }
  }

  /** No provider lease: standby on idle is the platform's own, and a request wakes the sandbox. */
  async renew(): Promise<void> {}

  async api(input: { id: string }): Promise<RemoteSandboxApi> {
    this.#bind();
    // Read once, for the sandbox-api URL the platform gives this sandbox (`metadata.url`).
    return sandboxApi(await SandboxInstance.get(input.id), () => this.#bind());
  }

  describe(err: unknown): ProviderFailure {
    const status = statusOf(err);
    const message = messageOf(err);
    if (status !== null) {
      const code = typeof err === "object" && err !== null ? (err as { code?: unknown }).code : undefined;
      return {
        retryable: status >= 500 || status === 429,
        notFound: status === 404,
        conflict: status === 409 && (code === 409 || code === "SANDBOX_ALREADY_EXISTS"),
        message: `${status} ${message}`,
      };
    }
    // A network error, a cut stream, a timed-out or aborted call: the platform may answer later.
    return { retryable: true, notFound: false, conflict: false, message };
  }

  async close(): Promise<void> {}
}

function sandboxApi(sandbox: SandboxInstance, bind: () => void): RemoteSandboxApi {
  return {
    stdinEof: true,
    start: ({ argv, onOutput, signal }) => {
      bind();
      return startCommand(sandbox, argv, onOutput, signal);
    },
    async readFile(path) {
      bind();
      try {
        const blob = await sandbox.fs.readBinary(path);
        return new Uint8Array(await blob.arrayBuffer());
      } catch (err) {
        if (statusOf(err) === 404) return null;
        throw err;
      }
    },
    async writeFile(path, content) {
      bind();
      await sandbox.fs.writeBinary(path, content);
    },
  };
}

/**
 * Strips the start marker from the front of stderr: bytes before it are
 * held until it is complete; `onMarker` fires once it has passed.
 */
class MarkerFilter {
  #held = Buffer.alloc(0);
  #passed = false;

  constructor(
    private readonly marker: Buffer,
    private readonly onMarker: () => void,
  ) {}

  get passed(): boolean {
    return this.#passed;
  }

  /** What of `chunk` belongs to the command's own stderr. */
  push(chunk: Buffer): Buffer {
    if (this.#passed) return chunk;
    this.#held = Buffer.concat([this.#held, chunk]);
    if (this.#held.length < this.marker.length) return Buffer.alloc(0);
    this.#passed = true;
    this.onMarker();
    const rest = this.#held.subarray(this.#held.subarray(0, this.marker.length).equals(this.marker) ? this.marker.length : 0);
    this.#held = Buffer.alloc(0);
    return rest;
  }
}

/** Starts the command; resolves once it is running at sandbox-api, rejects when it is refused or `signal` aborts first. */
function startCommand(
  sandbox: SandboxInstance,
  argv: readonly string[],
  onOutput: (stream: OutputStream, chunk: Uint8Array) => void,
  signal: AbortSignal,
): Promise<RemoteCommand> {
  const name = `openma-${randomBytes(8).toString("hex")}`;
  const markerText = `openma-started-${randomBytes(8).toString("hex")}`;
  const marker = Buffer.from(`${markerText}\n`);
  // sandbox-api runs the command with `sh -c`; `exec` leaves no shell of ours between it and the process.
  const command = `printf '${markerText}\\n' >&2; exec ${shellQuote(argv)}`;
  let started!: () => void;
  const running = new Promise<void>((resolve) => {
    started = resolve;
  });
  const filter = new MarkerFilter(marker, () => started());
  const exec = sandbox.process.exec({
    command,
    name,
    stdin: true,
    waitForCompletion: true,
    onStdout: (text: string) => onOutput("stdout", Buffer.from(text)),
    onStderr: (text: string) => {
      const rest = filter.push(Buffer.from(text));
      if (rest.length > 0) onOutput("stderr", rest);
    },
  });
  const done: Promise<RemoteEnd> = exec.then(
    (result) =>
      typeof result.exitCode === "number"
        ? { type: "exited", exitCode: result.exitCode }
        : { type: "lost", message: "the exec stream ended without an exit code" },
    (err: unknown) => ({ type: "lost", message: messageOf(err) }),
  );
  const kill = async () => {
    await sandbox.process.kill(name).catch((err: unknown) => {
      if (statusOf(err) !== 404) throw err;
    });
  };
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      void kill().catch(() => {});
      reject(new Error("the exec start was aborted"));
    };
    signal.addEventListener("abort", onAbort, { once: true });
    void running.then(() => {
      signal.removeEventListener("abort", onAbort);
      resolve({
        write: (chunk) => sandbox.process.writeStdin(name, Buffer.from(chunk)),
        closeStdin: () => sandbox.process.closeStdin(name),
        kill,
        done,
      });
    });
    // Ended (or refused) before the marker came back: the command never ran.
    void exec.then(
      () => {
        if (!filter.passed) reject(new Error("the command ended before it started"));
      },
      (err: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(err instanceof Error ? err : new Error(messageOf(err)));
      },
    );
  });
}
