/**
 * The scripted model's HTTP surface: every dialect's model endpoints on one
 * port, answered from one script, plus the `/_script` control routes other
 * processes use to load a script, queue faults and read the request log.
 *
 *   Anthropic Messages       POST /v1/messages, /v1/messages/count_tokens
 *   OpenAI Responses         POST /v1/responses, /v1/responses/input_tokens
 *   OpenAI Chat Completions  POST /v1/chat/completions
 *   Gemini                   POST /v1beta/models/{model}:generateContent | :streamGenerateContent | :countTokens
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { HttpBindings } from "@hono/node-server";
import { RESPONSE_ALREADY_SENT } from "@hono/node-server/utils/response";
import type { Scheduler } from "@openma/time";
import { type Context, Hono } from "hono";
import type { ApiErrorSpec, AuthVia, DialectSpec, ParsedRequest, ParseResult, RouteInfo } from "./dialect.ts";
import { anthropic } from "./dialects/anthropic.ts";
import { gemini } from "./dialects/gemini.ts";
import { openaiChat } from "./dialects/openai-chat.ts";
import { openaiResponses } from "./dialects/openai-responses.ts";
import { errorTypeFor, randomId, statusFor } from "./errors.ts";
import { FaultQueue, ScriptState } from "./queue.ts";
import { type Fault, parseFault, parseScript, ScriptError, type ScriptInput, type SideRule, type Turn } from "./script.ts";
import { sideAnswer, sideRulesOf } from "./side.ts";
import { type StreamCut, writeSse } from "./stream.ts";
import { estimateInputTokens } from "./usage.ts";
import { type Dialect, type RequestView, redactHeaders } from "./view.ts";

export type RequestOutcome = "pending" | "completed" | "error" | "fault" | "dropped" | "stream_error" | "aborted";

/** One request as received, for assertions. Credential headers are left out; `auth` says how one was presented. */
export interface RecordedRequest {
  request_id: string;
  method: string;
  path: string;
  received_at: string;
  headers: Record<string, string>;
  auth: AuthVia | null;
  dialect: Dialect;
  /** A conversation turn (answered from the script), a side request (answered by a side rule) or a token count. */
  kind: "turn" | "side" | "count_tokens";
  /** The side rule that answered. */
  side: string | null;
  /** Parsed JSON body, or the raw text when it is not JSON. */
  body: unknown;
  /** The dialect-neutral reading of the body; null when it did not validate. */
  view: RequestView | null;
  stream: boolean;
  /** The conversation key under `session_key` scripts. */
  session_key: string | null;
  /** Index of the turn that answered (or was handed back after a failed delivery). */
  turn: number | null;
  status: number | null;
  outcome: RequestOutcome;
  /** The message of an error answer. */
  error: string | null;
}

type Env = { Bindings: HttpBindings };

/** The real APIs' request size limit. */
const MAX_BODY_BYTES = 32 * 1024 * 1024;

const digest = (s: string) => createHash("sha256").update(s).digest();

