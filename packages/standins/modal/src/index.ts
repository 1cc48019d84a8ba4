/** @openma/standin-modal: a Modal stand-in (ModalClient + TaskCommandRouter over h2c gRPC) over real local sandboxes. */
export * from "./definitions.ts";
export * from "./execs.ts";
export * from "./server.ts";
export * from "./table.ts";
