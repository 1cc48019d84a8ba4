/** Small pieces every sandbox driver needs, written once. */
export * from "./shell-files.ts";
export * from "./tail-buffer.ts";
