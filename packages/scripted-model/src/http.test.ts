/**
 * Wire details the SDK hides (SSE framing, headers, error envelopes) and the
 * `/_script` control routes, over raw HTTP.
 */
import { request as httpRequest } from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { type ScriptedModel, type ScriptInput, startScriptedModel } from "./index.ts";

const KEY = "sk-http-test";
let model: ScriptedModel | null = null;

afterEach(async () => {
  await model?.close();
  model = null;
});

async function start(script: ScriptInput = []): Promise<ScriptedModel> {
  model = await startScriptedModel({ script, apiKey: KEY });
  return model;
}

const body = (extra: Record<string, unknown> = {}) => ({
  model: "claude-test-1",
  max_tokens: 32,
  messages: [{ role: "user", content: "hi" }],
  ...extra,
});

function post(m: ScriptedModel, path: string, payload: unknown, headers: Record<string, string> = { "x-api-key": KEY }): Promise<Response> {
  return fetch(`${m.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: typeof payload === "string" ? payload : JSON.stringify(payload),
  });
}

interface Frame {
  event: string;
  data: Record<string, unknown>;
}

function parseSse(text: string): Frame[] {
  return text
    .split("\n\n")
    .filter((f) => f.trim())
    .map((frame) => {
      const lines = frame.split("\n");
      const event = lines.find((l) => l.startsWith("event: "))?.slice(7) ?? "";
      const data = JSON.parse(lines.find((l) => l.startsWith("data: "))?.slice(6) ?? "null");
      return { event, data };
    });
}

async function expectApiError(res: Response, status: number, type: string, message?: RegExp) {
  expect(res.status).toBe(status);
  const json = (await res.json()) as { type: string; error: { type: string; message: string }; request_id: string };
  expect(json.type).toBe("error");
  expect(json.error.type).toBe(type);
  expect(json.request_id).toMatch(/^req_/);
  expect(res.headers.get("request-id")).toBe(json.request_id);
  if (message) expect(json.error.message).toMatch(message);
}

describe("wire format", () => {
  it("streams SSE with an event line per message, in API order", async () => {
    const m = await start([
      {
        response: {
          content: [{ type: "tool_use", name: "glob", input: { pattern: "**/*.ts" } }],
          usage: { input_tokens: 9, output_tokens: 4 },
        },
      },
    ]);
    const res = await post(m, "/v1/messages", body({ stream: true }));
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    expect(res.headers.get("request-id")).toMatch(/^req_/);
    const frames = parseSse(await res.text());
    for (const f of frames) expect(f.event).toBe(f.data.type);
    expect(frames.map((f) => f.event).slice(0, 3)).toEqual(["message_start", "ping", "content_block_start"]);
    expect(frames.slice(-2).map((f) => f.event)).toEqual(["message_delta", "message_stop"]);
    const start0 = frames[0]!.data.message as Record<string, unknown>;
    expect(start0).toMatchObject({ type: "message", role: "assistant", content: [], stop_reason: null, usage: { input_tokens: 9 } });
    expect(frames[2]!.data.content_block).toMatchObject({ type: "tool_use", name: "glob", input: {} });
    const deltas = frames
      .filter((f) => f.event === "content_block_delta")
      .map((f) => f.data.delta as { type: string; partial_json: string });
    expect(deltas.every((d) => d.type === "input_json_delta")).toBe(true);
    expect(JSON.parse(deltas.map((d) => d.partial_json).join(""))).toEqual({ pattern: "**/*.ts" });
    expect(frames.at(-2)!.data).toMatchObject({
      delta: { stop_reason: "tool_use", stop_sequence: null },
      usage: { output_tokens: 4, input_tokens: 9 },
    });
  });

  it("answers JSON with a request-id header and accepts x-api-key", async () => {
    const m = await start([{ response: "plain" }]);
    const res = await post(m, "/v1/messages", body());
    expect(res.status).toBe(200);
    expect(res.headers.get("request-id")).toMatch(/^req_/);
    expect(await res.json()).toMatchObject({ type: "message", content: [{ type: "text", text: "plain" }] });
    expect(m.requests[0]!.auth).toBe("x-api-key");
  });

  it("answers errors in the API envelope", async () => {
    const m = await start([{ response: "x" }]);
    await expectApiError(await post(m, "/v1/messages", body(), {}), 401, "authentication_error");
    await expectApiError(await post(m, "/v1/messages", "{not json"), 400, "invalid_request_error", /not valid JSON/);
    await expectApiError(
      await post(m, "/v1/messages", { max_tokens: 5, messages: [{ role: "user", content: "x" }] }),
      400,
      "invalid_request_error",
      /^model: Field required/,
    );
    await expectApiError(await post(m, "/v1/messages", body({ max_tokens: 1.5 })), 400, "invalid_request_error", /^max_tokens:/);
    await expectApiError(await post(m, "/v1/nothing", {}), 404, "not_found_error");
    expect(m.requests.map((r) => r.status)).toEqual([401, 400, 400, 400]);
    expect(m.unusedTurns()).toHaveLength(1); // rejected requests use no turn
  });

  it("refuses a body over the API's size limit before reading it", async () => {
    const m = await start();
    const res = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpRequest(`${m.url}/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", "content-length": String(32 * 1024 * 1024 + 1), "x-api-key": KEY },
      });
      req.on("response", (r) => {
        let text = "";
        r.on("data", (c: Buffer) => {
          text += c.toString();
        });
        r.on("end", () => resolve({ status: r.statusCode ?? 0, body: text }));
      });
      req.on("error", reject);
      req.write("{");
    });
    expect(res.status).toBe(413);
    expect(JSON.parse(res.body)).toMatchObject({ error: { type: "request_too_large" } });
  });
});

