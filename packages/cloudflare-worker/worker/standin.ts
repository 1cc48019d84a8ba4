/**
 * Test entry, never deployed: the production Worker (worker/index.ts,
 * unchanged) whose Durable Object gets a stand-in for workerd's
 * `ctx.container`, because no real container runs offline (ADR 0019).
 *
 * The stand-in `Container` starts and destroys the container through the
 * Node stand-in (CONTAINER_STANDIN_URL), proxies `getTcpPort(port).fetch`
 * to the container API it serves, and records the fetchers the Sandbox SDK
 * registers with `interceptAllOutboundHttp` / `interceptOutboundHttp(s)`.
 * The stand-in's network hands each request the container sends to
 * `/__standin/outbound`, which routes it to the registered fetcher exactly
 * as the platform would: the SDK's ContainerProxy, then `outbound`.
 */
import { STANDIN_CONTAINER_HEADER, STANDIN_OUTBOUND_PATH, STANDIN_URL_HEADER } from "../src/standin/wire.ts";
import production, { ContainerProxy, type Env, OpenmaSandbox as ProductionSandbox, WarmPool } from "./index.ts";

export { ContainerProxy, WarmPool };

interface StandinEnv extends Env {
  CONTAINER_STANDIN_URL: string;
}

class StandinContainer {
  running = false;
  #ready: Promise<void> = Promise.resolve();
  #exit: { promise: Promise<void>; resolve(): void } = exitSignal();
  #all: Fetcher | null = null;
  readonly #http = new Map<string, Fetcher>();
  readonly #https = new Map<string, Fetcher>();

  constructor(
    readonly base: string,
    readonly id: string,
  ) {}

  get images(): Record<string, string> {
    return {};
  }

  start(options?: { env?: Record<string, string>; enableInternet?: boolean }): void {
    this.running = true;
    this.#exit = exitSignal();
    this.#ready = fetch(`${this.base}/containers/${this.id}/start`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ env: options?.env ?? {}, enableInternet: options?.enableInternet ?? false }),
    }).then(async (res) => {
      if (!res.ok) throw new Error(`stand-in container start: ${res.status} ${await res.text()}`);
    });
  }

  monitor(): Promise<void> {
    return this.#exit.promise;
  }

  async destroy(): Promise<void> {
    await fetch(`${this.base}/containers/${this.id}`, { method: "DELETE" });
    this.running = false;
    this.#exit.resolve();
  }

  signal(_signo: number): void {
    void this.destroy();
  }

  getTcpPort(port: number): Fetcher {
    const fetchPort = async (input: RequestInfo | URL, init?: RequestInit): Promise<Response> => {
      await this.#ready;
      const request = new Request(input, init);
      const url = new URL(request.url);
      return fetch(new Request(`${this.base}/containers/${this.id}/port/${port}${url.pathname}${url.search}`, request));
    };
    return { fetch: fetchPort } as unknown as Fetcher;
  }

  async setInactivityTimeout(): Promise<void> {}

  async interceptOutboundHttp(addr: string, binding: Fetcher): Promise<void> {
    this.#http.set(addr, binding);
  }

  async interceptAllOutboundHttp(binding: Fetcher): Promise<void> {
    this.#all = binding;
  }

  async interceptOutboundHttps(addr: string, binding: Fetcher): Promise<void> {
    this.#https.set(addr, binding);
  }

  /** The fetcher the platform would hand this request to; null: the internet is off and nothing intercepts it. */
  route(url: URL): Fetcher | null {
    if (url.protocol === "https:") return this.#https.get(url.hostname) ?? this.#https.get("*") ?? null;
    return this.#http.get(url.hostname) ?? this.#all;
  }
}

function exitSignal(): { promise: Promise<void>; resolve(): void } {
  let resolve = () => {};
  const promise = new Promise<void>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** Same class name as production: the SDK keys its outbound handler registry by it. */
export class OpenmaSandbox extends ProductionSandbox {
  readonly #standin: StandinContainer;

  constructor(ctx: DurableObjectState<object>, env: StandinEnv) {
    const standin = new StandinContainer(env.CONTAINER_STANDIN_URL, ctx.id.toString());
    Object.defineProperty(ctx, "container", { value: standin, configurable: true });
    super(ctx, env);
    this.#standin = standin;
  }

  /** One request the container sent, as the platform's network would deliver it. */
  async standinOutbound(request: Request): Promise<Response> {
    const fetcher = this.#standin.route(new URL(request.url));
    if (fetcher === null) return new Response("no route: the container's internet is off and nothing intercepts this\n", { status: 502 });
    return fetcher.fetch(request);
  }
}

export default {
  ...production,
  async fetch(request: Request, env: StandinEnv, ctx: ExecutionContext): Promise<Response> {
    if (new URL(request.url).pathname === STANDIN_OUTBOUND_PATH) {
      const container = request.headers.get(STANDIN_CONTAINER_HEADER) ?? "";
      const url = request.headers.get(STANDIN_URL_HEADER) ?? "";
      const headers = new Headers(request.headers);
      headers.delete(STANDIN_CONTAINER_HEADER);
      headers.delete(STANDIN_URL_HEADER);
      const original = new Request(url, { method: request.method, headers, body: request.body });
      const stub = env.Sandbox.get(env.Sandbox.idFromString(container)) as unknown as OpenmaSandbox;
      return stub.standinOutbound(original);
    }
    return (production.fetch as unknown as ExportedHandlerFetchHandler<StandinEnv>)(request as never, env, ctx);
  },
};
