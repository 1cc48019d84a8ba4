/**
 * Reaching a Superserve-compatible data plane without editing the SDK
 * (ADR 0017). `@superserve/sdk` takes the control plane's URL as an option
 * but derives the data plane's host from it (`sandbox.superserve.ai` for
 * any URL it does not know) and calls it with the global `fetch` and the
 * global `WebSocket`, both of which Node builds on undici's global
 * dispatcher. So, only when OpenMA is told to (`OPENMA_SUPERSERVE_DATA_PLANE_URL`),
 * the global dispatcher is wrapped: requests for the derived data-plane
 * names (the host itself and its `boxd-<id>.` subdomains) are connected to
 * the configured address with TLS for the original name, verified against
 * the configured CA (or the process's trust store, which includes
 * `NODE_EXTRA_CA_CERTS`); every other request goes to the dispatcher that
 * was there before, untouched. The host name the SDK put in the URL, its
 * `Host` header and the certificate check are all unchanged: only the
 * address the socket connects to differs.
 *
 * Process-wide by nature (the SDK has no per-client transport): one route
 * per process, the latest configuration wins.
 */
import { Agent, buildConnector, Dispatcher, getGlobalDispatcher, setGlobalDispatcher } from "undici";

export interface DataPlaneRedirect {
  /** `https://host:port` of the data plane to use instead of the derived host. */
  url: string;
  /** PEM of the CA its certificate chains to; the process's trust store when absent. */
  caPem?: string;
}

/** Whether `hostname` is the data-plane host or one of its per-sandbox names. */
export function isDataPlaneName(hostname: string, sandboxHost: string): boolean {
  const name = hostname.toLowerCase();
  const host = sandboxHost.toLowerCase();
  return name === host || name.endsWith(`.${host}`);
}

class DataPlaneRoute extends Dispatcher {
  constructor(
    readonly sandboxHost: string,
    readonly agent: Agent,
    readonly fallback: Dispatcher,
  ) {
    super();
  }

  override dispatch(options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    const origin = options.origin === undefined ? null : new URL(String(options.origin));
    const routed = origin !== null && isDataPlaneName(origin.hostname, this.sandboxHost);
    return (routed ? this.agent : this.fallback).dispatch(options, handler);
  }

  override async close(): Promise<void> {
    await this.agent.close();
  }

  override async destroy(): Promise<void> {
    await this.agent.destroy();
  }
}

/** Sends the SDK's data-plane requests for `sandboxHost` to `redirect` (see the module comment). */
export function routeDataPlane(sandboxHost: string, redirect: DataPlaneRedirect): void {
  const target = new URL(redirect.url);
  if (target.protocol !== "https:") throw new Error("OPENMA_SUPERSERVE_DATA_PLANE_URL must be an https:// URL (the SDK speaks TLS to it)");
  const tls = buildConnector(redirect.caPem ? { ca: [redirect.caPem] } : {});
  const agent = new Agent({
    connect: (options, callback) =>
      tls(
        {
          ...options,
          hostname: target.hostname,
          host: target.host,
          port: target.port || "443",
          protocol: "https:",
          // SNI and the certificate check stay on the name the SDK addressed.
          servername: options.hostname,
        },
        callback,
      ),
  });
  const current = getGlobalDispatcher();
  const fallback = current instanceof DataPlaneRoute ? current.fallback : current;
  if (current instanceof DataPlaneRoute) void current.close().catch(() => {});
  setGlobalDispatcher(new DataPlaneRoute(sandboxHost, agent, fallback));
}
