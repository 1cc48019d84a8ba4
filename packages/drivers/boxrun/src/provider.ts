/**
 * A CloudProvider over a BoxLite runtime of `@boxlite-ai/boxlite` 0.10. The
 * SDK gives its REST client (`JsBoxlite.rest`, BoxRun) and its embedded
 * micro-VM runtime (`new JsBoxlite`, litebox) one interface, so one
 * provider serves both. Over REST every wire call is the client's native
 * transport (box CRUD under `/v1[/prefix]/boxes`, an execution started with
 * `POST .../exec` and followed over its attach WebSocket, tar copies
 * through `.../files`).
 *
 * Ownership: the REST create takes no labels, so the marks travel in the
 * box name (names.ts); an acquire finds its earlier attempt by that name,
 * and a listing matches names by prefix and operator-label digest.
 *
 * Retained boxes: suspend is the API's stop (the VM ends, the box's disk is
 * kept by the server, best effort: a server that loses its disk loses the
 * box's files), resume its start. AutoStop is disabled at create: the
 * driver's heartbeats, not the server's idle timer, decide a box's life.
 *
 * The client takes host paths for copies, so file reads and writes go
 * through a private temporary directory of this process; what comes back
 * from a box is treated as hostile (only a regular file is read, never
 * through a symlink).
 */
import { constants } from "node:fs";
import { lstat, mkdtemp, open, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, posix } from "node:path";
import { ApiKeyCredential, type Boxlite, BoxliteRestOptions, JsBoxlite } from "@boxlite-ai/boxlite";
import type { OutputStream } from "@openma/contract";
import type {
  CloudProvider,
  ProviderFailure,
  ProviderRuntime,
  ProviderState,
  RemoteCommand,
  RemoteEnd,
  RemoteSandboxApi,
} from "@openma/driver-kit/remote";
import { BoxNameError, boxNameFor, extraLabels, matchesExtra, parseBoxName } from "./names.ts";

export interface BoxRunConfig {
  /** `BOXLITE_REST_URL`: the REST server (e.g. `http://localhost:8100`, or a cloud deployment's base). */
  url: string;
  /** `BOXLITE_API_KEY`: the bearer credential. */
  apiKey: string;
  /** `BOXLITE_PATH_PREFIX`: the `{prefix}` routing slot (`Principal.path_prefix` of `GET /v1/me`); none for a single-tenant server. */
  pathPrefix?: string;
  /** `OPENMA_BOXRUN_IMAGE`: the OCI image boxes start from; it needs a POSIX shell, tar and, for `ama_worker`, Node 24. */
  image?: string;
  /** The box name prefix listings filter by (the driver's name prefix). */
  namePrefix?: string;
}

const DEFAULT_IMAGE = "node:24-bookworm-slim";
/** The file the client's copy-out writes under a fresh directory of ours. */
const COPY_NAME = "copy";

function stateOf(status: string): ProviderState {
  switch (status) {
    case "running":
      return "running";
    case "configured":
    case "stopping":
    case "stopped":
    case "paused":
      // Retained: a start brings it back with its disk.
      return "suspended";
    default:
      // failed, unknown
      return "failed";
  }
}

interface Info {
  id: string;
  name?: string | null;
  state: { status: string };
  createdAt: string;
}

const messageOf = (err: unknown): string => (err instanceof Error ? err.message : String(err));

/** What a box is created from: an image reference (REST) or a local rootfs / OCI layout (embedded). */
export type BoxSource = Pick<BoxOptions, "image" | "rootfsPath" | "cpus" | "memoryMib">;
type BoxOptions = Parameters<Boxlite["create"]>[0];

export interface BoxliteProviderOptions {
  /** The conformance table's driver name. */
  name: string;
  /** The runtime, or how to open it on first use (an embedded runtime that cannot open here must not break construction). */
  runtime: Boxlite | (() => Boxlite);
  /** Resolved at each create (the embedded runtime's layout is built on first use). */
  source: () => Promise<BoxSource>;
  /** The box name prefix listings filter by (the driver's name prefix). */
  namePrefix: string;
  /** Runtime failures (beyond the client's error kinds) that no retry fixes, e.g. a VM that cannot boot here. */
  permanent?: (message: string) => boolean;
}

/** The REST client's runtime (BoxRun). */
export function boxRunRuntime(config: BoxRunConfig): Boxlite {
  if (!config.url) throw new Error("boxrun: a REST URL is required (BOXLITE_REST_URL)");
  if (!config.apiKey) throw new Error("boxrun: an API key is required (BOXLITE_API_KEY)");
  return JsBoxlite.rest(
    new BoxliteRestOptions({
      url: config.url,
      credential: new ApiKeyCredential(config.apiKey),
      ...(config.pathPrefix ? { pathPrefix: config.pathPrefix } : {}),
    }),
  );
}

