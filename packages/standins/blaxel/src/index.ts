/** @openma/standin-blaxel: a Blaxel stand-in (control plane + sandbox-api) over real local sandboxes. */
export * from "./multipart.ts";
export * from "./processes.ts";
export * from "./sandboxes.ts";
export * from "./server.ts";
