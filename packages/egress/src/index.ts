export * from "./ca.ts";
export * from "./gateway.ts";
export * from "./netns.ts";
export * from "./policy.ts";
export * from "./port.ts";
