/**
 * The runtime host of this process (ama_worker lane), from configuration:
 * `openma runtime-host` runs it alone against a server's API and database;
 * `openma serve` embeds it when OPENMA_RUNTIME_HOST_ENVIRONMENT_ID is set.
 * `OPENMA_RUNTIME_HOST_SANDBOX=auto` picks bubblewrap, then Docker, and
 * refuses to start when neither works here (never an unisolated fallback).
 */
import type { Logger } from "@openma/api";
import type { RunningRuntimeHost, RuntimeHostDriver } from "@openma/runtime-host";
import type { Storage } from "@openma/storage";
import type { RuntimeHostConfig } from "./config.ts";
import { type AvailabilityProbes, chooseSandbox, hostProbes } from "./sandbox.ts";

export async function resolveRuntimeHostDriver(
  choice: RuntimeHostConfig["sandbox"],
  probes: AvailabilityProbes,
): Promise<RuntimeHostDriver> {
  const selection = await chooseSandbox(choice, probes);
  if (selection.type === "none") throw new Error(`the runtime host cannot start: ${selection.reason}`);
  return selection.type;
}

export async function startConfiguredRuntimeHost(options: {
  config: RuntimeHostConfig;
  apiUrl: string;
  dataDir: string;
  storage: Storage;
  logger: Logger;
  probes?: AvailabilityProbes;
}): Promise<RunningRuntimeHost> {
  const { config } = options;
  const driver = await resolveRuntimeHostDriver(config.sandbox, options.probes ?? hostProbes);
  const { startRuntimeHost } = await import("@openma/runtime-host");
  const ttl = config.fenceTtlMs;
  return startRuntimeHost({
    driver,
    apiUrl: options.apiUrl,
    environmentId: config.environmentId,
    environmentKey: config.environmentKey,
    storage: options.storage,
    stateDir: `${options.dataDir}/runtime-host`,
    logger: options.logger,
    concurrency: config.concurrency,
    // One knob for operators: renew three times per TTL, count the fence lost a sixth of it early.
    timings: {
      leaseTtlMs: ttl,
      renewEveryMs: Math.floor(ttl / 3),
      safetyMarginMs: Math.floor(ttl / 6),
      renewTimeoutMs: Math.floor(ttl / 6),
    },
    workerMaxIdleMs: config.workerMaxIdleMs,
  });
}
