/**
 * Vercel Sandbox through `@vercel/sandbox` 3.5: every wire call is the
 * SDK's. A runtime is a persistent named sandbox, addressed by its name:
 * stopping it (the driver's suspend, or the platform at the session's
 * timeout) snapshots its filesystem, and the next command or a
 * `get({resume: true})` restores that snapshot into a fresh session. The
 * SDK has no base-URL setting; its documented per-call `fetch` option
 * routes it (OPENMA_VERCEL_API_URL), and every instance method reuses the
 * client that option built.
 *
 * Ownership: the platform keeps at most five tags per sandbox, fewer than
 * the kit's labels, so the labels travel as one encoded tag next to the
 * driver tag the listing filters by.
 *
 * Commands: Vercel's command API has no stdin. Input is spooled instead:
 * what the kit writes is kept until it closes stdin, then uploaded (the
 * SDK's tar file write) and the command starts with that file as its stdin.
 * A command therefore starts only once its input is complete, which is
 * enough for every exec, helper and the `ama_worker` launch (one line, then
 * end-of-file), and not for an interactive process: the tool port has no
 * long-lived process (`streamingStdin: false`). Commands run detached with
 * `sudo` (OpenMA owns the whole sandbox); their output is the NDJSON log
 * stream, their end `GET .../cmd/{id}?wait=true`. The file API runs as the
 * sandbox's default user, so writes land in /tmp and a root command moves
 * them into place, and reads fetch a copy a root command made for it.
 */
import { randomBytes } from "node:crypto";
import type { OutputStream } from "@openma/contract";
import {
  type CloudProvider,
  type ProviderFailure,
  type ProviderRuntime,
  type ProviderState,
  type RemoteEnd,
  type RemoteSandboxApi,
  SpooledCommand,
} from "@openma/driver-kit/remote";
import { APIError, type Command, Sandbox, StreamError } from "@vercel/sandbox";

/** The API base the SDK hardcodes; the routed fetch swaps it for the configured one. */
export const VERCEL_API_BASE = "https://vercel.com/api";

export interface VercelConfig {
  /** `VERCEL_TOKEN` (with team and project), or the OIDC token (`VERCEL_OIDC_TOKEN`), which names both. */
  token: string;
  /** `VERCEL_TEAM_ID`. */
  teamId: string;
  /** `VERCEL_PROJECT_ID`. */
  projectId: string;
  /** `OPENMA_VERCEL_API_URL`: a Vercel-compatible API (the SDK's own base otherwise). */
  apiUrl?: string;
  /** `OPENMA_VERCEL_IMAGE`: the image sandboxes start from (the platform's default image has Node 24). */
  image?: string;
  /** A session's lifetime without a heartbeat (default 30 min); heartbeats extend it. */
  sessionTimeoutMs?: number;
  /** Runtime name prefix, listed by (default `openma-`). */
  listPrefix?: string;
}

export const DRIVER_TAG = "openma.driver";
export const LABELS_TAG = "openma.labels";
const DEFAULT_SESSION_TIMEOUT_MS = 30 * 60_000;
/** What a command's spooled stdin may hold (the remote bindings' archives pass through it). */
const MAX_SPOOL_BYTES = 512 * 1024 * 1024;
/** Where the file API (the default user) stages uploads and spooled stdin. */
const STAGE_DIR = "/tmp";

/** Input fully spooled into `$1` (or none), then the command itself. */
const SPOOLED = 'f=$1; shift; if [ -n "$f" ]; then exec 0<"$f" || exit 127; rm -f -- "$f"; else exec 0</dev/null; fi; exec "$@"';
/** Moves an upload staged by the default user into place, as root. */
const PLACE = 'mkdir -p -- "$(dirname -- "$2")" && mv -f -- "$1" "$2"';
/** A copy of a file the default user can read through the file API; exit 3 when there is no such file. */
const STAGE_READ = '[ -f "$1" ] || exit 3; cp -- "$1" "$2" || exit 1; if [ -n "$SUDO_UID" ]; then chown -- "$SUDO_UID" "$2"; fi';

export function encodeLabels(labels: Readonly<Record<string, string>>): string {
  return Buffer.from(JSON.stringify(labels)).toString("base64url");
}

export function decodeLabels(tags: Readonly<Record<string, string>> | undefined): Record<string, string> {
  const packed = tags?.[LABELS_TAG];
  if (!packed) return {};
  try {
    const parsed = JSON.parse(Buffer.from(packed, "base64url").toString("utf8")) as unknown;
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return {};
    return Object.fromEntries(Object.entries(parsed).filter((e): e is [string, string] => typeof e[1] === "string"));
  } catch {
    return {};
  }
}

/** The SDK's documented per-call `fetch`, sending what it addresses to `apiUrl` instead. */
export function routedFetch(apiUrl: string | undefined): typeof fetch | undefined {
  if (!apiUrl) return undefined;
  const base = apiUrl.replace(/\/+$/, "");
  return (input, init) => {
    const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
    return fetch(url.startsWith(VERCEL_API_BASE) ? base + url.slice(VERCEL_API_BASE.length) : url, init);
  };
}

