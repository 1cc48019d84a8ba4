/**
 * The Superserve stand-in. Control plane: REST/JSON under the base URL the
 * SDK takes from `SUPERSERVE_BASE_URL`, every request with `X-API-Key`,
 * errors as `{error: {code, message}}`:
 *
 * - `POST /sandboxes` (201, the sandbox and its `access_token`), `GET
 *   /sandboxes` (filtered by `metadata.<key>=<value>` query pairs), `GET`,
 *   `PATCH` and `DELETE /sandboxes/{id}`;
 * - `POST /sandboxes/{id}/pause` (the box is frozen: processes and memory
 *   kept), `/resume` (a paused sandbox only) and `/activate` (resumes a
 *   paused one, and answers an active one too): both issue a new access
 *   token and retire the old one; a resume already in flight is a 409.
 *
 * Data plane: a second listener, HTTPS only, with a certificate for the
 * data-plane names issued by a CA made for this stand-in alone (see
 * data-plane.ts). The SDK derives its data-plane host from the control
 * plane's URL (`sandbox.superserve.ai` for any custom one) and never takes
 * it as an option, so OpenMA's driver routes just those names here when
 * `OPENMA_SUPERSERVE_DATA_PLANE_URL` and `OPENMA_SUPERSERVE_DATA_PLANE_CA`
 * say so (ADR 0017); the stand-in's `env` carries both.
 *
 * Simplifications, said plainly: templates, snapshots, secrets, network
 * rules and logs, preview URLs and the auto-pause timeout are not served;
 * names need not be unique; a finished command's process group ends with it
 * (only a `setsid` child outlives it), and a command whose exec socket
 * drops is killed.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createSecureContext } from "node:tls";
import { SandboxCa } from "@openma/egress/ca";
import {
  type CloudStandIn,
  FaultQueue,
  Hangs,
  KeyedLocks,
  LocalBoxes,
  mountAdmin,
  noteAuth,
  type RecordedRequest,
  recorder,
  recordUpgrade,
  type StandInEnv,
  type StandInOptions,
  serveStandIn,
  standInHandle,
} from "@openma/standin-kit";
import { Hono, type MiddlewareHandler } from "hono";
import { z } from "zod";
import { dataPlaneApp, execConnectRoute } from "./data-plane.ts";
import { apiError, type Ctx, playFault } from "./errors.ts";
import { type SandboxRecord, SandboxTable, sandboxJson } from "./sandboxes.ts";

export const DEFAULT_SUPERSERVE_API_KEY = "ss_standin_0123456789abcdef0123456789abcdef";
/** What the SDK derives for any control plane it does not know. */
export const STANDIN_SANDBOX_HOST = "sandbox.superserve.ai";

export interface SuperserveStandIn extends CloudStandIn {
  readonly table: SandboxTable;
  /** The HTTPS data plane's own address (what `OPENMA_SUPERSERVE_DATA_PLANE_URL` names). */
  readonly dataPlaneUrl: string;
  /** PEM of the CA that signed the data plane's certificates. */
  readonly caPem: string;
}

const CreateBody = z.object({
  name: z.string().min(1).max(128),
  metadata: z.record(z.string(), z.string()).optional(),
  env_vars: z.record(z.string(), z.string()).optional(),
  timeout_seconds: z.number().int().positive().optional(),
  auto_delete_seconds: z.number().int().nonnegative().optional(),
  from_template: z.string().optional(),
  from_snapshot: z.string().optional(),
});

const UpdateBody = z.object({
  metadata: z.record(z.string(), z.string()).optional(),
  timeout_seconds: z.number().int().positive().nullable().optional(),
});

