/** @openma/standin-superserve: a Superserve stand-in (control plane and TLS data plane as @superserve/sdk uses them) over real local sandboxes. */
export * from "./sandboxes.ts";
export * from "./server.ts";