function stateOf(status: string | undefined): ProviderState {
  switch (status) {
    case "running":
      return "running";
    case "pending":
    case "snapshotting":
      return "starting";
    case "stopping":
    case "stopped":
      // Persistent: the filesystem is in its snapshot and the next request restores it.
      return "suspended";
    default:
      // failed, aborted
      return "failed";
  }
}

interface Listed {
  name: string;
  status?: string;
  tags?: Record<string, string>;
  createdAt?: number;
}

function runtimeOf(sandbox: Listed): ProviderRuntime {
  return {
    id: sandbox.name,
    name: sandbox.name,
    labels: decodeLabels(sandbox.tags),
    state: stateOf(sandbox.status),
    createdAt: typeof sandbox.createdAt === "number" ? new Date(sandbox.createdAt).toISOString() : null,
  };
}

const statusOf = (err: unknown): number | null => (err instanceof APIError ? err.response.status : null);
const messageOf = (err: unknown): string => (err instanceof Error ? err.message || err.name : String(err));

export class VercelProvider implements CloudProvider {
  readonly name = "vercel";
  readonly stdinEof = true;
  /** No stdin while a command runs: input is spooled whole (see the module comment). */
  readonly streamingStdin = false;
  readonly #config: VercelConfig;
  readonly #prefix: string;
  readonly #fetch: typeof fetch | undefined;
  readonly #timeoutMs: number;

  constructor(config: VercelConfig) {
    if (!config.token) throw new Error("vercel: a token is required (VERCEL_TOKEN or VERCEL_OIDC_TOKEN)");
    if (!config.teamId || !config.projectId)
      throw new Error("vercel: a team and a project are required (VERCEL_TEAM_ID, VERCEL_PROJECT_ID)");
    this.#config = config;
    this.#prefix = config.listPrefix ?? "openma-";
    this.#fetch = routedFetch(config.apiUrl);
    this.#timeoutMs = config.sessionTimeoutMs ?? DEFAULT_SESSION_TIMEOUT_MS;
  }

