export * from "./lease-store.ts";
export * from "./placement.ts";
export * from "./queue.ts";
export * from "./runner.ts";
export * from "./watch.ts";
export * from "./worker.ts";
