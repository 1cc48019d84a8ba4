export * from "./app.ts";
export * from "./auth.ts";
export * from "./context.ts";
export * from "./errors.ts";
export * from "./event-log.ts";
export * from "./previews.ts";
export { type RunResult, type RunTrigger, runDeployment } from "./routes/deployments.ts";
export * from "./session-activity.ts";
export * from "./transfers.ts";
