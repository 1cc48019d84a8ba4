export * from "./blobs.ts";
export * from "./bus.ts";
export * from "./clock.ts";
export * from "./ids.ts";
export * from "./migrations.ts";
export type * from "./schema.ts";
export * from "./secret-box.ts";
export * from "./storage.ts";
export * from "./vault-secrets.ts";
