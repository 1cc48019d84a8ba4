/** The pieces of a cloud sandbox driver that do not depend on the vendor. */
export * from "./remote/api.ts";
export * from "./remote/deadline.ts";
export * from "./remote/driver.ts";
export * from "./remote/ownership.ts";
export * from "./remote/process.ts";
export * from "./remote/provider.ts";
export * from "./remote/spooled.ts";
export * from "./remote/tool-sandbox.ts";
