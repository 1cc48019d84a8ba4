/**
 * A stand-in of AWS Lambda MicroVMs' REST-JSON API (2025-09-09) for the
 * official `@aws-sdk/client-lambda-microvms` client: RunMicrovm, GetMicrovm,
 * ListMicrovms and TerminateMicrovm, every request SigV4-verified (signing
 * name `lambda`), RunMicrovm idempotent by `clientToken` (the same token with
 * other parameters is a ConflictException), errors as the service sends them
 * (status, `x-amzn-errortype`, `{message}`), timestamps as epoch seconds.
 * Each MicroVM is a real local sandbox running its image's run hook.
 *
 * Point the SDK at it the usual AWS way: the variables in `env`
 * (AWS_ENDPOINT_URL_LAMBDA_MICROVMS, AWS_REGION, AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY).
 */
import { createHash } from "node:crypto";
import {
  type CloudStandIn,
  type Fault,
  FaultQueue,
  Hangs,
  LocalBoxes,
  mountAdmin,
  noteAuth,
  type RecordedRequest,
  recorder,
  type StandInEnv,
  type StandInOptions,
  serveStandIn,
  standInHandle,
} from "@openma/standin-kit";
import { realScheduler, type Scheduler } from "@openma/time";
import { type Context, Hono, type MiddlewareHandler } from "hono";
import { z } from "zod";
import { type Microvm, type MicrovmImage, MicrovmTable } from "./microvms.ts";
import { type Credentials, verifySigV4 } from "./sigv4.ts";

export const DEFAULT_CREDENTIALS: Credentials = {
  accessKeyId: "AKIDSTANDINMICROVMS0",
  secretAccessKey: "standin/microvms/secret/0123456789abcdef",
};
export const DEFAULT_REGION = "us-east-1";
const API = "/2025-09-09/microvms";

export interface MicrovmsStandInOptions extends StandInOptions {
  region?: string;
  credentials?: Credentials;
  /** The images RunMicrovm accepts, by identifier. */
  images?: Readonly<Record<string, MicrovmImage>>;
  /** false: VMs are records without a sandbox (launch-count tests); default true, each VM a real local sandbox. */
  boxes?: boolean;
  /** Drives the maximum-duration timers and the signature clock. */
  scheduler?: Scheduler;
}

export interface MicrovmsStandIn extends CloudStandIn {
  readonly table: MicrovmTable;
  readonly region: string;
  readonly credentials: Credentials;
  /** MicroVMs RunMicrovm created (a replayed clientToken creates none): the launch count. */
  launches(): number;
  /** Lets requests held by a `hang` fault finish (a RunMicrovm answers with the VM it made). */
  releaseHangs(): void;
}

const RunBody = z.object({
  imageIdentifier: z.string().min(1).max(2048),
  imageVersion: z.string().min(1).max(64).optional(),
  executionRoleArn: z.string().max(2048).optional(),
  runHookPayload: z
    .string()
    .max(16 * 1024)
    .optional(),
  maximumDurationInSeconds: z.number().int().min(1).max(28_800).optional(),
  clientToken: z.string().min(1).max(128).optional(),
  idlePolicy: z.record(z.string(), z.unknown()).optional(),
  logging: z.record(z.string(), z.unknown()).optional(),
  ingressNetworkConnectors: z.array(z.string()).optional(),
  egressNetworkConnectors: z.array(z.string()).optional(),
});

type ErrorType =
  | "ValidationException"
  | "ResourceNotFoundException"
  | "ConflictException"
  | "ThrottlingException"
  | "InternalServerException"
  | "AccessDeniedException";

const STATUS: Record<ErrorType, 400 | 403 | 404 | 409 | 429 | 500> = {
  ValidationException: 400,
  AccessDeniedException: 403,
  ResourceNotFoundException: 404,
  ConflictException: 409,
  ThrottlingException: 429,
  InternalServerException: 500,
};

function awsError(c: Context<StandInEnv>, type: string, status: number, message: string): Response {
  c.header("x-amzn-errortype", type);
  c.header("x-amzn-requestid", crypto.randomUUID());
  return c.json({ message }, status as 400);
}

