/**
 * @openma/supervisor: the `openma_supervised` lane. The
 * openma-harness-supervisor-v1 wire protocol (protocol.ts), the host-side
 * HarnessRunner that speaks it over a SandboxProcessPort (runner.ts), and a
 * reference in-sandbox supervisor in plain JavaScript (bin/openma-supervisor.mjs).
 */
export type { ChannelEvent, SupervisorLogEntry } from "./channel.ts";
export type { SandboxProbe } from "./loss.ts";
export * from "./protocol.ts";
export * from "./reference.ts";
export * from "./runner.ts";
export { type DrainResult, describeEnd, type SupervisedDriver } from "./session.ts";
