/**
 * The stand-in against the bridge's own OpenAPI document (the copy the
 * client package pins to the installed `@cloudflare/sandbox`): every
 * response it gives the typed client, success or refusal, is validated by
 * openapi-backend against the operation and status the document declares
 * (JSON bodies by schema; streams and bytes by their declared media type),
 * and every request the client sent is a documented route and method with
 * the Bearer credential. A real local container is behind each sandbox.
 */
import { type BridgeClient, BridgeError, createBridgeClient } from "@openma/cloudflare-bridge-client";
import { committedDocument } from "@openma/cloudflare-bridge-client/document";
import { OpenAPIBackend } from "openapi-backend";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type CloudflareBridgeStandIn, startCloudflareBridgeStandIn } from "./server.ts";

const document = committedDocument();
const signal = () => AbortSignal.timeout(60_000);

/** The documented operation a request path and method are, or null. */
function operationOf(method: string, path: string): { operationId: string; template: string } | null {
  for (const [template, operations] of Object.entries(document.paths)) {
    const pattern = new RegExp(`^${template.replace(/\{path\}/g, ".+").replace(/\{[^}]+\}/g, "[^/]+")}$`);
    const operation = operations[method.toLowerCase()];
    if (pattern.test(path) && operation?.operationId) return { operationId: operation.operationId, template };
  }
  return null;
}

describe("the cloudflare-bridge stand-in against the bridge's OpenAPI document", () => {
  let standIn: CloudflareBridgeStandIn;
  let client: BridgeClient;
  // Quick: the library checks a definition against the OpenAPI 3.0 meta-schema, which a 3.1 document
  // (a `$ref` with a sibling `description`) fails; its response validation is what is used here.
  const api = new OpenAPIBackend({ definition: document as never, quick: true, strict: true, validate: true });
  /** Every response the client got: method, path, status, media type and (for JSON) its body. */
  const seen: { method: string; path: string; status: number; type: string; body: unknown }[] = [];

  const recordingFetch: typeof fetch = async (input, init) => {
    const request = new Request(input, init);
    const response = await fetch(request);
    const type = response.headers.get("content-type") ?? "";
    const path = new URL(request.url).pathname;
    const body = type.includes("application/json") ? await response.clone().json() : null;
    seen.push({ method: request.method, path, status: response.status, type: type.split(";")[0] ?? "", body });
    return response;
  };

  beforeAll(async () => {
    await api.init();
    standIn = await startCloudflareBridgeStandIn();
    client = createBridgeClient({ url: standIn.url, apiKey: standIn.env.SANDBOX_API_KEY as string, fetch: recordingFetch });
  });
  afterAll(async () => {
    await standIn?.close();
  });

  it("answers the client's calls as the document declares them", async () => {
    const id = await client.create(signal());
    expect(id).toMatch(/^[a-z2-7]{26}$/);
    const out: string[] = [];
    const end = await client.exec(
      id,
      { argv: ["sh", "-c", "printf 'a b\\n'; echo err >&2; exit 4"], cwd: "/workspace" },
      {
        signal: signal(),
        onOutput: (stream, chunk) => out.push(`${stream}:${Buffer.from(chunk).toString("utf8")}`),
      },
    );
    expect(end).toEqual({ type: "exit", exitCode: 4 });
    expect(out.join("")).toContain("stdout:a b\n");
    expect(out.join("")).toContain("stderr:err\n");
    await client.writeFile(id, "/workspace/sub dir/f%1.bin", new Uint8Array([0, 255, 10]), signal());
    expect([...((await client.readFile(id, "/workspace/sub dir/f%1.bin", signal())) ?? [])]).toEqual([0, 255, 10]);
    expect(await client.readFile(id, "/workspace/absent", signal())).toBeNull();
    await expect(client.readFile(id, "/workspace/../etc/passwd", signal())).rejects.toMatchObject({ status: 403 });
    await expect(client.exec(id, { argv: ["true"], cwd: "/etc" }, { signal: signal(), onOutput: () => {} })).rejects.toBeInstanceOf(
      BridgeError,
    );
    expect(await client.running(id, signal())).toBe(true);
    const tar = await client.persist(id, signal());
    await client.hydrate(id, tar, signal());
    await client.destroy(id, signal());
    await client.destroy(id, signal());
    const stranger = createBridgeClient({ url: standIn.url, apiKey: "wrong", fetch: recordingFetch });
    await expect(stranger.create(signal())).rejects.toMatchObject({ status: 401, code: "unauthorized" });
    expect(standIn.live()).toBe(0);
  }, 120_000);

  it("gave only documented responses to documented requests", () => {
    // The validator is able to say no: a create without its id, an error without its code.
    expect(api.validateResponse({ sandbox: "x" }, "createSandbox", 200).errors?.length).toBeGreaterThan(0);
    expect(api.validateResponse({ error: "x" }, "readFile", 404).errors?.length).toBeGreaterThan(0);
    expect(seen.length).toBeGreaterThan(10);
    for (const response of seen) {
      const operation = operationOf(response.method, response.path);
      expect(operation, `${response.method} ${response.path}`).not.toBeNull();
      const operations = document.paths[operation!.template] as Record<string, { responses: Record<string, unknown> }>;
      const declared = (operations[response.method.toLowerCase()] as { responses: Record<string, unknown> }).responses;
      expect(Object.keys(declared), `${operation!.operationId} ${response.status}`).toContain(String(response.status));
      if (response.status === 204) continue;
      if (response.type === "application/json") {
        const valid = api.validateResponse(response.body, operation!.operationId, response.status);
        expect(valid.errors ?? [], `${operation!.operationId} ${response.status} ${JSON.stringify(response.body)}`).toEqual([]);
      } else {
        const declaredTypes = Object.keys(
          ((declared[String(response.status)] as { content?: Record<string, unknown> }).content ?? {}) as Record<string, unknown>,
        );
        expect(declaredTypes, `${operation!.operationId} ${response.status}`).toContain(response.type);
      }
    }
  });

  it("saw every request with the Bearer credential", () => {
    const recorded = standIn.requests.filter((r) => !r.path.startsWith("/_standin"));
    expect(recorded.length).toBeGreaterThan(10);
    for (const request of recorded) expect(request.authHeader).toBe("authorization");
    expect(recorded.filter((r) => !r.authorized).map((r) => `${r.method} ${r.path}`)).toEqual(["POST /v1/sandbox"]);
  });
});
