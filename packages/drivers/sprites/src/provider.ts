/**
 * Fly Sprites through `@fly/sprites` 0.1: every wire call is the SDK's.
 * A Sprite is addressed by its name, so the runtime id is the name. Sprites
 * sleep on their own when idle (warm: processes frozen; cold: processes
 * gone, the ext4 filesystem kept) and wake on the next request, so
 * `suspend` and `resume` ask nothing of the platform; ownership lives in the
 * Sprite's labels (`key=value` strings).
 */

import { APIError, FilesystemError, type Sprite, type SpriteCommand, SpritesClient } from "@fly/sprites";
import type { OutputStream } from "@openma/contract";
import {
  type CloudProvider,
  labelList,
  labelMap,
  type ProviderFailure,
  type ProviderRuntime,
  type RemoteCommand,
  type RemoteEnd,
  type RemoteSandboxApi,
} from "@openma/driver-kit/remote";

export interface SpritesConfig {
  /** `SPRITES_TOKEN` (or the CLI's `SPRITE_TOKEN`). */
  token: string;
  /** `SPRITES_API_URL`; the SDK's default is https://api.sprites.dev. */
  apiUrl?: string;
  /** Runtime name prefix, listed by (default `openma-`). */
  listPrefix?: string;
}

interface SpriteInfo {
  name: string;
  status?: string;
  labels?: string[];
  createdAt?: Date;
}

function runtimeOf(sprite: SpriteInfo): ProviderRuntime {
  return {
    id: sprite.name,
    name: sprite.name,
    labels: labelMap(sprite.labels),
    // warm and cold both wake on the next request.
    state: sprite.status === "running" ? "running" : "sleeping",
    createdAt: sprite.createdAt ? sprite.createdAt.toISOString() : null,
  };
}

export class SpritesProvider implements CloudProvider {
  readonly name = "sprites";
  readonly stdinEof = true;
  readonly #client: SpritesClient;
  readonly #prefix: string;

  constructor(config: SpritesConfig) {
    if (!config.token) throw new Error("sprites: a token is required (SPRITES_TOKEN)");
    this.#client = new SpritesClient(config.token, config.apiUrl ? { baseURL: config.apiUrl } : {});
    this.#prefix = config.listPrefix ?? "openma-";
  }

  async find(input: { name: string }): Promise<ProviderRuntime | null> {
    return this.get({ id: input.name });
  }

  async create(input: { name: string; labels: Readonly<Record<string, string>> }): Promise<ProviderRuntime> {
    return runtimeOf(await this.#client.createSprite(input.name, { labels: labelList(input.labels) }));
  }

  async get(input: { id: string }): Promise<ProviderRuntime | null> {
    try {
      return runtimeOf(await this.#client.getSprite(input.id));
    } catch (err) {
      if (this.describe(err).notFound) return null;
      throw err;
    }
  }

  /** By name prefix; a listing that leaves labels out is completed with one get per Sprite. */
  async list(input: { labels: Readonly<Record<string, string>> }): Promise<ProviderRuntime[]> {
    const out: ProviderRuntime[] = [];
    for (const listed of await this.#client.listAllSprites(this.#prefix)) {
      const runtime = listed.labels.length > 0 ? runtimeOf(listed) : await this.get({ id: listed.name });
      if (runtime && Object.entries(input.labels).every(([k, v]) => runtime.labels[k] === v)) out.push(runtime);
    }
    return out;
  }

  /** A Sprite wakes on the next request. */
  async resume(): Promise<void> {}

  /** A Sprite sleeps on its own once idle; there is no pause call to make. */
  async suspend(): Promise<void> {}

  async destroy(input: { id: string }): Promise<"destroyed" | "not_found"> {
    try {
      await this.#client.deleteSprite(input.id);
      return "destroyed";
    } catch (err) {
      if (this.describe(err).notFound) return "not_found";
      throw err;
    }
  }

  /** No provider lease: an idle Sprite sleeping is what it is for. */
  async renew(): Promise<void> {}

  async api(input: { id: string }): Promise<RemoteSandboxApi> {
    return spriteApi(this.#client.sprite(input.id));
  }

  describe(err: unknown): ProviderFailure {
    const message = err instanceof Error ? err.message : String(err);
    if (err instanceof APIError) {
      const status = err.statusCode ?? 0;
      return {
        retryable: status >= 500 || status === 429,
        notFound: status === 404,
        conflict: status === 409,
        message: `${status} ${message}`,
      };
    }
    if (err instanceof FilesystemError)
      return { retryable: err.code === "EIO" || err.code === "UNKNOWN", notFound: err.code === "ENOENT", conflict: false, message };
    // "Network error: ...", a WebSocket that did not open, a timed-out or aborted call: the platform may answer later.
    return { retryable: true, notFound: false, conflict: false, message };
  }

  async close(): Promise<void> {}
}

function spriteApi(sprite: Sprite): RemoteSandboxApi {
  const fs = sprite.filesystem("/");
  return {
    stdinEof: true,
    start: ({ argv, onOutput, signal }) => startCommand(sprite, argv, onOutput, signal),
    async readFile(path) {
      try {
        return await fs.readFile(path, null);
      } catch (err) {
        if (err instanceof FilesystemError && err.code === "ENOENT") return null;
        throw err;
      }
    },
    async writeFile(path, content) {
      await fs.writeFile(path, Buffer.from(content));
    },
  };
}

/** Opens the exec WebSocket; resolves once it is open, rejects when it is refused or `signal` aborts first. */
function startCommand(
  sprite: Sprite,
  argv: readonly string[],
  onOutput: (stream: OutputStream, chunk: Uint8Array) => void,
  signal: AbortSignal,
): Promise<RemoteCommand> {
  const [file, ...args] = argv as [string, ...string[]];
  const cmd: SpriteCommand = sprite.spawn(file, args, {});
  cmd.stdout.on("data", (chunk: Buffer) => onOutput("stdout", chunk));
  cmd.stderr.on("data", (chunk: Buffer) => onOutput("stderr", chunk));
  let failure: Error | null = null;
  const done = new Promise<RemoteEnd>((resolve) => {
    cmd.once("exit", (code: number) =>
      resolve(
        code >= 0
          ? { type: "exited", exitCode: code }
          : { type: "lost", message: failure?.message ?? "the exec stream closed without an exit code" },
      ),
    );
  });
  cmd.on("error", (err: Error) => {
    failure ??= err;
  });
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      cmd.kill("SIGKILL");
      reject(new Error("the exec start was aborted"));
    };
    signal.addEventListener("abort", onAbort, { once: true });
    cmd.once("spawn", () => {
      signal.removeEventListener("abort", onAbort);
      resolve({
        write: (chunk) =>
          new Promise<void>((ok, fail) => {
            if (failure) return fail(failure);
            cmd.stdin.write(Buffer.from(chunk), (err) => (err ? fail(err) : ok()));
          }),
        closeStdin: async () => {
          cmd.stdin.end();
        },
        kill: async () => cmd.kill("SIGKILL"),
        done,
      });
    });
    cmd.once("error", (err: Error) => {
      signal.removeEventListener("abort", onAbort);
      reject(err);
    });
  });
}
