/** Small pieces every sandbox driver needs, written once. */
export * from "./tail-buffer.ts";
