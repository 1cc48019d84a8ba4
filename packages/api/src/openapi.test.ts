/**
 * The OpenAPI document against the router it describes, and against an
 * OpenAPI linter (Redocly's `recommended` rules, errors fail the build).
 */

import { newId } from "@openma/storage";
import { createConfig, lintFromString } from "@redocly/openapi-core";
import { describe, expect, it } from "vitest";
import { createApp } from "./app.ts";
import type { ApiDeps } from "./context.ts";
import { silentLogger } from "./context.ts";
import { OPERATIONS, openApiDocument, TAG_NAMES } from "./openapi.ts";

/** Only what the request-id middleware touches: the openapi route needs no storage. */
const deps = { ids: newId, logger: silentLogger } as Partial<ApiDeps> as ApiDeps;

/** `GET /v1/x/{id}` for every route the router serves (middleware and service routes left out). */
function routerOperations(): string[] {
  const seen = new Set<string>();
  for (const r of createApp(deps).routes) {
    if (r.method === "ALL" || r.path === "/health" || r.path === "/v1/openapi.json") continue;
    seen.add(`${r.method} ${r.path.replace(/:(\w+)/g, "{$1}")}`);
  }
  return [...seen].sort();
}

describe("the OpenAPI document", () => {
  it("describes every route the router serves, and nothing else", () => {
    const documented = OPERATIONS.map((o) => `${o.method.toUpperCase()} ${o.path}`).sort();
    expect(documented).toEqual(routerOperations());
    expect(new Set(OPERATIONS.map((o) => o.operationId)).size).toBe(OPERATIONS.length);
  });

  it("is served at /v1/openapi.json without credentials, as OpenAPI 3.1", async () => {
    const res = await createApp(deps, { version: "9.9.9" }).request("/v1/openapi.json");
    expect(res.status).toBe(200);
    const doc = (await res.json()) as { openapi: string; info: { version: string }; paths: Record<string, Record<string, unknown>> };
    expect(doc.openapi).toBe("3.1.0");
    expect(doc.info.version).toBe("9.9.9");
    expect(Object.keys(doc.paths)).toContain("/v1/sessions/{session_id}/events");
    // Request schemas are the routes' own zod schemas: the create-session body requires what the route requires.
    const create = doc.paths["/v1/sessions"]?.post as {
      requestBody: { content: { "application/json": { schema: { required?: string[]; properties: Record<string, unknown> } } } };
    };
    const schema = create.requestBody.content["application/json"].schema;
    expect(schema.required?.sort()).toEqual(["agent", "environment_id"]);
    expect(Object.keys(schema.properties)).toContain("budget");
  });

  it("passes the OpenAPI linter without errors", async () => {
    const config = await createConfig({ extends: ["recommended"] });
    const problems = await lintFromString({ source: JSON.stringify(openApiDocument("1.0.0")), absoluteRef: "openapi.json", config });
    // The one accepted warning: no license is declared (the project has not chosen one).
    const found = problems
      .filter((p) => p.ruleId !== "info-license")
      .map((p) => `${p.severity} ${p.ruleId}: ${p.message} at ${p.location[0]?.pointer}`);
    expect(found).toEqual([]);
    expect(Object.keys(TAG_NAMES).sort()).toEqual([...new Set(OPERATIONS.map((o) => o.tag))].sort());
  });
});
