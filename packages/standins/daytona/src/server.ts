/**
 * The Daytona stand-in: the REST API under `/api` and the toolbox under
 * `/toolbox` on one local port. Point the SDK (and OpenMA's daytona driver)
 * at it with the platform's own variables: `DAYTONA_API_URL=<url>/api`,
 * `DAYTONA_API_KEY`, and `DAYTONA_USE_DEPRECATED_POLLING=true` (the event
 * socket is not served). Every sandbox is a real local container.
 */
import {
  type CloudStandIn,
  FaultQueue,
  Hangs,
  LocalBoxes,
  mountAdmin,
  type RecordedRequest,
  recorder,
  type StandInEnv,
  type StandInOptions,
  serveStandIn,
  standInHandle,
} from "@openma/standin-kit";
import { realScheduler, type Scheduler } from "@openma/time";
import { Hono } from "hono";
import { type DaytonaDeps, mountControlPlane } from "./control.ts";
import { SandboxTable } from "./sandboxes.ts";
import { logsRoute, mountToolbox } from "./toolbox.ts";

export const DEFAULT_DAYTONA_API_KEY = "dtn_standin_0123456789abcdef0123456789abcdef";

export interface DaytonaStandInOptions extends StandInOptions {
  /** Drives auto-stop (`autoStopInterval`); tests inject a ManualScheduler. */
  scheduler?: Scheduler;
}

export interface DaytonaStandIn extends CloudStandIn {
  readonly table: SandboxTable;
}

export async function startDaytonaStandIn(options: DaytonaStandInOptions = {}): Promise<DaytonaStandIn> {
  const apiKey = options.apiKey ?? DEFAULT_DAYTONA_API_KEY;
  const faults = new FaultQueue();
  const hangs = new Hangs();
  const requests: RecordedRequest[] = [];
  const boxes = new LocalBoxes({ vendor: "daytona", image: options.image, networkMode: options.networkMode });
  const table = new SandboxTable(boxes, options.scheduler ?? realScheduler);
  let url = "";
  const deps: DaytonaDeps = { table, faults, hangs, apiKey, toolboxBase: () => `${url}/toolbox` };
  const api = new Hono<StandInEnv>();
  mountControlPlane(api, deps);
  const app = new Hono<StandInEnv>();
  app.use("*", recorder(requests));
  app.route("/api", api);
  mountToolbox(app, deps);
  mountAdmin(app, {
    token: apiKey,
    faults,
    state: async () => ({
      live: table.all().length,
      containers: await boxes.containers(),
      sandboxes: table.all().map((s) => ({ id: s.id, name: s.name, state: table.state(s) })),
    }),
  });
  const record = (request: import("node:http").IncomingMessage, authorized: boolean) => {
    const target = new URL(request.url ?? "/", "http://standin");
    requests.push({
      method: "GET",
      path: target.pathname,
      query: target.search,
      authHeader: request.headers.authorization === undefined ? null : "authorization",
      authorized,
      headerNames: Object.keys(request.headers),
      userAgent: request.headers["user-agent"] ?? null,
    });
  };
  const server = await serveStandIn({ app, port: options.port, host: options.host, upgrades: [logsRoute(deps, record)] });
  url = server.url;
  return standInHandle(
    {
      vendor: "daytona",
      url: server.url,
      env: { DAYTONA_API_URL: `${server.url}/api`, DAYTONA_API_KEY: apiKey, DAYTONA_USE_DEPRECATED_POLLING: "true" },
      faults,
      requests,
      boxes,
      live: () => table.all().length,
      find: (id) => table.find(id),
      running: (held) => held.box.state === "running",
      hangs,
      servers: [server],
      stop() {
        table.close();
      },
    },
    { table },
  );
}
