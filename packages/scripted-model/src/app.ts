/**
 * The scripted model's HTTP surface: `POST /v1/messages` as the Messages API
 * answers it, and the `/_script` control routes other processes use to load a
 * script, queue faults and read the request log.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { HttpBindings } from "@hono/node-server";
import { RESPONSE_ALREADY_SENT } from "@hono/node-server/utils/response";
import type { Scheduler } from "@openma/time";
import { type Context, Hono } from "hono";
import { type ErrorType, errorBody, errorTypeFor, randomId, statusFor } from "./errors.ts";
import { FaultQueue, ScriptState, type TurnLease } from "./queue.ts";
import { type MessagesRequest, messagesRequestSchema, redactHeaders } from "./request.ts";
import { describeIssues, type Fault, parseFault, parseScript, ScriptError, type ScriptInput, type Turn } from "./script.ts";
import { type StreamCut, writeSse } from "./stream.ts";
import { buildResponse } from "./wire.ts";

export type RequestOutcome = "pending" | "completed" | "error" | "fault" | "dropped" | "stream_error" | "aborted";

/** One request as received, for assertions. Credential headers are left out; `auth` says how one was presented. */
export interface RecordedRequest {
  request_id: string;
  method: string;
  path: string;
  received_at: string;
  headers: Record<string, string>;
  auth: "x-api-key" | "bearer" | null;
  /** Parsed JSON body, or the raw text when it is not JSON. */
  body: unknown;
  stream: boolean;
  /** The conversation key under `session_key` scripts. */
  session_key: string | null;
  /** Index of the turn that answered (or was handed back after a failed delivery). */
  turn: number | null;
  status: number | null;
  outcome: RequestOutcome;
}

type Env = { Bindings: HttpBindings };

/** The real API's request size limit. */
const MAX_BODY_BYTES = 32 * 1024 * 1024;

const digest = (s: string) => createHash("sha256").update(s).digest();

/** Mutable server state shared by the routes and the in-process handle. */
export class ScriptedModelCore {
  state: ScriptState;
  readonly faults = new FaultQueue();
  readonly requests: RecordedRequest[] = [];
  /** In-flight requests, aborted on close so scripted delays never outlive the server. */
  readonly inFlight = new Set<AbortController>();
  readonly #keyDigest: Buffer | null;
  #active = 0;
  #idleWaiters: (() => void)[] = [];

  constructor(
    script: ScriptInput,
    readonly scheduler: Scheduler,
    apiKey?: string,
  ) {
    this.state = new ScriptState(parseScript(script));
    this.#keyDigest = apiKey ? digest(apiKey) : null;
  }

  load(script: unknown): void {
    this.state = new ScriptState(parseScript(script));
  }

  inject(fault: unknown): void {
    this.faults.push(parseFault(fault));
  }

