/**
 * Modal through the `modal` SDK 0.11: every wire call is the SDK's (gRPC to
 * the control plane, and to each sandbox's command router for exec).
 *
 * A runtime is a V2 sandbox in one app (`OPENMA_MODAL_APP`), named by the
 * kit's stable name and tagged with the ownership labels; its id is the
 * sandbox id. `/workspace` is a subpath of one pre-created Volume v2
 * (`OPENMA_MODAL_VOLUME`, created if missing), `sessions/<runtime name>`:
 * scoped to the session and to this acquire's fence generation, so compute
 * recreated for the same acquire finds the files again, while a later
 * generation starts from an empty directory and gets the session's
 * published checkpoint (two generations never share a directory).
 *
 * Modal has no pause: `suspend` flushes the volume (`sync /workspace`, which
 * commits a v2 volume's writes from inside the sandbox) and terminates the
 * compute; an ended sandbox is gone to the kit, so the next acquire with the
 * same key creates the compute again over the same subpath. A sandbox's
 * lifetime is fixed at create (`OPENMA_MODAL_SANDBOX_TIMEOUT_MS`): there is
 * no lease to renew, and a sandbox whose host died ends at that timeout if
 * the reaper has not removed it first.
 *
 * Commands are the SDK's `exec` in binary mode: stdin is a byte stream with
 * a real end, stdout and stderr are read by byte offset (the SDK resumes a
 * cut stream where it stopped). Files go through exec too (`cat`), since
 * the SDK's own filesystem API needs Modal's in-sandbox tool.
 *
 * The SDK reads its server address only from `MODAL_SERVER_URL` (or a
 * profile) when a client is constructed; a configured `serverUrl` is set in
 * the environment for that constructor call alone.
 */
import type { OutputStream } from "@openma/contract";
import type {
  CloudProvider,
  ProviderFailure,
  ProviderRuntime,
  RemoteCommand,
  RemoteEnd,
  RemoteSandboxApi,
} from "@openma/driver-kit/remote";
import {
  AlreadyExistsError,
  type App,
  type ContainerProcess,
  type Image,
  InvalidError,
  ModalClient,
  NotFoundError,
  type Sandbox,
  type Volume,
} from "modal";

export interface ModalConfig {
  /** `MODAL_TOKEN_ID`. */
  tokenId: string;
  /** `MODAL_TOKEN_SECRET`. */
  tokenSecret: string;
  /** `MODAL_SERVER_URL`: a Modal-compatible control plane (the SDK's default otherwise). */
  serverUrl?: string;
  /** `MODAL_ENVIRONMENT`. */
  environment?: string;
  /** The app sandboxes belong to (default `openma`, created if missing). */
  app?: string;
  /** The image sandboxes start from (default `node:24-bookworm-slim`): sh, tar, base64, and Node 24 for `ama_worker`. */
  image?: string;
  /** The Volume v2 holding workspaces (default `openma-workspaces`, created if missing). */
  volume?: string;
  /** A sandbox's fixed lifetime (default 24 h, Modal's maximum). */
  sandboxTimeoutMs?: number;
}

const NAME_KEY = "openma.name";
const MOUNT = "/workspace";
const DEFAULT_TIMEOUT_MS = 86_400_000;
/** The exit status of the read program when the path is not a regular file. */
const NO_FILE = 3;
const READ = `if [ -f "$1" ]; then exec cat -- "$1"; else exit ${NO_FILE}; fi`;
const WRITE = `mkdir -p -- "$(dirname -- "$1")" && cat > "$1"`;

/** gRPC status codes (the SDK passes nice-grpc's ClientError through for many calls). */
const GRPC = { cancelled: 1, unknown: 2, deadline: 4, notFound: 5, alreadyExists: 6, exhausted: 8, internal: 13, unavailable: 14 };
const RETRYABLE_CODES = new Set([GRPC.cancelled, GRPC.unknown, GRPC.deadline, GRPC.exhausted, GRPC.internal, GRPC.unavailable]);

/** The volume subpath of a runtime: its stable name under `sessions/` (the name is already scope- and generation-specific). */
export function workspaceSubPath(name: string): string {
  if (!/^[a-z0-9][a-z0-9-]{0,126}$/.test(name)) throw new Error(`modal: runtime name ${JSON.stringify(name)} cannot name a volume subpath`);
  return `sessions/${name}`;
}

export class ModalProvider implements CloudProvider {
  readonly name = "modal";
  readonly stdinEof = true;
  readonly #client: ModalClient;
  readonly #appName: string;
  readonly #imageTag: string;
  readonly #volumeName: string;
  readonly #timeoutMs: number;
  #app: Promise<App> | null = null;
  #image: Image | null = null;
  #volume: Promise<Volume> | null = null;