const fail = (c: Context<StandInEnv>, type: ErrorType, message: string) => awsError(c, type, STATUS[type], message);

const seconds = (d: Date | undefined) => (d === undefined ? undefined : d.getTime() / 1000);

function describe(vm: Microvm, region: string) {
  return {
    microvmId: vm.microvmId,
    state: vm.state,
    endpoint: `${vm.microvmId}.microvms.lambda.${region}.on.aws`,
    imageArn: `arn:aws:lambda:${region}:000000000000:microvm-image:${vm.input.imageIdentifier}`,
    imageVersion: vm.input.imageVersion,
    ...(vm.input.executionRoleArn ? { executionRoleArn: vm.input.executionRoleArn } : {}),
    maximumDurationInSeconds: vm.input.maximumDurationInSeconds,
    startedAt: seconds(vm.startedAt),
    ...(vm.terminatedAt ? { terminatedAt: seconds(vm.terminatedAt) } : {}),
    ...(vm.stateReason ? { stateReason: vm.stateReason } : {}),
  };
}

export async function startMicrovmsStandIn(options: MicrovmsStandInOptions = {}): Promise<MicrovmsStandIn> {
  const region = options.region ?? DEFAULT_REGION;
  const credentials =
    options.credentials ?? (options.apiKey ? { ...DEFAULT_CREDENTIALS, secretAccessKey: options.apiKey } : DEFAULT_CREDENTIALS);
  const scheduler = options.scheduler ?? realScheduler;
  const faults = new FaultQueue();
  const hangs = new Hangs();
  const requests: RecordedRequest[] = [];
  const boxes = new LocalBoxes({ vendor: "aws-microvms", image: options.image, networkMode: options.networkMode });
  const table = new MicrovmTable(options.boxes === false ? null : boxes, new Map(Object.entries(options.images ?? {})), scheduler);
  /** clientToken → the VM it made and a digest of the parameters it made it with. */
  const tokens = new Map<string, { microvmId: string; digest: string }>();

  const app = new Hono<StandInEnv>();
  app.use("*", recorder(requests));
  const signed: MiddlewareHandler<StandInEnv> = async (c, next) => {
    const body = new Uint8Array(await c.req.raw.clone().arrayBuffer());
    const url = new URL(c.req.url);
    const verdict = await verifySigV4(
      { method: c.req.method, url, headers: c.req.raw.headers, body },
      [credentials],
      region,
      scheduler.now(),
    );
    noteAuth(c, c.req.header("authorization") === undefined ? null : "authorization", verdict.ok);
    if (!verdict.ok) return awsError(c, verdict.type, 403, verdict.message);
    await next();
  };
  app.use(API, signed);
  app.use(`${API}/*`, signed);

  /** A queued fault for this operation, rendered in the service's error shape; null when none. */
  async function injected(c: Context<StandInEnv>, op: Fault["op"]): Promise<Response | "hang" | null> {
    const fault = faults.take(op);
    if (fault === undefined) return null;
    if (fault.kind === "rate_limited") {
      c.header("retry-after", String(fault.retryAfterSeconds ?? 1));
      return fail(c, "ThrottlingException", "Rate exceeded");
    }
    if (fault.kind === "hang") return "hang";
    if (fault.kind === "status")
      return awsError(
        c,
        fault.status === 503 ? "ServiceUnavailableException" : "InternalServerException",
        fault.status ?? 500,
        "injected failure",
      );
    return null;
  }

  app.post(API, async (c) => {
    const fault = await injected(c, "create");
    if (fault instanceof Response) return fault;
    const parsed = RunBody.safeParse(await c.req.json().catch(() => null));
    if (!parsed.success)
      return fail(c, "ValidationException", parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "));
    const body = parsed.data;
    if (!table.hasImage(body.imageIdentifier))
      return fail(c, "ResourceNotFoundException", `MicroVM image ${body.imageIdentifier} not found`);
    const { clientToken, ...params } = body;
    const digest = createHash("sha256").update(JSON.stringify(params)).digest("hex");
    const known = clientToken === undefined ? undefined : tokens.get(clientToken);
    let vm: Microvm | undefined;
    if (known) {
      if (known.digest !== digest) return fail(c, "ConflictException", "The clientToken was already used with different parameters.");
      vm = table.get(known.microvmId);
    }
    if (vm === undefined) {
      vm = table.run({
        imageIdentifier: body.imageIdentifier,
        imageVersion: body.imageVersion ?? "1",
        runHookPayload: body.runHookPayload,
        maximumDurationInSeconds: body.maximumDurationInSeconds ?? 28_800,
        executionRoleArn: body.executionRoleArn,
      });
      if (clientToken !== undefined) tokens.set(clientToken, { microvmId: vm.microvmId, digest });
    }
    // A hung RunMicrovm hangs after the VM exists: the caller never learns the id, the worst case for idempotency.
    if (fault === "hang") await hangs.hang();
    return c.json(describe(vm, region));
  });

  app.get(API, async (c) => {
    const fault = await injected(c, "list");
    if (fault instanceof Response) return fault;
    if (fault === "hang") await hangs.hang();
    const maxResults = Number(c.req.query("maxResults") ?? 50);
    if (!Number.isInteger(maxResults) || maxResults < 1 || maxResults > 100)
      return fail(c, "ValidationException", "maxResults: must be 1-100");
    const image = c.req.query("imageIdentifier");
    const all = table.all().filter((vm) => image === undefined || vm.input.imageIdentifier === image);
    const start = Number(c.req.query("nextToken") ?? 0);
    if (!Number.isInteger(start) || start < 0) return fail(c, "ValidationException", "nextToken: not a token this service issued");
    const page = all.slice(start, start + maxResults);
    const items = page.map((vm) => {
      const d = describe(vm, region);
      return { microvmId: d.microvmId, state: d.state, imageArn: d.imageArn, imageVersion: d.imageVersion, startedAt: d.startedAt };
    });
    return c.json({ items, ...(start + maxResults < all.length ? { nextToken: String(start + maxResults) } : {}) });
  });

  app.get(`${API}/:id`, async (c) => {
    const fault = await injected(c, "get");
    if (fault instanceof Response) return fault;
    if (fault === "hang") await hangs.hang();
    const vm = table.get(c.req.param("id"));
    if (vm === undefined) return fail(c, "ResourceNotFoundException", `MicroVM ${c.req.param("id")} not found`);
    return c.json(describe(vm, region));
  });

  app.delete(`${API}/:id`, async (c) => {
    const fault = await injected(c, "kill");
    if (fault instanceof Response) return fault;
    if (fault === "hang") await hangs.hang();
    const vm = table.get(c.req.param("id"));
    if (vm === undefined) return fail(c, "ResourceNotFoundException", `MicroVM ${c.req.param("id")} not found`);
    await table.terminate(vm, "terminated by TerminateMicrovm");
    return c.json({});
  });

  mountAdmin(app, {
    token: credentials.secretAccessKey,
    faults,
    state: async () => ({
      live: table.all().filter((vm) => vm.state !== "TERMINATED").length,
      launches: table.all().length,
      containers: await boxes.containers(),
      microvms: table.all().map((vm) => ({ microvmId: vm.microvmId, state: vm.state, stateReason: vm.stateReason ?? null })),
    }),
  });
  app.notFound((c) => fail(c, "ResourceNotFoundException", `no route for ${c.req.method} ${new URL(c.req.url).pathname}`));

  const server = await serveStandIn({ app, port: options.port, host: options.host });
  const live = () => table.all().filter((vm) => vm.state !== "TERMINATED");
  return standInHandle(
    {
      vendor: "aws-microvms",
      url: server.url,
      env: {
        AWS_ENDPOINT_URL_LAMBDA_MICROVMS: server.url,
        AWS_REGION: region,
        AWS_ACCESS_KEY_ID: credentials.accessKeyId,
        AWS_SECRET_ACCESS_KEY: credentials.secretAccessKey,
      },
      faults,
      requests,
      boxes,
      live: () => live().length,
      find: (id) => live().find((vm) => vm.microvmId === id),
      running: (vm) => vm.state === "RUNNING" || vm.state === "PENDING",
      hangs,
      servers: [server],
      stop() {
        table.close();
      },
    },
    { table, region, credentials, launches: () => table.all().length, releaseHangs: () => hangs.releaseAll() },
  );
}
