import { fileURLToPath } from "node:url";

export { type ModelGateway, type ModelGatewayOptions, type ModelKeyStyle, openModelGateway } from "./gateway.ts";

/** Host directory holding `tcp-to-unix.mjs`, to bind read-only into a sandbox. */
export const GATEWAY_FORWARDER_DIR = fileURLToPath(new URL("../bin/", import.meta.url)).replace(/\/$/, "");
export const GATEWAY_FORWARDER_SCRIPT = "tcp-to-unix.mjs";
