/**
 * A Node client of the official Cloudflare Sandbox Bridge API
 * (`@cloudflare/sandbox/bridge`). Every call goes through `openapi-fetch`
 * typed by `schema.ts`, which openapi-typescript generated from the
 * document the package ships: a route, parameter or body the document does
 * not have does not compile. Bearer `SANDBOX_API_KEY` on every request.
 *
 * The exec stream is Server-Sent Events (`stdout`/`stderr` carry base64,
 * `exit` `{exit_code}`, `error` `{error, code}`), parsed by
 * `eventsource-parser`. The bridge has no stdin on exec and no kill of a
 * running exec: a caller ends its interest by aborting the stream.
 */
import { EventSourceParserStream } from "eventsource-parser/stream";
import createClient, { type Middleware } from "openapi-fetch";
import type { components, paths } from "./schema.ts";

export type BridgeErrorBody = components["schemas"]["ErrorResponse"];
export type ExecRequest = components["schemas"]["ExecRequest"];

export interface BridgeClientConfig {
  /** The bridge Worker's origin (its routes live under `/v1`). */
  url: string;
  /** `SANDBOX_API_KEY`, sent as a Bearer token. */
  apiKey: string;
  /** A fetch to use instead of the global one. */
  fetch?: typeof fetch;
}

/** A bridge answer other than success: its status and the `{error, code}` body when it sent one. */
export class BridgeError extends Error {
  constructor(
    readonly operation: string,
    readonly status: number | null,
    readonly code: string | null,
    message: string,
  ) {
    super(`${operation}: ${status === null ? "" : `${status} `}${message}`);
    this.name = "BridgeError";
  }
}

/** How an exec stream ended: the `exit` event, the `error` event, or a stream that broke before either. */
export type ExecEnd =
  | { type: "exit"; exitCode: number }
  | { type: "error"; code: string; message: string }
  | { type: "cut"; message: string };

export interface ExecOptions {
  signal: AbortSignal;
  /** The bridge's `Session-Id` header (shell state reused across execs). */
  sessionId?: string;
  onOutput(stream: "stdout" | "stderr", chunk: Uint8Array): void;
}

/**
 * The file route takes the path as slash-separated segments (`file/*`), while
 * the simple path style the generated client serializes `{path}` with escapes
 * every `/`. Each segment stays escaped (a literal `%` is `%25`), so only the
 * separators are restored.
 */
const fileSeparators: Middleware = {
  onRequest({ request, schemaPath }) {
    if (!schemaPath.endsWith("/file/{path}")) return undefined;
    const url = new URL(request.url);
    const marker = url.pathname.indexOf("/file/") + "/file/".length;
    url.pathname = url.pathname.slice(0, marker) + url.pathname.slice(marker).replaceAll("%2F", "/");
    return new Request(url, request);
  },
};

async function failure(operation: string, response: Response | undefined, error: unknown): Promise<BridgeError> {
  const body = error as Partial<BridgeErrorBody> | undefined;
  const message = typeof body?.error === "string" ? body.error : typeof error === "string" && error ? error : "request failed";
  return new BridgeError(operation, response?.status ?? null, typeof body?.code === "string" ? body.code : null, message);
}

const bytesOf = (buffer: ArrayBuffer) => new Uint8Array(buffer);

export type BridgeClient = ReturnType<typeof createBridgeClient>;

