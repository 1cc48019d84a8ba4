/** @openma/remote-bindings: workspace and output ports for runtimes a host directory cannot be bound into. */
export * from "./ports.ts";
export * from "./tar.ts";
export * from "./transfer.ts";