  constructor(config: ModalConfig) {
    if (!config.tokenId || !config.tokenSecret) throw new Error("modal: a token is required (MODAL_TOKEN_ID, MODAL_TOKEN_SECRET)");
    const timeout = config.sandboxTimeoutMs ?? DEFAULT_TIMEOUT_MS;
    if (!Number.isInteger(timeout) || timeout % 1000 !== 0 || timeout < 60_000 || timeout > DEFAULT_TIMEOUT_MS)
      throw new Error("modal: the sandbox timeout must be whole seconds between 60000 and 86400000 ms");
    this.#timeoutMs = timeout;
    this.#appName = config.app ?? "openma";
    this.#imageTag = config.image ?? "node:24-bookworm-slim";
    this.#volumeName = config.volume ?? "openma-workspaces";
    this.#client = withServerUrl(
      config.serverUrl,
      () =>
        new ModalClient({
          tokenId: config.tokenId,
          tokenSecret: config.tokenSecret,
          ...(config.environment ? { environment: config.environment } : {}),
          // The SDK warns on every local (plain-text) command-router connection; errors still surface as values.
          logLevel: "error",
        }),
    );
  }

  #appHandle(): Promise<App> {
    this.#app ??= this.#client.apps.fromName(this.#appName, { createIfMissing: true }).catch((err: unknown) => {
      this.#app = null;
      throw err;
    });
    return this.#app;
  }

  #volumeHandle(): Promise<Volume> {
    this.#volume ??= this.#client.volumes.fromName(this.#volumeName, { createIfMissing: true, version: 2 }).catch((err: unknown) => {
      this.#volume = null;
      throw err;
    });
    return this.#volume;
  }

  async find(input: { name: string }): Promise<ProviderRuntime | null> {
    let sandbox: Sandbox;
    try {
      sandbox = await this.#client.sandboxes.experimentalFromName(this.#appName, input.name);
    } catch (err) {
      if (this.describe(err).notFound) return null;
      throw err;
    }
    return this.#runtimeOf(sandbox);
  }

  async create(input: { name: string; labels: Readonly<Record<string, string>> }): Promise<ProviderRuntime> {
    const app = await this.#appHandle();
    this.#image ??= this.#client.images.fromRegistry(this.#imageTag);
    const volume = (await this.#volumeHandle()).withMountOptions({ subPath: workspaceSubPath(input.name) });
    const tags = { ...input.labels, [NAME_KEY]: input.name };
    const sandbox = await this.#client.sandboxes.create(app, this.#image, {
      name: input.name,
      tags,
      volumes: { [MOUNT]: volume },
      timeoutMs: this.#timeoutMs,
    });
    return { id: sandbox.sandboxId, name: input.name, labels: tags, state: "running", createdAt: new Date().toISOString() };
  }

  /** A running sandbox, or null once it has ended (terminated, timed out, failed): ended compute is gone. */
  async #runtimeOf(sandbox: Sandbox): Promise<ProviderRuntime | null> {
    if ((await sandbox.poll()) !== null) return null;
    const tags = await sandbox.getTags();
    return { id: sandbox.sandboxId, name: tags[NAME_KEY] ?? sandbox.sandboxId, labels: tags, state: "running", createdAt: null };
  }

  async get(input: { id: string }): Promise<ProviderRuntime | null> {
    try {
      return await this.#runtimeOf(await this.#client.sandboxes.fromId(input.id));
    } catch (err) {
      if (this.describe(err).notFound) return null;
      throw err;
    }
  }

  async list(input: { labels: Readonly<Record<string, string>> }): Promise<ProviderRuntime[]> {
    const app = await this.#appHandle();
    const out: ProviderRuntime[] = [];
    for await (const sandbox of this.#client.sandboxes.experimentalList({ appId: app.appId, tags: { ...input.labels } })) {
      const runtime = await this.#runtimeOf(sandbox).catch((err: unknown) => {
        if (this.describe(err).notFound) return null;
        throw err;
      });
      if (runtime !== null) out.push(runtime);
    }
    return out;
  }

  /** Never reached: an ended sandbox is gone to the kit, and the acquire creates the compute again. */
  async resume(input: { runtime: ProviderRuntime }): Promise<void> {
    throw new Error(`modal: sandbox ${input.runtime.id} cannot be resumed; its compute is recreated by the next acquire`);
  }

  /** Flushes the workspace to the volume, then ends the compute (Modal has no pause). */
  async suspend(input: { runtime: ProviderRuntime; signal: AbortSignal }): Promise<void> {
    const sandbox = await this.#client.sandboxes.fromId(input.runtime.id);
    const flush = await sandbox.exec(["sync", MOUNT], { stdout: "ignore", stderr: "pipe", mode: "binary" });
    const [code, stderr] = await Promise.all([flush.wait(), new Response(flush.stderr as ReadableStream<Uint8Array>).text()]);
    if (code !== 0) throw new Error(`syncing ${MOUNT} to the volume failed (exit ${code}): ${stderr.trim().slice(-300)}`);
    await sandbox.terminate();
  }

  async destroy(input: { id: string }): Promise<"destroyed" | "not_found"> {
    try {
      const sandbox = await this.#client.sandboxes.fromId(input.id);
      if ((await sandbox.poll()) !== null) return "not_found";
      await sandbox.terminate();
      return "destroyed";
    } catch (err) {
      if (this.describe(err).notFound) return "not_found";
      throw err;
    }
  }

  /** Modal sandboxes have a fixed lifetime and no lease: nothing to renew. */
  async renew(): Promise<void> {}

  async api(input: { id: string }): Promise<RemoteSandboxApi> {
    return modalApi(await this.#client.sandboxes.fromId(input.id));
  }

  describe(err: unknown): ProviderFailure {
    const message = err instanceof Error ? err.message : String(err);
    if (err instanceof NotFoundError) return { retryable: false, notFound: true, conflict: false, message };
    if (err instanceof AlreadyExistsError) return { retryable: false, notFound: false, conflict: true, message };
    if (err instanceof InvalidError) return { retryable: false, notFound: false, conflict: false, message };
    const code = (err as { code?: unknown } | null)?.code;
    if (typeof code === "number") {
      return {
        retryable: RETRYABLE_CODES.has(code),
        notFound: code === GRPC.notFound,
        conflict: code === GRPC.alreadyExists,
        message,
      };
    }
    // A closed connection, an aborted call, an SDK timeout: the service may answer later.
    return { retryable: true, notFound: false, conflict: false, message };
  }

  async close(): Promise<void> {
    this.#client.close();
  }
}

