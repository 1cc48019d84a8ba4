/**
 * @openma/host: the Managed Runtime Host. The fenced run transaction
 * (`ManagedRuntimeHost`), the orphan reaper and candidate GC, and thin
 * adapters from `@openma/persistence` and `@openma/storage` to the contract
 * ports. Test fakes live under `@openma/host/testing/*`.
 */
export * from "./adapters/durable-mount-outputs.ts";
export * from "./adapters/durable-mount-workspace.ts";
export * from "./adapters/fs-outputs.ts";
export * from "./adapters/fs-workspace.ts";
export * from "./adapters/sql.ts";
export * from "./every.ts";
export * from "./fence-lease.ts";
export * from "./gc.ts";
export * from "./host.ts";
export * from "./reaper.ts";
export * from "./sandbox-owner.ts";
export * from "./sandbox-reaper.ts";
export * from "./timings.ts";
export * from "./types.ts";
