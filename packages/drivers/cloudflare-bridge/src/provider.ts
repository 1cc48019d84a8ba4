/**
 * The Cloudflare Sandbox Bridge as a CloudProvider, through the typed
 * client of its shipped OpenAPI document (@openma/cloudflare-bridge-client).
 *
 * What the bridge API gives, and what the driver does with it:
 * - `POST /v1/sandbox` mints an id; the bridge's warm pool assigns a
 *   container to an id on its first request, and assigns a FRESH one after
 *   the container went away. So every `/v1/sandbox/{id}/*` request may
 *   start a container, and there is no way to ask whether one exists.
 * - No labels, no listing. Ownership is a file the driver writes into the
 *   container at create (`/var/lib/openma/owner.json`, outside /workspace,
 *   so checkpoints never carry it); `get` reads it back. A container
 *   without it is one the pool just assigned in place of a vanished one:
 *   `get` deletes it at once and answers "gone". `list` answers nothing
 *   (the API cannot enumerate sandboxes): orphans are found from the host's
 *   own records, which carry their leases, and reaped by lease.
 * - Exec is argv over SSE with no stdin and no kill. Input is spooled:
 *   kept until stdin is closed, uploaded through the file API, and given
 *   to the command as its stdin when it starts. A kill ends the stream; the
 *   kit kills the process tree itself.
 * - Files: the file API only reaches /workspace. Elsewhere, a read is a
 *   `cat` (output is base64 on the wire, so binary-safe) and a write is
 *   staged under /workspace and moved into place.
 * - `persist`/`hydrate` move /workspace as a tar (see the driver's
 *   checkpoint methods).
 */
import { createHash, randomBytes } from "node:crypto";
import { posix } from "node:path";
import { type BridgeClient, BridgeError, createBridgeClient, type ExecEnd } from "@openma/cloudflare-bridge-client";
import type { OutputStream } from "@openma/contract";
import {
  type CloudProvider,
  type ProviderFailure,
  type ProviderRuntime,
  type RemoteEnd,
  type RemoteSandboxApi,
  SpooledCommand,
} from "@openma/driver-kit/remote";

export interface CloudflareBridgeConfig {
  /** `CLOUDFLARE_BRIDGE_URL`: the bridge Worker's origin. */
  url: string;
  /** `SANDBOX_API_KEY`: the bridge's Bearer token. */
  apiKey: string;
}

export const WORKSPACE = "/workspace";
export const OWNER_FILE = "/var/lib/openma/owner.json";
/** What a command's spooled stdin may hold: the bridge's file write limit. */
const MAX_SPOOL_BYTES = 32 * 1024 * 1024;

/** Writes the ownership record (`$1`, JSON) where checkpoints of /workspace never reach it. */
const WRITE_OWNER = 'mkdir -p -- "$(dirname -- "$2")" && printf %s "$1" > "$2"';
/** The ownership record, or exit 3 when this container has none. */
const READ_OWNER = '[ -f "$1" ] || exit 3; cat -- "$1"';
/**
 * Only in a container that holds the ownership record (`$1`): a sentinel
 * line on stdout (stripped by the driver), then input fully spooled into
 * `$2` (or none), then the command itself. Without the record the bridge
 * has given the id a fresh container (ours is gone): nothing runs.
 */
const SPOOLED =
  'o=$1; f=$2; shift 2; [ -f "$o" ] || exit 0; printf "%s\\n" openma-owned; if [ -n "$f" ]; then exec 0<"$f" || exit 127; rm -f -- "$f"; else exec 0</dev/null; fi; exec "$@"';
const SENTINEL = Buffer.from("openma-owned\n");
/** A file's bytes on stdout; exit 3 when there is no such regular file. */
const CAT = '[ -f "$1" ] || exit 3; exec cat -- "$1"';
/** Moves an upload staged under /workspace into place. */
const PLACE = 'mkdir -p -- "$(dirname -- "$2")" && mv -f -- "$1" "$2"';