export function createBridgeClient(config: BridgeClientConfig) {
  if (!config.url) throw new Error("the bridge's URL is required");
  if (!config.apiKey) throw new Error("the bridge's SANDBOX_API_KEY is required");
  const client = createClient<paths>({
    baseUrl: config.url.replace(/\/+$/, ""),
    headers: { Authorization: `Bearer ${config.apiKey}` },
    ...(config.fetch ? { fetch: (request: Request) => (config.fetch as typeof fetch)(request) } : {}),
  });
  client.use(fileSeparators);
  const path = (id: string) => ({ path: { id } });

  return {
    /** `POST /v1/sandbox`: a fresh sandbox id (its container starts on first use). */
    async create(signal: AbortSignal): Promise<string> {
      const { data, error, response } = await client.POST("/v1/sandbox", { signal });
      if (data === undefined) throw await failure("create", response, error);
      return data.id;
    },

    /** `POST /v1/sandbox/{id}/exec`: runs argv, streaming its output; resolves with how the stream ended. */
    async exec(id: string, request: ExecRequest, options: ExecOptions): Promise<ExecEnd> {
      const { error, response } = await client.POST("/v1/sandbox/{id}/exec", {
        params: { ...path(id), header: options.sessionId === undefined ? {} : { "Session-Id": options.sessionId } },
        body: request,
        parseAs: "stream",
        signal: options.signal,
      });
      if (!response.ok || response.body === null) throw await failure("exec", response, error);
      return readExecStream(response.body, options.onOutput);
    },

    /** `GET /v1/sandbox/{id}/file/{path}` of an absolute path under /workspace; null when there is no such file. */
    async readFile(id: string, absolutePath: string, signal: AbortSignal): Promise<Uint8Array | null> {
      const { data, error, response } = await client.GET("/v1/sandbox/{id}/file/{path}", {
        params: { path: { id, path: absolutePath.replace(/^\/+/, "") } },
        parseAs: "arrayBuffer",
        signal,
      });
      if (response.status === 404) return null;
      if (data === undefined) throw await failure("read file", response, error);
      return bytesOf(data);
    },

    /** `PUT /v1/sandbox/{id}/file/{path}` of an absolute path under /workspace (parents are made). */
    async writeFile(id: string, absolutePath: string, content: Uint8Array, signal: AbortSignal): Promise<void> {
      const { data, error, response } = await client.PUT("/v1/sandbox/{id}/file/{path}", {
        params: { path: { id, path: absolutePath.replace(/^\/+/, "") } },
        body: content as unknown as string,
        bodySerializer: (body) => body as unknown as BodyInit,
        headers: { "Content-Type": "application/octet-stream" },
        signal,
      });
      if (data === undefined) throw await failure("write file", response, error);
    },

    /** `POST /v1/sandbox/{id}/persist`: a tar of /workspace (minus `excludes`, relative to it). */
    async persist(id: string, signal: AbortSignal, excludes: readonly string[] = []): Promise<Uint8Array> {
      const { data, error, response } = await client.POST("/v1/sandbox/{id}/persist", {
        params: { ...path(id), query: excludes.length > 0 ? { excludes: excludes.join(",") } : {} },
        parseAs: "arrayBuffer",
        signal,
      });
      if (data === undefined) throw await failure("persist", response, error);
      return bytesOf(data);
    },

    /** `POST /v1/sandbox/{id}/hydrate`: extracts a tar into /workspace. */
    async hydrate(id: string, tar: Uint8Array, signal: AbortSignal): Promise<void> {
      const { data, error, response } = await client.POST("/v1/sandbox/{id}/hydrate", {
        params: path(id),
        body: tar as unknown as string,
        bodySerializer: (body) => body as unknown as BodyInit,
        headers: { "Content-Type": "application/octet-stream" },
        signal,
      });
      if (data === undefined) throw await failure("hydrate", response, error);
    },

    /** `GET /v1/sandbox/{id}/running`. The bridge starts a container for an id that has none. */
    async running(id: string, signal: AbortSignal): Promise<boolean> {
      const { data, error, response } = await client.GET("/v1/sandbox/{id}/running", { params: path(id), signal });
      if (data === undefined) throw await failure("running", response, error);
      return data.running;
    },

    /** `GET /v1/pool/stats`: the warm pool's counts (how many ids hold a container), behind the same Bearer token. */
    async poolStats(signal: AbortSignal): Promise<components["schemas"]["PoolStats"]> {
      const { data, error, response } = await client.GET("/v1/pool/stats", { signal });
      if (data === undefined) throw await failure("pool stats", response, error);
      return data;
    },

    /** `DELETE /v1/sandbox/{id}`: destroys its container (204 whether or not it had one). */
    async destroy(id: string, signal: AbortSignal): Promise<void> {
      const { error, response } = await client.DELETE("/v1/sandbox/{id}", { params: path(id), signal, parseAs: "stream" });
      if (!response.ok) throw await failure("destroy", response, error);
      await response.body?.cancel();
    },
  };
}

/** Reads an exec SSE stream to its terminal event. */
export async function readExecStream(
  body: ReadableStream<Uint8Array>,
  onOutput: (stream: "stdout" | "stderr", chunk: Uint8Array) => void,
): Promise<ExecEnd> {
  const text = body.pipeThrough(new TextDecoderStream() as unknown as ReadableWritablePair<string, Uint8Array>);
  const events = text.pipeThrough(new EventSourceParserStream());
  try {
    for await (const event of events) {
      if (event.event === "stdout" || event.event === "stderr") {
        onOutput(event.event, Buffer.from(event.data, "base64"));
      } else if (event.event === "exit") {
        const exitCode = (JSON.parse(event.data) as { exit_code?: unknown }).exit_code;
        return typeof exitCode === "number"
          ? { type: "exit", exitCode }
          : { type: "cut", message: `an exit event without exit_code: ${event.data}` };
      } else if (event.event === "error") {
        const body = JSON.parse(event.data) as Partial<BridgeErrorBody>;
        return { type: "error", code: String(body.code ?? "exec_error"), message: String(body.error ?? event.data) };
      }
    }
    return { type: "cut", message: "the exec stream ended without an exit event" };
  } catch (err) {
    return { type: "cut", message: `the exec stream broke: ${err instanceof Error ? err.message : String(err)}` };
  }
}
