/**
 * Our Worker running in workerd (miniflare) for tests, with the container
 * stand-in as its containers (ADR 0019): bundled the way wrangler bundles
 * it, from `worker/standin.ts` (the production module plus a stand-in
 * `ctx.container`). One instance per test file.
 *
 * The Worker's own `fetch` reaches the container stand-in (the SDK's
 * container API) and, for everything else, `internet`: what the test plays
 * as the world outside (its upstreams).
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { build } from "esbuild";
import { Miniflare } from "miniflare";
import { CloudflareContainerStandIn } from "./container.ts";

const PACKAGE = join(import.meta.dirname, "../..");

export interface WorkerInWorkerd {
  /** The Worker's origin (the bridge routes under /v1, the egress route under /openma/v1). */
  readonly url: string;
  readonly apiKey: string;
  /** The containers' half: real local boxes whose only way out is the Worker. */
  readonly containers: CloudflareContainerStandIn;
  close(): Promise<void>;
}

export async function startWorkerInWorkerd(options: { internet(request: Request): Promise<Response> }): Promise<WorkerInWorkerd> {
  const apiKey = `key-${crypto.randomUUID()}`;
  const outDir = await mkdtemp(join(tmpdir(), "openma-cf-worker-"));
  let workerUrl = "";
  let containers: CloudflareContainerStandIn | undefined;
  let mf: Miniflare | undefined;
  const close = async () => {
    await mf?.dispose();
    await containers?.close();
    await rm(outDir, { recursive: true, force: true });
  };
  try {
    await build({
      entryPoints: [join(PACKAGE, "worker/standin.ts")],
      outfile: join(outDir, "index.js"),
      bundle: true,
      format: "esm",
      platform: "neutral",
      target: "es2022",
      conditions: ["workerd", "worker", "browser"],
      mainFields: ["module", "main"],
      external: ["cloudflare:*", "node:*"],
      // As wrangler does: the SDK keys its outbound handler registry by class name.
      keepNames: true,
      logLevel: "silent",
    });
    const standin = new CloudflareContainerStandIn({
      dispatch: (request) => {
        const url = new URL(request.url);
        return fetch(`${workerUrl}${url.pathname}`, {
          method: request.method,
          headers: request.headers,
          body: request.body,
          duplex: "half",
        } as RequestInit);
      },
    });
    containers = standin;
    await standin.start();
    const outbound = async (request: Request): Promise<Response> => {
      if (new URL(request.url).origin !== standin.url) return options.internet(request);
      const body = request.method === "GET" || request.method === "HEAD" ? undefined : Buffer.from(await request.arrayBuffer());
      const res = await fetch(request.url, { method: request.method, headers: request.headers, body });
      return new Response(res.body, { status: res.status, headers: res.headers });
    };
    mf = new Miniflare({
      modules: true,
      scriptPath: join(outDir, "index.js"),
      modulesRoot: outDir,
      compatibilityDate: "2026-07-30",
      compatibilityFlags: ["nodejs_compat"],
      durableObjects: {
        Sandbox: { className: "OpenmaSandbox", useSQLite: true },
        WarmPool: { className: "WarmPool", useSQLite: true },
      },
      bindings: { SANDBOX_API_KEY: apiKey, CONTAINER_STANDIN_URL: standin.url, SANDBOX_LOG_LEVEL: "error" },
      outboundService: outbound as never,
    });
    workerUrl = (await mf.ready).origin;
    return { url: workerUrl, apiKey, containers: standin, close };
  } catch (err) {
    await close();
    throw err;
  }
}
