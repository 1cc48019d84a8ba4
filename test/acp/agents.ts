/**
 * The real agents' setups (packages/acp/src/agent-setups.ts) for the e2e
 * scenarios and bench/acp-agents.ts, plus where this checkout's Node 24 is.
 */
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

export * from "@openma/acp/agent-setups";

/** Host directory of our Node 24 (`node-linux-<arch>`), for releases that need a newer Node than the sandbox's. */
export const modernNodeHostDir = (): string =>
  join(dirname(createRequire(import.meta.url).resolve(`node-linux-${process.arch}/package.json`)), "bin");
