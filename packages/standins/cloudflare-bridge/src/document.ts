/** The bridge's OpenAPI document the stand-in serves at `/v1/openapi.json`: the client package's committed copy of the shipped one. */
import { committedDocument, type OpenApiDocument } from "@openma/cloudflare-bridge-client/document";

let cached: OpenApiDocument | null = null;

export function bridgeDocument(): OpenApiDocument {
  cached ??= committedDocument();
  return cached;
}