export async function startSuperserveStandIn(options: StandInOptions = {}): Promise<SuperserveStandIn> {
  const apiKey = options.apiKey ?? DEFAULT_SUPERSERVE_API_KEY;
  const faults = new FaultQueue();
  const hangs = new Hangs();
  const locks = new KeyedLocks();
  const requests: RecordedRequest[] = [];
  const boxes = new LocalBoxes({ vendor: "superserve", image: options.image, networkMode: options.networkMode });
  const table = new SandboxTable(boxes);

  const app = new Hono<StandInEnv>();
  app.use("*", recorder(requests));
  const guard: MiddlewareHandler<StandInEnv> = async (c, next) => {
    const key = c.req.header("x-api-key");
    noteAuth(c, key === undefined ? null : "x-api-key", key === apiKey);
    if (key !== apiKey) return apiError(c, 401, "unauthorized", "Missing or invalid API key");
    await next();
  };
  app.use("/sandboxes", guard);
  app.use("/sandboxes/*", guard);

  const fault = (c: Ctx, op: Parameters<FaultQueue["take"]>[0], record?: SandboxRecord) =>
    playFault(c, faults.take(op), { hangs, table, record });
  const withToken = (record: SandboxRecord) => ({ ...sandboxJson(record), access_token: record.token });

  app.post("/sandboxes", async (c) => {
    const body = CreateBody.safeParse(await c.req.json().catch(() => null));
    if (!body.success) return apiError(c, 400, "invalid_request", body.error.issues[0]?.message ?? "invalid body");
    const refused = await fault(c, "create");
    if (refused) return refused;
    try {
      const record = await table.create({
        name: body.data.name,
        metadata: body.data.metadata ?? {},
        envVars: body.data.env_vars ?? {},
        timeoutSeconds: body.data.timeout_seconds ?? null,
      });
      return c.json(withToken(record), 201);
    } catch (err) {
      return apiError(c, 500, "sandbox_failed", `could not start the sandbox: ${String(err)}`);
    }
  });

  app.get("/sandboxes", async (c) => {
    const refused = await fault(c, "list");
    if (refused) return refused;
    const filters = Object.entries(c.req.query())
      .filter(([key]) => key.startsWith("metadata."))
      .map(([key, value]) => [key.slice("metadata.".length), value] as const);
    const listed = table.all().filter((record) => filters.every(([key, value]) => record.metadata[key] === value));
    return c.json(listed.map(sandboxJson));
  });

  const addressed = (c: Ctx) => table.get(c.req.param("id") ?? "");

  app.get("/sandboxes/:id", async (c) => {
    const record = addressed(c);
    const refused = await fault(c, "get", record);
    if (refused) return refused;
    if (!record) return apiError(c, 404, "not_found", "Sandbox not found");
    return c.json(sandboxJson(record));
  });

  app.patch("/sandboxes/:id", async (c) => {
    const record = addressed(c);
    const body = UpdateBody.safeParse(await c.req.json().catch(() => null));
    if (!body.success) return apiError(c, 400, "invalid_request", body.error.issues[0]?.message ?? "invalid body");
    const refused = await fault(c, "lifecycle", record);
    if (refused) return refused;
    if (!record) return apiError(c, 404, "not_found", "Sandbox not found");
    if (body.data.metadata !== undefined) record.metadata = body.data.metadata;
    if (body.data.timeout_seconds !== undefined) record.timeoutSeconds = body.data.timeout_seconds;
    return c.body(null, 204);
  });

  app.delete("/sandboxes/:id", async (c) => {
    const record = addressed(c);
    const refused = await fault(c, "kill", record);
    if (refused) return refused;
    if (!record) return apiError(c, 404, "not_found", "Sandbox not found");
    try {
      await locks.run(record.id, () => table.destroy(record));
    } catch (err) {
      return apiError(c, 500, "internal_error", `could not delete the sandbox: ${String(err)}`);
    }
    return c.body(null, 204);
  });

  app.post("/sandboxes/:id/pause", async (c) => {
    const record = addressed(c);
    const refused = await fault(c, "lifecycle", record);
    if (refused) return refused;
    if (!record) return apiError(c, 404, "not_found", "Sandbox not found");
    return locks.run(record.id, async () => {
      if (record.status === "paused") return c.body(null, 204);
      if (record.status !== "active") return apiError(c, 409, "conflict", `Sandbox is ${record.status}`);
      await table.pause(record);
      return c.body(null, 204);
    });
  });

  /** `/resume` wants a paused sandbox; `/activate` takes either. Both rotate the token. */
  const wake = (onlyPaused: boolean) => async (c: Ctx) => {
    const record = addressed(c);
    const refused = await fault(c, "lifecycle", record);
    if (refused) return refused;
    if (!record) return apiError(c, 404, "not_found", "Sandbox not found");
    // A resume already under way: the loser of the race hears 409, as the SDK expects.
    if (record.status === "resuming") return apiError(c, 409, "conflict", "Sandbox is resuming");
    return locks.run(record.id, async () => {
      if (record.status === "failed") return apiError(c, 409, "conflict", "Sandbox failed");
      if (onlyPaused && record.status !== "paused") return apiError(c, 409, "conflict", `Sandbox is ${record.status}`);
      if (record.status === "paused") {
        try {
          await table.resume(record);
        } catch (err) {
          return apiError(c, 500, "internal_error", `could not resume the sandbox: ${String(err)}`);
        }
      }
      table.rotate(record);
      return c.json(withToken(record));
    });
  };
  app.post("/sandboxes/:id/resume", wake(true));
  app.post("/sandboxes/:id/activate", wake(false));

  mountAdmin(app, {
    token: apiKey,
    faults,
    state: async () => ({ live: table.size, containers: await boxes.containers() }),
  });

  // The data plane's TLS: a CA of this stand-in's own; its certificate file is what the driver trusts.
  const ca = new SandboxCa("superserve-standin");
  const contexts = {
    apex: createSecureContext({ key: ca.issue(STANDIN_SANDBOX_HOST).keyPem, cert: ca.issue(STANDIN_SANDBOX_HOST).certPem }),
    boxes: createSecureContext({ key: ca.issue(`*.${STANDIN_SANDBOX_HOST}`).keyPem, cert: ca.issue(`*.${STANDIN_SANDBOX_HOST}`).certPem }),
  };
  const dataContext = { table, faults, hangs, requests, sandboxHost: STANDIN_SANDBOX_HOST };
  const data = await serveStandIn({
    app: dataPlaneApp(dataContext),
    upgrades: [execConnectRoute(dataContext)],
    host: options.host,
    onUpgradeRecord: (request, verdict) => recordUpgrade(requests, request, "sec-websocket-protocol", verdict.accepted),
    tls: {
      key: ca.issue(STANDIN_SANDBOX_HOST).keyPem,
      cert: ca.issue(STANDIN_SANDBOX_HOST).certPem,
      SNICallback: (name, done) => done(null, name.toLowerCase() === STANDIN_SANDBOX_HOST ? contexts.apex : contexts.boxes),
    },
  });
  let control: Awaited<ReturnType<typeof serveStandIn>>;
  try {
    control = await serveStandIn({ app, port: options.port, host: options.host });
  } catch (err) {
    await data.close();
    throw err;
  }
  const dir = await mkdtemp(join(tmpdir(), "openma-superserve-standin-"));
  const caFile = join(dir, "ca.pem");
  await writeFile(caFile, ca.certPem, { mode: 0o644 });

  return standInHandle(
    {
      vendor: "superserve",
      url: control.url,
      env: {
        SUPERSERVE_API_KEY: apiKey,
        SUPERSERVE_BASE_URL: control.url,
        OPENMA_SUPERSERVE_DATA_PLANE_URL: data.url,
        OPENMA_SUPERSERVE_DATA_PLANE_CA: caFile,
      },
      faults,
      requests,
      boxes,
      live: () => table.size,
      find: (id) => table.get(id),
      running: (record) => record.status !== "paused",
      hangs,
      servers: [control, data],
      afterBoxes: () => rm(dir, { recursive: true, force: true }),
    },
    { table, dataPlaneUrl: data.url, caPem: ca.certPem },
  );
}
