/** @openma/standin-cloudflare-bridge: a Cloudflare Sandbox Bridge stand-in (its /v1 REST and SSE routes) over real local sandboxes. */
export * from "./server.ts";
export * from "./wire.ts";
