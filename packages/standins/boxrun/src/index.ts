/** @openma/standin-boxrun: a BoxRun (BoxLite REST) stand-in over real local sandboxes. */
export * from "./server.ts";
