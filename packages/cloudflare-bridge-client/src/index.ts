/** @openma/cloudflare-bridge-client: the official Cloudflare Sandbox Bridge API from Node, typed by its shipped OpenAPI document. */
export * from "./client.ts";
export type { components, operations, paths } from "./schema.ts";
