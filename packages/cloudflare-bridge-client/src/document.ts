/**
 * The Cloudflare Sandbox Bridge's OpenAPI document, as `@cloudflare/sandbox`
 * ships it. The bridge embeds it in its Worker bundle (the `OPENAPI_SCHEMA`
 * constant of `src/bridge/openapi.ts`, served at `GET /v1/openapi.json`);
 * that bundle imports `cloudflare:workers` and cannot load in Node, so the
 * literal is cut out of the installed file and evaluated on its own in an
 * empty context (it is plain data: strings, numbers, arrays, objects).
 *
 * `openapi.json` beside this package is the copy the client's types were
 * generated from (`npx tsx packages/cloudflare-bridge-client/src/generate.ts`);
 * a test fails when the installed package's document drifts from it.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import vm from "node:vm";

export const BRIDGE_PACKAGE = "@cloudflare/sandbox";
const REGION = "//#region src/bridge/openapi.ts";
const DECLARATION = "const OPENAPI_SCHEMA = ";

/** Where the committed copy of the document lives. */
export const DOCUMENT_PATH = join(dirname(fileURLToPath(import.meta.url)), "..", "openapi.json");

export interface OpenApiDocument {
  openapi: string;
  info: { title: string; version: string };
  paths: Record<string, Record<string, { operationId?: string } & Record<string, unknown>>>;
  components: Record<string, unknown>;
  [key: string]: unknown;
}

/** The version of the installed bridge package. */
export function installedBridgeVersion(): string {
  const require = createRequire(import.meta.url);
  const manifest = join(dirname(require.resolve(`${BRIDGE_PACKAGE}/bridge`)), "..", "..", "package.json");
  return (JSON.parse(readFileSync(manifest, "utf8")) as { version: string }).version;
}

/** The document embedded in the installed `@cloudflare/sandbox/bridge` bundle. */
export function extractBridgeDocument(): OpenApiDocument {
  const require = createRequire(import.meta.url);
  const source = readFileSync(require.resolve(`${BRIDGE_PACKAGE}/bridge`), "utf8");
  const region = source.indexOf(REGION);
  const start = region < 0 ? -1 : source.indexOf(DECLARATION, region);
  const end = start < 0 ? -1 : source.indexOf("//#endregion", start);
  if (end < 0) throw new Error(`${BRIDGE_PACKAGE}/bridge no longer embeds ${DECLARATION.trim()} in ${REGION.slice(10)}`);
  const literal = source
    .slice(start + DECLARATION.length, end)
    .trim()
    .replace(/;$/, "");
  const document = vm.runInNewContext(`(${literal})`, Object.create(null), { timeout: 1_000 }) as OpenApiDocument;
  if (typeof document?.openapi !== "string" || typeof document.paths !== "object")
    throw new Error(`${BRIDGE_PACKAGE}/bridge: the embedded value is not an OpenAPI document`);
  // Through JSON, so it is what the bridge serves at /v1/openapi.json (its `c.json`), with plain prototypes.
  return JSON.parse(JSON.stringify(document)) as OpenApiDocument;
}

/** The committed copy the client's types were generated from. */
export function committedDocument(): OpenApiDocument {
  return JSON.parse(readFileSync(DOCUMENT_PATH, "utf8")) as OpenApiDocument;
}

/** The text the generator writes (and hashes into the generated types' header). */
export function documentText(document: OpenApiDocument): string {
  return `${JSON.stringify(document, null, 2)}\n`;
}

export function documentHash(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}
