/**
 * The client's types are only as good as the document they came from: the
 * committed copy must be exactly what the installed `@cloudflare/sandbox`
 * embeds (an upgrade that changes the API fails here until
 * `src/generate.ts` is run), and `schema.ts` must have been generated from
 * that copy (its header carries the copy's sha256).
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { committedDocument, documentHash, documentText, extractBridgeDocument, installedBridgeVersion } from "./document.ts";
import { SCHEMA_PATH, schemaHeader } from "./generate.ts";

describe("the bridge's OpenAPI document", () => {
  it("is the one the installed @cloudflare/sandbox embeds", () => {
    const shipped = extractBridgeDocument();
    expect(shipped.info.title).toBe("Cloudflare Sandbox Service API");
    expect(Object.keys(shipped.paths)).toContain("/v1/sandbox/{id}/exec");
    expect(shipped).toEqual(committedDocument());
  });

  it("is the one schema.ts was generated from", () => {
    const header = readFileSync(SCHEMA_PATH, "utf8").split("\n")[0];
    expect(header).toBe(schemaHeader(documentHash(documentText(committedDocument())), installedBridgeVersion()));
  });
});