/** Mutable server state shared by the routes and the in-process handle. */
export class ScriptedModelCore {
  state: ScriptState;
  sideRules: SideRule[];
  readonly faults = new FaultQueue();
  /** Turn requests (and requests that failed before they could be classified). */
  readonly requests: RecordedRequest[] = [];
  /** Side requests and token counts, kept apart so turn-by-turn assertions stay exact. */
  readonly sideRequests: RecordedRequest[] = [];
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
    const parsed = parseScript(script);
    this.state = new ScriptState(parsed);
    this.sideRules = sideRulesOf(parsed);
    this.#keyDigest = apiKey ? digest(apiKey) : null;
  }

  load(script: unknown): void {
    const parsed = parseScript(script);
    this.state = new ScriptState(parsed);
    this.sideRules = sideRulesOf(parsed);
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

  /** Resolves once no model request is being handled (turns settled, log entries final). */
  idle(): Promise<void> {
    if (this.#active === 0) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /** How the caller presented a key the dialect's way, and whether it is the expected one (any key passes when none is configured). */
  authenticate(dialect: DialectSpec, headers: Headers, url: URL): { via: AuthVia | null; ok: boolean } {
    const { via, key } = dialect.credentials(headers, url);
    if (!this.#keyDigest) return { via, ok: true };
    return { via, ok: key !== null && timingSafeEqual(digest(key), this.#keyDigest) };
  }
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

interface Exchange {
  c: Context<Env>;
  core: ScriptedModelCore;
  dialect: DialectSpec;
  rec: RecordedRequest;
}

/** Record an error answer and render it in the dialect's shape. */
function fail(x: Exchange, spec: Omit<ApiErrorSpec, "requestId">, outcome: RequestOutcome = "error"): Response {
  const response = x.dialect.errorResponse({ ...spec, requestId: x.rec.request_id });
  x.rec.status = response.status;
  x.rec.outcome = outcome;
  x.rec.error = spec.message;
  return response;
}

function invalid(x: Exchange, status: number, message: string): { ok: false; response: Response } {
  return { ok: false, response: fail(x, { status, type: errorTypeFor(status), message }) };
}

/** Body size, JSON, the dialect's auth, then its schema: each failure in the dialect's error shape. */
async function admit<T>(
  x: Exchange,
  parse: (body: unknown) => ParseResult<T>,
): Promise<{ ok: true; value: T } | { ok: false; response: Response }> {
  const { c, core, dialect, rec } = x;
  const declared = Number(c.req.header("content-length") ?? 0);
  if (declared > MAX_BODY_BYTES) return invalid(x, 413, `request body exceeds ${MAX_BODY_BYTES} bytes`);
  const text = await c.req.text();
  // A chunked body declares no length: check what actually arrived too.
  if (Buffer.byteLength(text) > MAX_BODY_BYTES) return invalid(x, 413, `request body exceeds ${MAX_BODY_BYTES} bytes`);
  const json = parseJson(text);
  rec.body = json.ok ? json.value : text;
  const auth = core.authenticate(dialect, c.req.raw.headers, new URL(c.req.url));
  rec.auth = auth.via;
  if (!auth.ok) {
    const response = dialect.authFailure(auth.via !== null, rec.request_id);
    rec.status = response.status;
    rec.outcome = "error";
    rec.error = "invalid credentials";
    return { ok: false, response };
  }
  if (!json.ok) return invalid(x, 400, "request body is not valid JSON");
  const parsed = parse(json.value);
  return parsed.ok ? parsed : invalid(x, 400, parsed.message);
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
function faultWithoutTurn(x: Exchange, fault: Fault | null, view: RequestView): Response | null {
  if (fault?.type === "error") {
    const type = fault.error_type ?? errorTypeFor(fault.status);
    return fail(
      x,
      { status: fault.status, type, message: fault.message ?? `scripted ${type}`, retryAfterMs: fault.retry_after_ms },
      "fault",
    );
  }
  if (fault?.type === "stream_error" && !view.stream) {
    // A non-streaming request has no stream to break: it gets the HTTP error of that type instead.
    return fail(x, { status: statusFor(fault.error_type), type: fault.error_type, message: fault.message ?? "Overloaded" }, "fault");
  }
  return null;
}

/** What answers a request: a script turn under lease, or a side rule's response (nothing to commit). */
interface Delivery {
  turn: Pick<Turn, "delay" | "response" | "error">;
  commit(): void;
  release(): void;
}

interface Answer {
  x: Exchange;
  answer: ParsedRequest;
  view: RequestView;
  delivery: Delivery;
  fault: Fault | null;
  ctrl: AbortController;
}

async function deliver({ x, answer, view, delivery, fault, ctrl }: Answer): Promise<Response> {
  const { c, core, dialect, rec } = x;
  const { turn } = delivery;
  const firstByteMs = turn.delay?.first_byte_ms ?? 0;
  const ctx = { now: core.scheduler.now(), requestId: rec.request_id };
  if (turn.error || !view.stream) {
    try {
      if (firstByteMs > 0) await core.scheduler.sleep(firstByteMs, ctrl.signal);
    } catch {
      delivery.release();
      rec.outcome = "aborted";
      return dropConnection(c);
    }
    if (fault?.type === "drop") {
      delivery.release();
      rec.outcome = "dropped";
      return dropConnection(c);
    }
    delivery.commit();
    if (turn.error) {
      const e = turn.error;
      const type = e.error_type ?? errorTypeFor(e.status);
      return fail(x, { status: e.status, type, message: e.message ?? `scripted ${type}`, retryAfterMs: e.retry_after_ms });
    }
    rec.status = 200;
    rec.outcome = "completed";
    return c.json(answer.json(turn.response!, ctx), 200, dialect.headers(rec.request_id));
  }
  const outcome = await writeSse({
    outgoing: c.env.outgoing,
    frames: answer.frames(turn.response!, ctx),
    errorFrame: (type, message, sequence) => dialect.streamErrorFrame(type, message, rec.request_id, sequence),
    headers: dialect.headers(rec.request_id),
    scheduler: core.scheduler,
    signal: ctrl.signal,
    firstByteMs,
    chunkMs: turn.delay?.chunk_ms ?? 0,
    cut: cutOf(fault),
  });
  if (outcome === "completed") delivery.commit();
  else delivery.release();
  rec.status = outcome === "aborted" && !c.env.outgoing.headersSent ? null : 200;
  rec.outcome = outcome;
  return RESPONSE_ALREADY_SENT;
}

function newRecord(c: Context<Env>, core: ScriptedModelCore, dialect: DialectSpec, kind: RecordedRequest["kind"]): RecordedRequest {
  return {
    request_id: randomId("req"),
    method: c.req.method,
    path: new URL(c.req.url).pathname,
    received_at: new Date(core.scheduler.now()).toISOString(),
    headers: redactHeaders(c.req.raw.headers),
    auth: null,
    dialect: dialect.name,
    kind,
    side: null,
    body: null,
    view: null,
    stream: false,
    session_key: null,
    turn: null,
    status: null,
    outcome: "pending",
    error: null,
  };
}

const NOTHING_TO_SETTLE = { commit: () => {}, release: () => {} };

async function handleModel(c: Context<Env>, core: ScriptedModelCore, dialect: DialectSpec, route: RouteInfo): Promise<Response> {
  const rec = newRecord(c, core, dialect, "turn");
  const x: Exchange = { c, core, dialect, rec };
  const ctrl = requestSignal(c, core);
  const admitted = await admit(x, (body) => dialect.parse(body, route));
  if (!admitted.ok) {
    core.requests.push(rec);
    return admitted.response;
  }
  const answer = admitted.value;
  const view = answer.view;
  rec.view = view;
  rec.stream = view.stream;
  const side = sideAnswer(core.sideRules, view);
  if (side) {
    rec.kind = "side";
    rec.side = side.label;
    core.sideRequests.push(rec);
    return deliver({ x, answer, view, delivery: { turn: { response: side.response }, ...NOTHING_TO_SETTLE }, fault: null, ctrl });
  }
  core.requests.push(rec);
  const fault = core.faults.take(view);
  const early = faultWithoutTurn(x, fault, view);
  if (early) return early;
  const selection = core.state.select(view);
  if (!selection.ok) {
    if (fault?.type === "drop") {
      rec.outcome = "dropped";
      return dropConnection(c);
    }
    return fail(x, { status: 500, type: "api_error", message: selection.message, noRetry: true });
  }
  rec.turn = selection.lease.index;
  rec.session_key = selection.lease.sessionKey;
  return deliver({ x, answer, view, delivery: selection.lease, fault, ctrl });
}

/** Token counting: an estimate from the neutral view, never a script turn. */
async function handleCount(c: Context<Env>, core: ScriptedModelCore, dialect: DialectSpec, route: RouteInfo): Promise<Response> {
  const count = dialect.count!;
  const rec = newRecord(c, core, dialect, "count_tokens");
  core.sideRequests.push(rec);
  const admitted = await admit({ c, core, dialect, rec }, (body) => count.parse(body, route));
  if (!admitted.ok) return admitted.response;
  rec.view = admitted.value;
  rec.status = 200;
  rec.outcome = "completed";
  return c.json(count.body(estimateInputTokens(admitted.value)), 200, dialect.headers(rec.request_id));
}

const GEMINI_METHODS = new Set(["generateContent", "streamGenerateContent", "countTokens"]);

/** `{model}:{method}` from Gemini's path, and what it says about streaming. */
async function handleGemini(c: Context<Env>, core: ScriptedModelCore): Promise<Response> {
  const call = c.req.param("call") ?? "";
  const at = call.lastIndexOf(":");
  const model = decodeURIComponent(call.slice(0, at));
  const method = call.slice(at + 1);
  if (at <= 0 || !GEMINI_METHODS.has(method)) {
    return gemini.errorResponse({
      status: 404,
      type: "not_found_error",
      message: `no method ${JSON.stringify(call)}`,
      requestId: randomId("req"),
    });
  }
  if (method === "countTokens") return handleCount(c, core, gemini, { model });
  const sse = c.req.query("alt") === "sse";
  const streaming = method === "streamGenerateContent";
  return handleModel(c, core, gemini, { model, stream: streaming && sse, streamAsJsonArray: streaming && !sse });
}

/** `/_script` control routes: the API key (x-api-key or Bearer) when one is configured. */
function controlRoutes(app: Hono<Env>, core: ScriptedModelCore): void {
  const error = (status: number, message: string) =>
    anthropic.errorResponse({ status, type: errorTypeFor(status), message, requestId: randomId("req") });
  const guard = (c: Context<Env>): Response | null =>
    core.authenticate(anthropic, c.req.raw.headers, new URL(c.req.url)).ok ? null : error(401, "invalid x-api-key");
  const withBody = async (c: Context<Env>, apply: (body: unknown) => Response): Promise<Response> => {
    const denied = guard(c);
    if (denied) return denied;
    const json = parseJson(await c.req.text());
    if (!json.ok) return error(400, "request body is not valid JSON");
    try {
      return apply(json.value);
    } catch (err) {
      if (err instanceof ScriptError) return error(400, err.message);
      throw err;
    }
  };
  app.get(
    "/_script",
    (c) =>
      guard(c) ??
      c.json({
        unused_turns: core.state.unused(),
        pending_faults: core.faults.size,
        requests: core.requests.length,
        side_requests: core.sideRequests.length,
      }),
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
  app.get("/_script/requests", (c) => guard(c) ?? c.json({ data: core.requests, side: core.sideRequests }));
  app.delete("/_script/requests", (c) => {
    const denied = guard(c);
    if (denied) return denied;
    core.requests.length = 0;
    core.sideRequests.length = 0;
    return c.json({ data: [], side: [] });
  });
}

export function createScriptedModelApp(core: ScriptedModelCore): Hono<Env> {
  const app = new Hono<Env>();
  const model = (dialect: DialectSpec) => (c: Context<Env>) => core.track(() => handleModel(c, core, dialect, {}));
  const count = (dialect: DialectSpec) => (c: Context<Env>) => core.track(() => handleCount(c, core, dialect, {}));
  app.post("/v1/messages", model(anthropic));
  app.post("/v1/messages/count_tokens", count(anthropic));
  // OpenAI clients are configured with a base URL that may or may not end in /v1.
  for (const prefix of ["/v1", ""]) {
    app.post(`${prefix}/responses`, model(openaiResponses));
    app.post(`${prefix}/responses/input_tokens`, count(openaiResponses));
    app.post(`${prefix}/chat/completions`, model(openaiChat));
  }
  app.post("/:version{v1beta|v1alpha|v1}/models/:call{[^/]+}", (c) => core.track(() => handleGemini(c, core)));
  // Claude Code checks that its API host answers before it starts.
  app.on(["GET", "HEAD"], "/api/hello", (c) => c.body(null, 200));
  controlRoutes(app, core);
  app.notFound((c) =>
    anthropic.errorResponse({
      status: 404,
      type: "not_found_error",
      message: `no route for ${c.req.method} ${new URL(c.req.url).pathname}`,
      requestId: randomId("req"),
    }),
  );
  app.onError(() =>
    anthropic.errorResponse({
      status: 500,
      type: "api_error",
      message: "internal error in the scripted model",
      requestId: randomId("req"),
    }),
  );
  return app;
}
