export * from "./cron.ts";
export * from "./scheduler.ts";
