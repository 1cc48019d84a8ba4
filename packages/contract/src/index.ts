/**
 * @openma/contract: the Managed Runtime Host contract. Types and pure
 * functions only; no I/O and no `node:` imports, so every layer (host,
 * drivers, storage, harnesses) can depend on it.
 */
export * from "./capabilities.ts";
export * from "./checkpoint.ts";
export * from "./compose.ts";
export * from "./driver.ts";
export * from "./egress.ts";
export * from "./fence.ts";
export * from "./inventory.ts";
export * from "./json.ts";
export * from "./orphan.ts";
export * from "./outputs.ts";
export * from "./ownership.ts";
export * from "./plan.ts";
export * from "./process.ts";
export * from "./profile.ts";
export * from "./profile-check.ts";
export * from "./sandbox.ts";
export * from "./scope.ts";
export * from "./tool-sandbox.ts";
export * from "./workspace.ts";