/** RFC 4648 base32 (lower case) of the name's sha256, 26 characters: an id of the form the bridge accepts (`[a-z2-7]{1,128}`). */
export function sandboxIdFor(name: string): string {
  const alphabet = "abcdefghijklmnopqrstuvwxyz234567";
  let bits = 0;
  let value = 0;
  let out = "";
  for (const byte of createHash("sha256").update(name).digest().subarray(0, 16)) {
    value = ((value << 8) | byte) & 0xffff;
    bits += 8;
    while (bits >= 5) {
      out += alphabet[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  return bits > 0 ? out + alphabet[(value << (5 - bits)) & 31] : out;
}

interface OwnerRecord {
  name?: string;
  labels?: Record<string, string>;
  createdAt?: string;
}

const runtimeOf = (id: string, owner: OwnerRecord): ProviderRuntime => ({
  id,
  name: owner.name ?? id,
  labels: { ...(owner.labels ?? {}) },
  state: "running",
  createdAt: owner.createdAt ?? null,
});

const messageOf = (err: unknown): string => (err instanceof Error ? err.message || err.name : String(err));
const stagePath = (what: string) => `${WORKSPACE}/.openma-${what}-${randomBytes(12).toString("hex")}`;

/** The path itself when it is a normalized absolute path inside /workspace (the file API's reach), else null. */
export function workspacePath(path: string): string | null {
  const normalized = posix.normalize(path);
  if (normalized !== path || !path.startsWith(`${WORKSPACE}/`)) return null;
  return path;
}

/** Runs a short command to its end, collecting its output. */
async function runToEnd(client: BridgeClient, id: string, argv: string[], signal: AbortSignal) {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  const end = await client.exec(id, { argv }, { signal, onOutput: (s, chunk) => (s === "stdout" ? out : err).push(Buffer.from(chunk)) });
  if (end.type !== "exit") throw new BridgeError("exec", null, end.type === "error" ? end.code : null, end.message);
  return { exitCode: end.exitCode, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString("utf8").trim() };
}

export class CloudflareBridgeProvider implements CloudProvider {
  readonly name = "cloudflare-bridge";
  readonly stdinEof = true;
  /** No stdin on the bridge's exec: input is spooled whole (see the module comment). */
  readonly streamingStdin = false;
  readonly client: BridgeClient;

  constructor(config: CloudflareBridgeConfig) {
    this.client = createBridgeClient({ url: config.url, apiKey: config.apiKey });
  }

  /**
   * The runtime a previous acquire with this name made: its id is derived
   * from the name (see `sandboxIdFor`). Asking starts a container when the
   * id has none; that one is left for `create`, which the kit calls next
   * with the same name, so a first acquire starts one container, not two.
   */
  async find(input: { name: string; signal: AbortSignal }): Promise<ProviderRuntime | null> {
    const id = sandboxIdFor(input.name);
    const owner = await this.#owner(id, input.signal);
    return owner === null ? null : runtimeOf(id, owner);
  }

  /** The id is derived from the name (see `sandboxIdFor`). */
  idFor(name: string): string {
    return sandboxIdFor(name);
  }

  /** The container's ownership record, or null when it has none. */
  async #owner(id: string, signal: AbortSignal): Promise<OwnerRecord | null> {
    const read = await runToEnd(this.client, id, ["/bin/sh", "-c", READ_OWNER, "openma-owner", OWNER_FILE], signal);
    if (read.exitCode === 3) return null;
    if (read.exitCode !== 0) throw new Error(`reading the ownership record failed: ${read.stderr || `exit ${read.exitCode}`}`);
    return JSON.parse(read.stdout.toString("utf8")) as OwnerRecord;
  }

  /**
   * The id is the name's, not one `POST /v1/sandbox` mints: the bridge takes
   * any well-formed id, and only a derived one lets a retried acquire find
   * what an earlier attempt made. The container starts with the ownership
   * record's write.
   */
  async create(input: { name: string; labels: Readonly<Record<string, string>>; signal: AbortSignal }): Promise<ProviderRuntime> {
    const id = sandboxIdFor(input.name);
    const owner = JSON.stringify({ name: input.name, labels: input.labels, createdAt: new Date().toISOString() });
    try {
      const written = await runToEnd(this.client, id, ["/bin/sh", "-c", WRITE_OWNER, "openma-owner", owner, OWNER_FILE], input.signal);
      if (written.exitCode !== 0) throw new Error(`writing the ownership record failed: ${written.stderr || `exit ${written.exitCode}`}`);
    } catch (err) {
      await this.client.destroy(id, AbortSignal.timeout(60_000)).catch(() => {});
      throw err;
    }
    return { id, name: input.name, labels: { ...input.labels }, state: "running", createdAt: new Date().toISOString() };
  }

  async get(input: { id: string; signal: AbortSignal }): Promise<ProviderRuntime | null> {
    const owner = await this.#owner(input.id, input.signal);
    if (owner === null) {
      // The pool assigned this id a fresh container because ours is gone; this read started it, so it goes too.
      await this.client.destroy(input.id, input.signal);
      return null;
    }
    return runtimeOf(input.id, owner);
  }

  /**
   * The bridge API has no listing (the pool only counts): nothing is listed,
   * and the host's own records, which carry leases, are the inventory. The
   * count is still asked, so a listing fails when the bridge is unreachable
   * or refuses the key (what `openma doctor` probes).
   */
  async list(input: { signal: AbortSignal }): Promise<ProviderRuntime[]> {
    await this.client.poolStats(input.signal);
    return [];
  }

  async resume(): Promise<void> {
    throw new Error("the Cloudflare Sandbox Bridge has no suspend or resume");
  }

  async suspend(): Promise<void> {
    throw new Error("the Cloudflare Sandbox Bridge has no suspend or resume");
  }

  /** `DELETE /v1/sandbox/{id}` answers 204 whether or not the id had a container. */
  async destroy(input: { id: string; signal: AbortSignal }): Promise<"destroyed" | "not_found"> {
    await this.client.destroy(input.id, input.signal);
    return "destroyed";
  }

  /** No provider lease: a bridge container lives until it is deleted (or its Durable Object sleeps it). */
  async renew(): Promise<void> {}

  async api(input: { id: string }): Promise<RemoteSandboxApi> {
    return bridgeApi(this.client, input.id);
  }

  describe(err: unknown): ProviderFailure {
    if (err instanceof BridgeError && err.status !== null) {
      const status = err.status;
      return { retryable: status >= 500 || status === 429, notFound: status === 404, conflict: status === 409, message: err.message };
    }
    // A network error, a broken stream, an error event, a timed-out or aborted call: the bridge may answer later.
    return { retryable: true, notFound: false, conflict: false, message: messageOf(err) };
  }

  async close(): Promise<void> {}
}

function bridgeApi(client: BridgeClient, id: string): RemoteSandboxApi {
  return {
    stdinEof: true,
    start: async ({ argv, onOutput }) => new BridgeCommand(client, id, argv, onOutput),
    async readFile(path, signal) {
      if (workspacePath(path) !== null) return client.readFile(id, path, signal);
      const read = await runToEnd(client, id, ["/bin/sh", "-c", CAT, "openma-read", path], signal);
      if (read.exitCode === 3) return null;
      if (read.exitCode !== 0) throw new Error(`reading ${path} failed: ${read.stderr || `exit ${read.exitCode}`}`);
      return new Uint8Array(read.stdout);
    },
    async writeFile(path, content, signal) {
      if (workspacePath(path) !== null) return client.writeFile(id, path, content, signal);
      const staged = stagePath("upload");
      await client.writeFile(id, staged, content, signal);
      const placed = await runToEnd(client, id, ["/bin/sh", "-c", PLACE, "openma-place", staged, path], signal);
      if (placed.exitCode !== 0) throw new Error(`placing ${path} failed: ${placed.stderr || `exit ${placed.exitCode}`}`);
    },
  };
}

/**
 * The kit's spooled command over the bridge: the input is uploaded under
 * /workspace, then the exec starts. A kill after that drops the stream (the
 * bridge has no kill; the kit kills the tree).
 */
class BridgeCommand extends SpooledCommand {
  readonly #stop = new AbortController();

  constructor(
    private readonly client: BridgeClient,
    private readonly id: string,
    private readonly argv: readonly string[],
    private readonly onOutput: (stream: OutputStream, chunk: Uint8Array) => void,
  ) {
    super(MAX_SPOOL_BYTES);
  }

  protected async run(input: Buffer): Promise<RemoteEnd> {
    const signal = this.#stop.signal;
    let spool = "";
    if (input.length > 0) {
      spool = stagePath("stdin");
      await this.client.writeFile(this.id, spool, input, signal);
    }
    if (this.killed) return { type: "exited", exitCode: 137 };
    let end: ExecEnd;
    const sentinel = new SentinelStrip(this.onOutput);
    try {
      const argv = ["/bin/sh", "-c", SPOOLED, "openma-spool", OWNER_FILE, spool, ...this.argv];
      end = await this.client.exec(this.id, { argv }, { signal, onOutput: sentinel.output });
    } catch (err) {
      if (this.killed) return { type: "exited", exitCode: 137 };
      throw err;
    }
    if (end.type === "exit" && !sentinel.seen) {
      // The container this exec started is not ours: it goes, and the command is lost with the runtime.
      await this.client.destroy(this.id, AbortSignal.timeout(60_000)).catch(() => {});
      return { type: "lost", message: "the runtime is gone (the bridge assigned its id a fresh container)" };
    }
    if (end.type === "exit") return { type: "exited", exitCode: end.exitCode };
    if (this.killed) return { type: "exited", exitCode: 137 };
    return { type: "lost", message: end.type === "error" ? `${end.code}: ${end.message}` : end.message };
  }

  protected async stop(): Promise<void> {
    this.#stop.abort();
  }
}

/** Passes output on once the wrapper's sentinel line has come first on stdout (it may arrive split). */
class SentinelStrip {
  seen = false;
  #head = Buffer.alloc(0);

  constructor(private readonly onOutput: (stream: OutputStream, chunk: Uint8Array) => void) {}

  readonly output = (stream: OutputStream, chunk: Uint8Array): void => {
    if (this.seen || stream === "stderr") {
      this.onOutput(stream, chunk);
      return;
    }
    this.#head = Buffer.concat([this.#head, chunk]);
    if (this.#head.length < SENTINEL.length) return;
    if (!this.#head.subarray(0, SENTINEL.length).equals(SENTINEL)) throw new Error("the command wrapper's sentinel is missing");
    this.seen = true;
    const rest = this.#head.subarray(SENTINEL.length);
    this.#head = Buffer.alloc(0);
    if (rest.length > 0) this.onOutput(stream, rest);
  };
}
