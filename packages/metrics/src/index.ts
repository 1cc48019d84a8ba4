export * from "./catalogue.ts";
export * from "./port.ts";
