/** @openma/standin-e2b: an E2B stand-in (control plane + envd) over real local sandboxes. */
export * from "./connect.ts";
export * from "./sandboxes.ts";
export * from "./server.ts";