/** BoxRun: the provider over BoxLite's REST API. */
export function boxRunProvider(config: BoxRunConfig): BoxliteProvider {
  return new BoxliteProvider({
    name: "boxrun",
    runtime: boxRunRuntime(config),
    source: async () => ({ image: config.image ?? DEFAULT_IMAGE }),
    namePrefix: config.namePrefix ?? "openma",
  });
}

export class BoxliteProvider implements CloudProvider {
  readonly name: string;
  readonly stdinEof = true;
  readonly #open: () => Boxlite;
  #opened: Boxlite | null = null;
  readonly #source: () => Promise<BoxSource>;
  readonly #prefix: string;
  readonly #options: BoxliteProviderOptions;
  #scratch: Promise<string> | null = null;

  constructor(options: BoxliteProviderOptions) {
    this.name = options.name;
    const runtime = options.runtime;
    this.#open = typeof runtime === "function" ? runtime : () => runtime;
    this.#source = options.source;
    this.#prefix = options.namePrefix;
    this.#options = options;
  }

  get #rt(): Boxlite {
    this.#opened ??= this.#open();
    return this.#opened;
  }

  #runtime(info: Info, labels: Record<string, string>): ProviderRuntime {
    return { id: info.id, name: info.name ?? info.id, labels, state: stateOf(info.state.status), createdAt: info.createdAt || null };
  }

  /** The marks a box's name carries (empty for a box that is not ours). */
  #labelsOf(info: Info): Record<string, string> {
    return parseBoxName(this.#prefix, info.name, this.name)?.labels ?? {};
  }

  /** By name: the name is a digest of every label of the acquire, so a box with it carries them. */
  async find(input: { labels: Readonly<Record<string, string>> }): Promise<ProviderRuntime | null> {
    const name = boxNameFor(this.#prefix, input.labels);
    const info = await this.#rt.getInfo(name);
    return info === null || info.name !== name ? null : this.#runtime(info, { ...input.labels });
  }

  async create(input: { labels: Readonly<Record<string, string>> }): Promise<ProviderRuntime> {
    const name = boxNameFor(this.#prefix, input.labels);
    // detach: the box outlives this process; autoStop 0: the heartbeats, not an idle timer, keep it.
    const box = await this.#rt.create({ ...(await this.#source()), detach: true, autoStop: 0, autoDelete: 0, autoResume: true }, name);
    return { id: box.id, name, labels: { ...input.labels }, state: "running", createdAt: new Date().toISOString() };
  }

  async get(input: { id: string }): Promise<ProviderRuntime | null> {
    const info = await this.#rt.getInfo(input.id);
    return info === null ? null : this.#runtime(info, this.#labelsOf(info));
  }

  /** Every box whose name is ours and was made under these operator labels. */
  async list(input: { labels: Readonly<Record<string, string>> }): Promise<ProviderRuntime[]> {
    const out: ProviderRuntime[] = [];
    for (const info of await this.#rt.listInfo()) {
      const parsed = parseBoxName(this.#prefix, info.name, this.name);
      if (parsed === null || !matchesExtra(parsed, input.labels)) continue;
      const runtime = this.#runtime(info, { ...parsed.labels, ...extraLabels(input.labels) });
      if (Object.entries(input.labels).every(([key, value]) => runtime.labels[key] === value)) out.push(runtime);
    }
    return out;
  }

  async #box(id: string) {
    const box = await this.#rt.get(id);
    if (box === null) throw new Error(`box not found: ${id}`);
    return box;
  }

  async resume(input: { runtime: ProviderRuntime }): Promise<void> {
    await (await this.#box(input.runtime.id)).start();
  }

  /** The API's stop: the VM ends, the box and its disk stay. */
  async suspend(input: { runtime: ProviderRuntime }): Promise<void> {
    await (await this.#box(input.runtime.id)).stop();
  }

  async destroy(input: { id: string }): Promise<"destroyed" | "not_found"> {
    try {
      await this.#rt.remove(input.id, true);
      return "destroyed";
    } catch (err) {
      if (this.describe(err).notFound) return "not_found";
      throw err;
    }
  }

  /** No provider lease: AutoStop is off, so there is nothing to push forward. */
  async renew(): Promise<void> {}

  async api(input: { id: string }): Promise<RemoteSandboxApi> {
    const box = await this.#box(input.id);
    this.#scratch ??= mkdtemp(join(tmpdir(), "openma-boxrun-"));
    return boxApi(box, await this.#scratch);
  }

  /**
   * The client's errors are native and carry the server's error kind as the
   * message's lead ("box not found: ...", "already exists: ...", "internal
   * error: HTTP 429 ...", "network error: ...").
   */
  describe(err: unknown): ProviderFailure {
    const message = messageOf(err);
    const kind = message.slice(0, message.indexOf(":") + 1 || undefined).toLowerCase();
    const notFound = kind.includes("not found");
    const conflict = kind.startsWith("already exists");
    const refused =
      err instanceof BoxNameError ||
      ["configuration error", "invalid argument", "unsupported", "invalid state", "image error"].some((k) => kind.startsWith(k)) ||
      this.#options.permanent?.(message) === true;
    return { retryable: !notFound && !conflict && !refused, notFound, conflict, message };
  }

  async close(): Promise<void> {
    const scratch = this.#scratch;
    this.#scratch = null;
    if (scratch) await rm(await scratch, { recursive: true, force: true }).catch(() => {});
  }
}

type Box = NonNullable<Awaited<ReturnType<Boxlite["get"]>>>;

let sequence = 0;
/** A fresh directory under the provider's scratch directory for one copy. */
async function copyDir(scratch: string): Promise<string> {
  return mkdtemp(join(scratch, `${(sequence++).toString(36)}-`));
}

function boxApi(box: Box, scratch: string): RemoteSandboxApi {
  return {
    stdinEof: true,
    start: ({ argv, onOutput }) => startExecution(box, argv, onOutput),
    async readFile(path) {
      const dir = await copyDir(scratch);
      try {
        try {
          await box.copyOut(path, join(dir, COPY_NAME), { recursive: false, followSymlinks: true });
        } catch (err) {
          if (messageOf(err).toLowerCase().includes("no such file")) return null;
          throw err;
        }
        return await readRegular(dir, posix.basename(path));
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
    async writeFile(path, content) {
      const dir = await copyDir(scratch);
      try {
        const local = join(dir, COPY_NAME);
        await writeFile(local, content, { mode: 0o600 });
        const parent = posix.dirname(path);
        if (parent !== "/") await run(box, ["mkdir", "-p", "--", parent]);
        await box.copyIn(local, path, { recursive: false, overwrite: true });
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    },
  };
}

/**
 * The copied file: `<dir>/copy` itself, or the one entry under it when the
 * client extracted the archive into a directory. Never through a symlink.
 */
async function readRegular(dir: string, base: string): Promise<Uint8Array> {
  let path = join(dir, COPY_NAME);
  const first = await lstat(path);
  if (first.isDirectory()) {
    const names = await readdir(path);
    path = join(path, names.includes(base) ? base : (names[0] ?? base));
  }
  const handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  try {
    if (!(await handle.stat()).isFile()) throw new Error("the box sent something other than a regular file");
    return new Uint8Array(await handle.readFile());
  } finally {
    await handle.close();
  }
}

/** A short command to its end; throws unless it exited 0. */
async function run(box: Box, argv: readonly string[]): Promise<void> {
  const execution = await box.exec(argv[0] as string, argv.slice(1), null, false, null, null, "/");
  const [stderr, result] = await Promise.all([drain(await execution.stderr()), execution.wait()]);
  if (result.exitCode !== 0) throw new Error(`${argv.join(" ")}: ${stderr.trim() || `exit code ${result.exitCode}`}`);
}

async function drain(stream: { next(): Promise<string | null> }, onChunk?: (text: string) => void): Promise<string> {
  let text = "";
  for (let chunk = await stream.next(); chunk !== null; chunk = await stream.next()) {
    if (onChunk) onChunk(chunk);
    else text += chunk;
  }
  return text;
}

/**
 * An execution: argv as the API's `command` and `args` (no shell), output
 * pumped from the client's streams (text: the client decodes it as UTF-8),
 * stdin written through and closed with the attach's `stdin_eof`.
 */
async function startExecution(
  box: Box,
  argv: readonly string[],
  onOutput: (stream: OutputStream, chunk: Uint8Array) => void,
): Promise<RemoteCommand> {
  const execution = await box.exec(argv[0] as string, argv.slice(1), null, false, null, null, "/");
  const [stdin, stdout, stderr] = await Promise.all([execution.stdin(), execution.stdout(), execution.stderr()]);
  const pumps = Promise.all([
    drain(stdout, (text) => onOutput("stdout", Buffer.from(text))),
    drain(stderr, (text) => onOutput("stderr", Buffer.from(text))),
  ]);
  const done: Promise<RemoteEnd> = Promise.all([execution.wait(), pumps]).then(
    ([result]) => ({ type: "exited", exitCode: result.exitCode < 0 ? 137 : result.exitCode }),
    (err: unknown) => ({ type: "lost", message: messageOf(err) }),
  );
  return {
    write: (chunk) => stdin.write(Buffer.from(chunk)),
    closeStdin: () => stdin.close(),
    kill: () => execution.kill(),
    done,
  };
}
