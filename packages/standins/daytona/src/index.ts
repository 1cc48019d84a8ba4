/** @openma/standin-daytona: a Daytona stand-in (REST API + toolbox) over real local sandboxes. */
export * from "./sandboxes.ts";
export * from "./server.ts";