/** Runs `make` with `MODAL_SERVER_URL` set to `url` (when given), restoring the environment afterwards. */
function withServerUrl<T>(url: string | undefined, make: () => T): T {
  if (url === undefined) return make();
  const before = process.env.MODAL_SERVER_URL;
  process.env.MODAL_SERVER_URL = url;
  try {
    return make();
  } finally {
    if (before === undefined) delete process.env.MODAL_SERVER_URL;
    else process.env.MODAL_SERVER_URL = before;
  }
}

function modalApi(sandbox: Sandbox): RemoteSandboxApi {
  return {
    stdinEof: true,
    start: ({ argv, onOutput }) => startCommand(sandbox, argv, onOutput),
    async readFile(path) {
      const process = await sandbox.exec(["/bin/sh", "-c", READ, "openma-read", path], { mode: "binary" });
      const [code, content, stderr] = await Promise.all([process.wait(), bytesOf(process.stdout), bytesOf(process.stderr)]);
      if (code === NO_FILE) return null;
      if (code !== 0) throw new Error(`reading ${path} failed (exit ${code}): ${Buffer.from(stderr).toString("utf8").trim().slice(-300)}`);
      return content;
    },
    async writeFile(path, content) {
      const process = await sandbox.exec(["/bin/sh", "-c", WRITE, "openma-write", path], { mode: "binary" });
      const writer = process.stdin.getWriter();
      await writer.write(content);
      await writer.close();
      const [code, stderr] = await Promise.all([process.wait(), bytesOf(process.stderr), bytesOf(process.stdout)]);
      if (code !== 0) throw new Error(`writing ${path} failed (exit ${code}): ${Buffer.from(stderr).toString("utf8").trim().slice(-300)}`);
    },
  };
}

async function bytesOf(stream: unknown): Promise<Uint8Array> {
  return new Uint8Array(await new Response(stream as ReadableStream<Uint8Array>).arrayBuffer());
}

/** Pumps one output stream to `onOutput`; resolves when it ends, rejects when it breaks. */
async function pump(stream: unknown, name: OutputStream, onOutput: (stream: OutputStream, chunk: Uint8Array) => void): Promise<void> {
  const reader = (stream as ReadableStream<Uint8Array>).getReader();
  for (;;) {
    const next = await reader.read();
    if (next.done) return;
    if (next.value.length > 0) onOutput(name, next.value);
  }
}

async function startCommand(
  sandbox: Sandbox,
  argv: readonly string[],
  onOutput: (stream: OutputStream, chunk: Uint8Array) => void,
): Promise<RemoteCommand> {
  const process: ContainerProcess<Uint8Array> = await sandbox.exec([...argv], { mode: "binary" });
  const writer = process.stdin.getWriter();
  const streams = Promise.all([pump(process.stdout, "stdout", onOutput), pump(process.stderr, "stderr", onOutput)]);
  const done: Promise<RemoteEnd> = Promise.all([process.wait(), streams]).then(
    ([exitCode]) => ({ type: "exited", exitCode }),
    (err: unknown) => ({ type: "lost", message: err instanceof Error ? err.message : String(err) }),
  );
  return {
    write: (chunk) => writer.write(chunk),
    closeStdin: () => writer.close(),
    // The SDK has no per-exec kill; the kit kills the command's whole tree with a second command.
    kill: async () => {},
    done,
  };
}
