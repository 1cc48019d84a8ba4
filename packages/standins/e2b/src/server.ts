/**
 * The E2B stand-in: the control plane and envd on one local port. Point the
 * SDK (and OpenMA's e2b driver) at it with the platform's own variables:
 * `E2B_API_URL` and `E2B_SANDBOX_URL` both set to its URL, `E2B_API_KEY` to
 * its key. Every sandbox is a real local container.
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
import { mountControlPlane } from "./control.ts";
import { mountEnvd } from "./envd.ts";
import { SandboxTable } from "./sandboxes.ts";

export const DEFAULT_E2B_API_KEY = "e2b_standin_0123456789abcdef0123456789abcdef";

export interface E2BStandInOptions extends StandInOptions {
  /** Drives sandbox timeouts (`endAt`); tests inject a ManualScheduler. */
  scheduler?: Scheduler;
}

export interface E2BStandIn extends CloudStandIn {
  readonly table: SandboxTable;
}

export async function startE2BStandIn(options: E2BStandInOptions = {}): Promise<E2BStandIn> {
  const apiKey = options.apiKey ?? DEFAULT_E2B_API_KEY;
  const faults = new FaultQueue();
  const hangs = new Hangs();
  const requests: RecordedRequest[] = [];
  const boxes = new LocalBoxes({ vendor: "e2b", image: options.image, networkMode: options.networkMode });
  const table = new SandboxTable(boxes, options.scheduler ?? realScheduler);
  const deps = { table, faults, hangs, apiKey };
  const app = new Hono<StandInEnv>();
  app.use("*", recorder(requests));
  mountControlPlane(app, deps);
  mountEnvd(app, deps);
  mountAdmin(app, {
    token: apiKey,
    faults,
    state: async () => ({
      live: table.all().length,
      containers: await boxes.containers(),
      sandboxes: table.all().map((s) => ({ sandboxID: s.sandboxID, state: table.state(s) })),
    }),
  });
  const server = await serveStandIn({ app, port: options.port, host: options.host });
  return standInHandle(
    {
      vendor: "e2b",
      url: server.url,
      env: { E2B_API_URL: server.url, E2B_SANDBOX_URL: server.url, E2B_API_KEY: apiKey },
      faults,
      requests,
      boxes,
      live: () => table.all().length,
      find: (id) => table.get(id),
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
