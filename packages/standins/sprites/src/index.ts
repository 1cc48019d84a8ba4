/** @openma/standin-sprites: a Fly Sprites stand-in over real local sandboxes. */
export * from "./server.ts";
export * from "./sprites.ts";
