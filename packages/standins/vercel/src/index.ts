/** @openma/standin-vercel: a Vercel Sandbox stand-in (the REST API as @vercel/sandbox uses it) over real local sandboxes. */
export * from "./sandboxes.ts";
export * from "./server.ts";
