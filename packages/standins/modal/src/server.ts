/**
 * The Modal stand-in: one gRPC server in plain-text HTTP/2 serving
 * `modal.client.ModalClient` and the per-task `TaskCommandRouter` on the
 * SDK's own service definitions, plus a small HTTP admin surface
 * (`/_standin/state`, `/_standin/faults`, as every stand-in has).
 *
 * Point the SDK (and OpenMA's modal driver) at it with Modal's own
 * variables: `MODAL_SERVER_URL=http://127.0.0.1:<port>` (the SDK speaks h2c
 * to an `http://` server URL), `MODAL_TOKEN_ID` and `MODAL_TOKEN_SECRET`.
 * The command router's address is handed out as `https://127.0.0.1:<port>`
 * (the SDK insists on https there) and, because the server URL is local,
 * the SDK dials it without TLS.
 *
 * Credentials: every ModalClient call must carry the token pair; every call
 * but AuthTokenGet also an auth token it issued; every router call the
 * sandbox's router JWT as a bearer token. Every call is recorded as it
 * looked on the wire (the method path as the request path).
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  type CloudStandIn,
  FaultQueue,
  Hangs,
  LocalBoxes,
  mountAdmin,
  type RecordedRequest,
  type StandInEnv,
  type StandInOptions,
  serveStandIn,
  standInHandle,
} from "@openma/standin-kit";
import { realScheduler, type Scheduler } from "@openma/time";
import { Hono } from "hono";
import { type CallContext, createServer, ServerError, type ServerMiddleware, Status } from "nice-grpc";
import { modalDefinitions } from "./definitions.ts";
import { modalClientService, type ServiceDeps, taskCommandRouterService } from "./services.ts";
import { ModalTable } from "./table.ts";

export const DEFAULT_MODAL_TOKEN_ID = "ak-standin0123456789abcdef";
export const DEFAULT_MODAL_TOKEN_SECRET = "as-standin0123456789abcdef0123456789";

export interface ModalStandInOptions extends StandInOptions {
  /** The token id it accepts (the secret is `apiKey`). */
  tokenId?: string;
  /** Drives sandbox timeouts; tests inject a ManualScheduler. */
  scheduler?: Scheduler;
}

export interface ModalStandIn extends CloudStandIn {
  readonly table: ModalTable;
  /** The gRPC server's URL (`MODAL_SERVER_URL`); `url` is the admin surface. */
  readonly grpcUrl: string;
}

const ROUTER_PREFIX = "/modal.task_command_router.TaskCommandRouter/";

export async function startModalStandIn(options: ModalStandInOptions = {}): Promise<ModalStandIn> {
  const defs = modalDefinitions();
  const tokenId = options.tokenId ?? DEFAULT_MODAL_TOKEN_ID;
  const tokenSecret = options.apiKey ?? DEFAULT_MODAL_TOKEN_SECRET;
  const host = options.host ?? "127.0.0.1";
  const faults = new FaultQueue();
  const hangs = new Hangs();
  const requests: RecordedRequest[] = [];
  const root = await mkdtemp(join(tmpdir(), "openma-standin-modal-"));
  const boxes = new LocalBoxes({ vendor: "modal", image: options.image, networkMode: options.networkMode });
  const table = new ModalTable(boxes, options.scheduler ?? realScheduler, root);
  const tokens = new Set<string>();

  const authorize = (path: string, context: CallContext): { header: string | null; ok: boolean } => {
    const md = context.metadata;
    if (path.startsWith(ROUTER_PREFIX)) {
      const bearer = md.get("authorization");
      if (bearer === undefined) return { header: null, ok: false };
      const jwt = String(bearer).replace(/^Bearer /, "");
      return { header: "authorization", ok: table.running().some((s) => s.routerJwt === jwt) };
    }
    const id = md.get("x-modal-token-id");
    if (id === undefined) return { header: null, ok: false };
    const pair = id === tokenId && md.get("x-modal-token-secret") === tokenSecret;
    const token = md.get("x-modal-auth-token");
    const issued = path.endsWith("/AuthTokenGet") || (token !== undefined && tokens.has(String(token)));
    return { header: "x-modal-token-id", ok: pair && issued };
  };

  const record: ServerMiddleware = async function* record(call, context) {
    const verdict = authorize(call.method.path, context);
    requests.push({
      method: "POST",
      path: call.method.path,
      query: "",
      authHeader: verdict.header,
      authorized: verdict.ok,
      headerNames: [...context.metadata].map(([name]) => name),
      userAgent: context.metadata.get("user-agent")?.toString() ?? null,
    });
    if (requests.length > 5000) requests.splice(0, requests.length - 5000);
    if (!verdict.ok) throw new ServerError(Status.UNAUTHENTICATED, "invalid credentials");
    return yield* call.next(call.request, context);
  };

  // The router's address names the port, known only once listening: the services read it per call.
  const deps: ServiceDeps = { table, faults, hangs, defs, routerUrl: "", tokens };
  const grpc = createServer({
    "grpc.max_receive_message_length": 100 * 1024 * 1024,
    "grpc.max_send_message_length": 100 * 1024 * 1024,
  }).use(record);
  // biome-ignore lint/suspicious/noExplicitAny: the definitions come from the SDK's bundle at run time.
  grpc.add(defs.modalClient as any, modalClientService(deps) as any);
  // biome-ignore lint/suspicious/noExplicitAny: as above.
  grpc.add(defs.taskCommandRouter as any, taskCommandRouterService(deps) as any);
  const port = await grpc.listen(`${host}:${options.port ?? 0}`);
  const grpcUrl = `http://${host}:${port}`;
  deps.routerUrl = `https://${host}:${port}`;

  const app = new Hono<StandInEnv>();
  mountAdmin(app, {
    token: tokenSecret,
    faults,
    state: async () => ({
      live: table.running().length,
      containers: await boxes.containers(),
      sandboxes: table.running().map((s) => ({ sandboxId: s.sandboxId, name: s.name })),
      volumes: [...table.volumes.values()].map((v) => ({ volumeId: v.volumeId, name: v.name, version: v.version })),
    }),
  });
  const admin = await serveStandIn({ app, host });
  return standInHandle(
    {
      vendor: "modal",
      url: admin.url,
      env: { MODAL_SERVER_URL: grpcUrl, MODAL_TOKEN_ID: tokenId, MODAL_TOKEN_SECRET: tokenSecret },
      faults,
      requests,
      boxes,
      live: () => table.running().length,
      // A sandbox that has finished is gone to the platform even while its record is kept for `SandboxWait`.
      find: (id) => {
        const held = table.get(id);
        return held?.result === null ? held : undefined;
      },
      running: () => true,
      hangs,
      servers: [admin],
      stop() {
        table.close();
        grpc.forceShutdown();
      },
      afterBoxes: () => rm(root, { recursive: true, force: true }),
    },
    { table, grpcUrl },
  );
}