  /** Credentials and routing, on every SDK entry point. */
  get #access() {
    const { token, teamId, projectId } = this.#config;
    return { token, teamId, projectId, ...(this.#fetch ? { fetch: this.#fetch } : {}) };
  }

  #sandbox(name: string, signal: AbortSignal, resume = false): Promise<Sandbox> {
    return Sandbox.get({ ...this.#access, name, signal, ...(resume ? { resume: true } : {}) });
  }

  async find(input: { name: string; signal: AbortSignal }): Promise<ProviderRuntime | null> {
    return this.get({ id: input.name, signal: input.signal });
  }

  async create(input: { name: string; labels: Readonly<Record<string, string>>; signal: AbortSignal }): Promise<ProviderRuntime> {
    const sandbox = await Sandbox.create({
      ...this.#access,
      name: input.name,
      persistent: true,
      tags: { [DRIVER_TAG]: this.name, [LABELS_TAG]: encodeLabels(input.labels) },
      timeout: this.#timeoutMs,
      ...(this.#config.image ? { image: this.#config.image } : {}),
      signal: input.signal,
    });
    return {
      id: sandbox.name,
      name: sandbox.name,
      labels: { ...input.labels },
      state: "running",
      createdAt: sandbox.createdAt.toISOString(),
    };
  }

  async get(input: { id: string; signal: AbortSignal }): Promise<ProviderRuntime | null> {
    try {
      const sandbox = await this.#sandbox(input.id, input.signal);
      return runtimeOf({ name: sandbox.name, status: sandbox.status, tags: sandbox.tags, createdAt: sandbox.createdAt.getTime() });
    } catch (err) {
      if (this.describe(err).notFound) return null;
      throw err;
    }
  }

  /** By the driver tag and the name prefix (the listing filters by one tag), then by the decoded labels. */
  async list(input: { labels: Readonly<Record<string, string>>; signal: AbortSignal }): Promise<ProviderRuntime[]> {
    const out: ProviderRuntime[] = [];
    const listed = await Sandbox.list({
      ...this.#access,
      tags: { [DRIVER_TAG]: this.name },
      namePrefix: this.#prefix,
      limit: 100,
      signal: input.signal,
    });
    for await (const sandbox of listed) {
      const runtime = runtimeOf(sandbox as Listed);
      if (Object.entries(input.labels).every(([k, v]) => runtime.labels[k] === v)) out.push(runtime);
    }
    return out;
  }

  /** A new session restored from the sandbox's snapshot. */
  async resume(input: { runtime: ProviderRuntime; signal: AbortSignal }): Promise<void> {
    await this.#sandbox(input.runtime.id, input.signal, true);
  }

  /** Stop: the platform snapshots the filesystem; memory and processes end. */
  async suspend(input: { runtime: ProviderRuntime; signal: AbortSignal }): Promise<void> {
    const sandbox = await this.#sandbox(input.runtime.id, input.signal);
    if (sandbox.status === "stopped") return;
    await sandbox.stop({ signal: input.signal });
  }

  async destroy(input: { id: string; signal: AbortSignal }): Promise<"destroyed" | "not_found"> {
    try {
      const sandbox = await this.#sandbox(input.id, input.signal);
      await sandbox.delete({ signal: input.signal });
      return "destroyed";
    } catch (err) {
      if (this.describe(err).notFound) return "not_found";
      throw err;
    }
  }

  /** The session's timeout is the provider lease: once less than half of it is left, it is extended by half. */
  async renew(input: { runtime: ProviderRuntime; signal: AbortSignal }): Promise<void> {
    const sandbox = await this.#sandbox(input.runtime.id, input.signal);
    if (sandbox.status !== "running") return;
    const session = sandbox.currentSession();
    const since = (session.startedAt ?? session.requestedAt).getTime();
    if (since + session.timeout - Date.now() < this.#timeoutMs / 2)
      await sandbox.extendTimeout(Math.floor(this.#timeoutMs / 2), { signal: input.signal });
  }

  async api(input: { id: string; signal: AbortSignal }): Promise<RemoteSandboxApi> {
    return vercelApi(await this.#sandbox(input.id, input.signal));
  }

  describe(err: unknown): ProviderFailure {
    const status = statusOf(err);
    const message = messageOf(err);
    if (status !== null) {
      return {
        retryable: status >= 500 || status === 429,
        notFound: status === 404,
        conflict: status === 409,
        message: `${status} ${message}`,
      };
    }
    // A network error, a cut stream (StreamError), a timed-out or aborted call: the platform may answer later.
    return { retryable: true, notFound: false, conflict: false, message };
  }

  async close(): Promise<void> {}
}

const stagePath = (what: string) => `${STAGE_DIR}/openma-${what}-${randomBytes(12).toString("hex")}`;

/** Runs a short root command to its end; throws unless it exited 0 (or `allowed`). */
async function rootCommand(sandbox: Sandbox, script: string, args: string[], signal: AbortSignal, allowed: number[] = []) {
  const done = await sandbox.runCommand({ cmd: "/bin/sh", args: ["-c", script, "openma", ...args], sudo: true, signal });
  if (done.exitCode !== 0 && !allowed.includes(done.exitCode))
    throw new Error((await done.stderr({ signal })).trim() || `exit code ${done.exitCode}`);
  return { exitCode: done.exitCode };
}

function vercelApi(sandbox: Sandbox): RemoteSandboxApi {
  return {
    stdinEof: true,
    start: async ({ argv, onOutput }) => new VercelCommand(sandbox, argv, onOutput),
    async readFile(path, signal) {
      const staged = stagePath("download");
      const copied = await rootCommand(sandbox, STAGE_READ, [path, staged], signal, [3]);
      if (copied.exitCode === 3) return null;
      try {
        const content = await sandbox.readFileToBuffer({ path: staged }, { signal });
        if (content === null) throw new Error(`the staged copy of ${path} disappeared`);
        return new Uint8Array(content);
      } finally {
        void rootCommand(sandbox, 'rm -f -- "$1"', [staged], AbortSignal.timeout(60_000)).catch(() => {});
      }
    },
    async writeFile(path, content, signal) {
      const staged = stagePath("upload");
      await sandbox.writeFiles([{ path: staged, content: Buffer.from(content), mode: 0o600 }], { signal });
      await rootCommand(sandbox, PLACE, [staged, path], signal);
    },
  };
}

/** The kit's spooled command over Vercel's detached commands: the input is uploaded (a tar file write), then the command starts. */
class VercelCommand extends SpooledCommand {
  #command: Command | null = null;
  readonly #stop = new AbortController();

  constructor(
    private readonly sandbox: Sandbox,
    private readonly argv: readonly string[],
    private readonly onOutput: (stream: OutputStream, chunk: Uint8Array) => void,
  ) {
    super(MAX_SPOOL_BYTES);
  }

  protected async run(input: Buffer): Promise<RemoteEnd> {
    if (this.killed) return { type: "exited", exitCode: 137 };
    const signal = this.#stop.signal;
    let spool = "";
    if (input.length > 0) {
      spool = stagePath("stdin");
      await this.sandbox.writeFiles([{ path: spool, content: input, mode: 0o600 }], { signal });
    }
    if (this.killed) return { type: "exited", exitCode: 137 };
    const command = await this.sandbox.runCommand({
      cmd: "/bin/sh",
      args: ["-c", SPOOLED, "openma-spool", spool, ...this.argv],
      cwd: "/",
      sudo: true,
      detached: true,
      signal,
    });
    this.#command = command;
    if (this.killed) void command.kill("SIGKILL").catch(() => {});
    try {
      for await (const log of command.logs({ signal })) {
        if (log.stream === "stdout" || log.stream === "stderr") this.onOutput(log.stream, Buffer.from(log.data));
      }
    } catch (err) {
      if (err instanceof StreamError || !signal.aborted) return { type: "lost", message: `the log stream broke: ${messageOf(err)}` };
    }
    const finished = await command.wait({ signal });
    return { type: "exited", exitCode: finished.exitCode };
  }

  protected async stop(): Promise<void> {
    await this.#command?.kill("SIGKILL").catch((err: unknown) => {
      if (statusOf(err) !== 404) throw err;
    });
  }
}
