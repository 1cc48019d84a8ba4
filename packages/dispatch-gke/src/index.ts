/** @openma/dispatch-gke: binds a self-hosted environment's Work to warm agent-sandbox pods (poll_unacked_then_dispatch). */
export * from "./cluster.ts";
export * from "./dispatcher.ts";
