/**
 * The runtime host of this process, from configuration (the ama_worker lane,
 * or with OPENMA_RUNTIME_HOST_HARNESS=acp the ACP harness of the
 * openma_supervised lane, ADR 0034):
 * `openma runtime-host` runs it alone against a server's API and database;
 * `openma serve` embeds it when OPENMA_RUNTIME_HOST_ENVIRONMENT_ID is set.
 * `OPENMA_RUNTIME_HOST_SANDBOX=auto` picks bubblewrap, then Docker, and
 * refuses to start when neither works here (never an unisolated fallback);
 * a cloud driver's name (or `OPENMA_SANDBOX=<cloud driver>`) runs the
 * sessions in that provider's sandboxes instead (remote-sandboxes.ts).
 */
import type { Logger } from "@openma/api";
import type { RuntimeRunResult } from "@openma/host";
import type { OpenmaMetrics } from "@openma/metrics";
import type { RemoteRuntimeHostDriver, RunningRuntimeHost, RuntimeHostDriver, WorkTicket } from "@openma/runtime-host";
import { DEFAULT_TRANSFER_BUFFER_BYTES, newId, type Storage, systemClock } from "@openma/storage";
import type { RuntimeHostConfig } from "./config.ts";
import { runtimeHostMetrics } from "./metrics.ts";
import { publishedOutputs } from "./published-outputs.ts";
import { isRemoteSandbox, type RemoteSandboxName, remoteRuntimeHostDriver } from "./remote-sandboxes.ts";
import { type AvailabilityProbes, chooseSandbox, hostProbes } from "./sandbox.ts";

export async function resolveRuntimeHostDriver(
  choice: Exclude<RuntimeHostConfig["sandbox"], RemoteSandboxName>,
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
  /** Fence renewals and losses, runs, checkpoint and restore durations and bytes (metrics.ts); absent: none. */
  metrics?: OpenmaMetrics | undefined;
}): Promise<RunningRuntimeHost> {
  const { config } = options;
  const metered = options.metrics ? runtimeHostMetrics(options.storage, options.metrics) : null;
  // A cloud runtime reaches the control plane over the network: its public URL, else the listener itself.
  const driver: RuntimeHostDriver | RemoteRuntimeHostDriver = isRemoteSandbox(config.sandbox)
    ? remoteRuntimeHostDriver(config.sandbox, process.env, config.publicUrl ?? options.apiUrl)
    : await resolveRuntimeHostDriver(config.sandbox, options.probes ?? hostProbes);
  const { startRuntimeHost } = await import("@openma/runtime-host");
  const ttl = config.fenceTtlMs;
  // A run that published outputs: they become the session's Files (published-outputs.ts, ADR 0023).
  const outputs = publishedOutputs({
    storage: options.storage,
    ids: newId,
    clock: systemClock,
    logger: options.logger,
    fallbackStagingDir: `${options.dataDir}/uploads`,
    bufferBytes: DEFAULT_TRANSFER_BUFFER_BYTES,
  });
  const onResult = (ticket: WorkTicket, result: RuntimeRunResult) => {
    metered?.onResult(ticket, result);
    if (result.type !== "completed" || !result.publication?.outputs) return;
    outputs.importFor({ environmentId: ticket.environmentId, sessionId: ticket.sessionId }).catch((err: unknown) => {
      options.logger.warn(
        { session_id: ticket.sessionId, err: err instanceof Error ? err.message : String(err) },
        "importing published outputs failed",
      );
    });
  };
  return startRuntimeHost({
    driver,
    apiUrl: options.apiUrl,
    environmentId: config.environmentId,
    environmentKey: config.environmentKey,
    storage: metered?.storage ?? options.storage,
    ...(metered ? { instrument: metered.instrument } : {}),
    onResult,
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
    ...(config.warmPool ? { warmPool: config.warmPool } : {}),
    ...(config.harness.type === "acp" ? { harness: { type: "acp", model: config.harness.model } } : {}),
  });
}