  /** Run a request handler, counting it for `idle()`. */
  async track<T>(handler: () => Promise<T>): Promise<T> {
    this.#active++;
    try {
      return await handler();
    } finally {
      if (--this.#active === 0) for (const resolve of this.#idleWaiters.splice(0)) resolve();
    }
  }

  /** Resolves once no `/v1/messages` request is being handled (turns settled, log entries final). */
  idle(): Promise<void> {
    if (this.#active === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /** How the caller presented a key, and whether it is the expected one (any key passes when none is configured). */
  authenticate(headers: Headers): { via: RecordedRequest["auth"]; ok: boolean } {
    const xKey = headers.get("x-api-key");
    const bearer = /^Bearer\s+(.+)$/i.exec(headers.get("authorization") ?? "")?.[1];
    const presented = xKey ?? bearer ?? null;
    const via = xKey !== null ? "x-api-key" : bearer !== undefined ? "bearer" : null;
    if (!this.#keyDigest) return { via, ok: true };
    return { via, ok: presented !== null && timingSafeEqual(digest(presented), this.#keyDigest) };
  }
}

interface ErrorOptions {
  retryAfterMs?: number | undefined;
  /** Tell the SDK not to retry: repeating the request cannot change a script problem. */
  noRetry?: boolean;
}

function errorResponse(status: number, type: ErrorType, message: string, requestId: string, opts: ErrorOptions = {}): Response {
  const headers: Record<string, string> = { "content-type": "application/json", "request-id": requestId };
  if (opts.retryAfterMs !== undefined) {
    headers["retry-after-ms"] = String(opts.retryAfterMs);
    headers["retry-after"] = String(Math.ceil(opts.retryAfterMs / 1000));
  }
  if (opts.noRetry) headers["x-should-retry"] = "false";
  return new Response(JSON.stringify(errorBody(type, message, requestId)), { status, headers });
}

function parseJson(text: string): { ok: true; value: unknown } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch {
    return { ok: false };
  }
}

/** An AbortController that fires when the client disconnects before the response finished. */
function requestSignal(c: Context<Env>, core: ScriptedModelCore): AbortController {
  const ctrl = new AbortController();
  const { outgoing } = c.env;
  outgoing.once("close", () => {
    if (!outgoing.writableFinished) ctrl.abort(new Error("client disconnected"));
    core.inFlight.delete(ctrl);
  });
  core.inFlight.add(ctrl);
  return ctrl;
}

type Parsed = { ok: true; req: MessagesRequest } | { ok: false; response: Response };

/** Auth, then body size, JSON and schema, each failure in the API's error shape. */
async function admit(c: Context<Env>, core: ScriptedModelCore, rec: RecordedRequest): Promise<Parsed> {
  const fail = (status: number, message: string): Parsed => ({
    ok: false,
    response: errorResponse(status, errorTypeFor(status), message, rec.request_id),
  });
  const declared = Number(c.req.header("content-length") ?? 0);
  if (declared > MAX_BODY_BYTES) return fail(413, `request body exceeds ${MAX_BODY_BYTES} bytes`);
  const text = await c.req.text();
  // A chunked body declares no length: check what actually arrived too.
  if (Buffer.byteLength(text) > MAX_BODY_BYTES) return fail(413, `request body exceeds ${MAX_BODY_BYTES} bytes`);
  const json = parseJson(text);
  rec.body = json.ok ? json.value : text;
  const auth = core.authenticate(c.req.raw.headers);
  rec.auth = auth.via;
  if (!auth.ok) return fail(401, "invalid x-api-key");
  if (!json.ok) return fail(400, "request body is not valid JSON");
  const parsed = messagesRequestSchema.safeParse(json.value);
  if (!parsed.success) return fail(400, describeIssues(parsed.error));
  return { ok: true, req: parsed.data };
}

function cutOf(fault: Fault | null): StreamCut | undefined {
  if (fault?.type === "drop") return { kind: "drop", after: fault.after_events };
  if (fault?.type === "stream_error") {
    return { kind: "error", after: fault.after_events, errorType: fault.error_type, message: fault.message ?? "Overloaded" };
  }
  return undefined;
}

function dropConnection(c: Context<Env>): Response {
  c.env.outgoing.socket?.destroy();
  return RESPONSE_ALREADY_SENT;
}

/** A fault that ends the request without a scripted turn; null when the request goes on to a turn. */
function faultWithoutTurn(fault: Fault | null, req: MessagesRequest, rec: RecordedRequest): Response | null {
  if (fault?.type === "error") {
    rec.status = fault.status;
    rec.outcome = "fault";
    const type = fault.error_type ?? errorTypeFor(fault.status);
    return errorResponse(fault.status, type, fault.message ?? `scripted ${type}`, rec.request_id, { retryAfterMs: fault.retry_after_ms });
  }
  if (fault?.type === "stream_error" && req.stream !== true) {
    // A non-streaming request has no stream to break: it gets the HTTP error of that type instead.
    rec.status = statusFor(fault.error_type);
    rec.outcome = "fault";
    return errorResponse(rec.status, fault.error_type, fault.message ?? "Overloaded", rec.request_id);
  }
  return null;
}

interface Answer {
  req: MessagesRequest;
  lease: TurnLease;
  fault: Fault | null;
  rec: RecordedRequest;
  ctrl: AbortController;
}

async function answerTurn(c: Context<Env>, core: ScriptedModelCore, { req, lease, fault, rec, ctrl }: Answer): Promise<Response> {
  const turn: Turn = lease.turn;
  const firstByteMs = turn.delay?.first_byte_ms ?? 0;
  if (turn.error || req.stream !== true) {
    try {
      if (firstByteMs > 0) await core.scheduler.sleep(firstByteMs, ctrl.signal);
    } catch {
      lease.release();
      rec.outcome = "aborted";
      return dropConnection(c);
    }
    if (fault?.type === "drop") {
      lease.release();
      rec.outcome = "dropped";
      return dropConnection(c);
    }
    lease.commit();
    if (turn.error) {
      const e = turn.error;
      const type = e.error_type ?? errorTypeFor(e.status);
      rec.status = e.status;
      rec.outcome = "error";
      return errorResponse(e.status, type, e.message ?? `scripted ${type}`, rec.request_id, { retryAfterMs: e.retry_after_ms });
    }
    rec.status = 200;
    rec.outcome = "completed";
    return c.json(buildResponse(turn.response!, req).message, 200, { "request-id": rec.request_id });
  }
  const outcome = await writeSse({
    outgoing: c.env.outgoing,
    events: buildResponse(turn.response!, req).events,
    requestId: rec.request_id,
    scheduler: core.scheduler,
    signal: ctrl.signal,
    firstByteMs,
    chunkMs: turn.delay?.chunk_ms ?? 0,
    cut: cutOf(fault),
  });
  if (outcome === "completed") lease.commit();
  else lease.release();
  rec.status = outcome === "aborted" && !c.env.outgoing.headersSent ? null : 200;
  rec.outcome = outcome;
  return RESPONSE_ALREADY_SENT;
}

async function handleMessages(c: Context<Env>, core: ScriptedModelCore): Promise<Response> {
  const rec: RecordedRequest = {
    request_id: randomId("req"),
    method: c.req.method,
    path: new URL(c.req.url).pathname,
    received_at: new Date(core.scheduler.now()).toISOString(),
    headers: redactHeaders(c.req.raw.headers),
    auth: null,
    body: null,
    stream: false,
    session_key: null,
    turn: null,
    status: null,
    outcome: "pending",
  };
  core.requests.push(rec);
  const ctrl = requestSignal(c, core);
  const admitted = await admit(c, core, rec);
  if (!admitted.ok) {
    rec.status = admitted.response.status;
    rec.outcome = "error";
    return admitted.response;
  }
  const req = admitted.req;
  rec.stream = req.stream === true;
  const fault = core.faults.take(req);
  const early = faultWithoutTurn(fault, req, rec);
  if (early) return early;
  const selection = core.state.select(req);
  if (!selection.ok) {
    if (fault?.type === "drop") {
      rec.outcome = "dropped";
      return dropConnection(c);
    }
    rec.status = 500;
    rec.outcome = "error";
    return errorResponse(500, "api_error", selection.message, rec.request_id, { noRetry: true });
  }
  rec.turn = selection.lease.index;
  rec.session_key = selection.lease.sessionKey;
  return answerTurn(c, core, { req, lease: selection.lease, fault, rec, ctrl });
}

/** `/_script` control routes: same key as the API when one is configured. */
function controlRoutes(app: Hono<Env>, core: ScriptedModelCore): void {
  const guard = (c: Context<Env>): Response | null =>
    core.authenticate(c.req.raw.headers).ok ? null : errorResponse(401, "authentication_error", "invalid x-api-key", randomId("req"));
  const withBody = async (c: Context<Env>, apply: (body: unknown) => Response): Promise<Response> => {
    const denied = guard(c);
    if (denied) return denied;
    const json = parseJson(await c.req.text());
    if (!json.ok) return errorResponse(400, "invalid_request_error", "request body is not valid JSON", randomId("req"));
    try {
      return apply(json.value);
    } catch (err) {
      if (err instanceof ScriptError) return errorResponse(400, "invalid_request_error", err.message, randomId("req"));
      throw err;
    }
  };
  app.get(
    "/_script",
    (c) => guard(c) ?? c.json({ unused_turns: core.state.unused(), pending_faults: core.faults.size, requests: core.requests.length }),
  );
  app.post("/_script", (c) =>
    withBody(c, (body) => {
      core.load(body);
      return c.json({ loaded: true, turns: core.state.script.turns.length });
    }),
  );
  app.post("/_script/inject", (c) =>
    withBody(c, (body) => {
      const faults = Array.isArray(body) ? body.map(parseFault) : [parseFault(body)];
      for (const f of faults) core.faults.push(f);
      return c.json({ pending_faults: core.faults.size });
    }),
  );
  app.get("/_script/requests", (c) => guard(c) ?? c.json({ data: core.requests }));
  app.delete("/_script/requests", (c) => {
    const denied = guard(c);
    if (denied) return denied;
    core.requests.length = 0;
    return c.json({ data: [] });
  });
}

export function createScriptedModelApp(core: ScriptedModelCore): Hono<Env> {
  const app = new Hono<Env>();
  app.post("/v1/messages", (c) => core.track(() => handleMessages(c, core)));
  controlRoutes(app, core);
  app.notFound((c) =>
    errorResponse(404, "not_found_error", `no route for ${c.req.method} ${new URL(c.req.url).pathname}`, randomId("req")),
  );
  app.onError(() => errorResponse(500, "api_error", "internal error in the scripted model", randomId("req")));
  return app;
}
