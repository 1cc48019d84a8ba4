import { mkdtemp, rm } from "node:fs/promises";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { afterEach, describe, expect, it } from "vitest";
import { type ModelGateway, openModelGateway } from "./gateway.ts";

let model: ScriptedModel | null = null;
let gateway: ModelGateway | null = null;
let dir = "";
afterEach(async () => {
  await gateway?.close();
  await model?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

function post(socketPath: string, path: string, headers: Record<string, string>, body: unknown) {
  return new Promise<{ status: number; text: string }>((resolve, reject) => {
    const req = request({ socketPath, path, method: "POST", headers: { "content-type": "application/json", ...headers } }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c) => {
        text += c;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, text }));
    });
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}

describe("model gateway", () => {
  it("replaces whatever key the agent holds with the real one", async () => {
    model = await startScriptedModel({ apiKey: "sk-real-key", script: [{ response: "hello" }, { response: "again" }] });
    dir = await mkdtemp(join(tmpdir(), "openma-gw-"));
    gateway = await openModelGateway({
      socketPath: join(dir, "model.sock"),
      upstream: model.url,
      apiKey: () => "sk-real-key",
      keyStyle: "bearer",
    });
    const body = { model: "m", input: "hi" };
    const res = await post(gateway.socketPath, "/v1/responses?key=stolen", { authorization: "Bearer openma-placeholder" }, body);
    expect(res.status).toBe(200);
    expect(res.text).toContain("hello");
    const seen = model.requests.at(-1);
    // The scripted model enforces apiKey: a 200 means the real key arrived, as a Bearer token.
    expect(seen?.auth).toBe("bearer");
    expect(JSON.stringify(seen?.headers)).not.toContain("placeholder");
    expect(seen?.path).toBe("/v1/responses");
    // Without the gateway the placeholder is refused: the key really comes from the host.
    const direct = await fetch(`${model.url}/v1/responses`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: "Bearer openma-placeholder" },
      body: JSON.stringify(body),
    });
    expect(direct.status).toBe(401);
  });

  it("answers 502 in the API's error shape when the upstream is down", async () => {
    dir = await mkdtemp(join(tmpdir(), "openma-gw-"));
    gateway = await openModelGateway({
      socketPath: join(dir, "m.sock"),
      upstream: "http://127.0.0.1:1",
      apiKey: () => "k",
      keyStyle: "x-api-key",
    });
    const res = await post(gateway.socketPath, "/v1/messages", {}, {});
    expect(res.status).toBe(502);
    expect(JSON.parse(res.text).error.type).toBe("api_error");
  });
});