describe("/_script control routes", () => {
  it("loads a script, queues faults and serves the request log", async () => {
    const m = await start();
    const loaded = await post(m, "/_script", [{ label: "hello", response: "from http" }]);
    expect(await loaded.json()).toEqual({ loaded: true, turns: 1 });
    const status = await fetch(`${m.url}/_script`, { headers: { "x-api-key": KEY } });
    expect(await status.json()).toEqual({
      unused_turns: [{ session_key: null, index: 0, label: "hello", remaining: 1 }],
      pending_faults: 0,
      requests: 0,
      side_requests: 0,
    });
    expect(await (await post(m, "/_script/inject", [{ type: "error", status: 429 }, { type: "drop" }])).json()).toEqual({
      pending_faults: 2,
    });
    await expectApiError(await post(m, "/v1/messages", body()), 429, "rate_limit_error");
    await expect(post(m, "/v1/messages", body())).rejects.toThrow(); // the drop: the connection closes with no answer
    const ok = await post(m, "/v1/messages", body());
    expect(await ok.json()).toMatchObject({ content: [{ text: "from http" }] });
    const log = (await (await fetch(`${m.url}/_script/requests`, { headers: { "x-api-key": KEY } })).json()) as {
      data: { outcome: string }[];
    };
    expect(log.data.map((r) => r.outcome)).toEqual(["fault", "dropped", "completed"]);
    const cleared = await fetch(`${m.url}/_script/requests`, { method: "DELETE", headers: { "x-api-key": KEY } });
    expect(await cleared.json()).toEqual({ data: [], side: [] });
    expect(m.requests).toHaveLength(0);
  });

  it("rejects a bad script or fault naming the field, and keeps the old script", async () => {
    const m = await start([{ response: "original" }]);
    await expectApiError(
      await post(m, "/_script", { turns: [{ response: { content: [{ type: "text" }] } }] }),
      400,
      "invalid_request_error",
      /turns\.0\.response\.content\.0\.text/,
    );
    await expectApiError(await post(m, "/_script/inject", { type: "error", status: 700 }), 400, "invalid_request_error", /status/);
    await expectApiError(await post(m, "/_script/inject", [{ type: "drop" }, { type: "nope" }]), 400, "invalid_request_error", /type/);
    expect(m.unusedTurns()).toEqual([{ session_key: null, index: 0, label: null, remaining: 1 }]);
    const res = await post(m, "/v1/messages", body());
    expect(await res.json()).toMatchObject({ content: [{ text: "original" }] }); // the half-valid fault list queued nothing
  });

  it("requires the configured key", async () => {
    const m = await start();
    await expectApiError(await post(m, "/_script", [], {}), 401, "authentication_error");
    await expectApiError(await fetch(`${m.url}/_script/requests`), 401, "authentication_error");
    await expectApiError(
      await post(m, "/_script/inject", { type: "drop" }, { authorization: "Bearer wrong" }),
      401,
      "authentication_error",
    );
  });
});
