export * from "./outbox.ts";
export * from "./session-events.ts";
export * from "./signing.ts";
export * from "./targets.ts";
export * from "./worker.ts";
