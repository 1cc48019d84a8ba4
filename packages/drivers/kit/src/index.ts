/** Small pieces every sandbox driver needs, written once. */

export * from "./chown-tree.ts";
export * from "./sandbox-socket.ts";
export * from "./shell-files.ts";
export * from "./tail-buffer.ts";
