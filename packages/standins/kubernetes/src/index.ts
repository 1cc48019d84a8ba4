/** @openma/standin-kubernetes: a Kubernetes apiserver stand-in for the agent-sandbox CRDs, with an emulated controller over real local sandboxes. */
export * from "./controller.ts";
export * from "./resources.ts";
export * from "./server.ts";
export * from "./status.ts";
export * from "./store.ts";
