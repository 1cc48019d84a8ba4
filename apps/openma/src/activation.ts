/**
 * Activation in `openma serve` (acquire_then_session_poll, docs/activation.md):
 * the Work of the environments named by OPENMA_ACTIVATION_ENVIRONMENTS gets
 * one AWS Lambda MicroVM each, launched through the official client (region,
 * credentials and endpoint resolved the usual AWS way). Several servers may
 * share one database: intents are inserted once per Work and claimed under a
 * lease, so each Work is launched once.
 */
import { randomBytes } from "node:crypto";
import type { Logger } from "@openma/api";
import type { Storage } from "@openma/storage";
import { systemClock } from "@openma/storage";
import { z } from "zod";

export interface ActivationConfig {
  environmentIds: string[];
  /** The MicroVM image carrying the in-VM worker and the environment key. */
  imageIdentifier: string;
  /** The control plane URL the VM polls; default OPENMA_PUBLIC_URL, else this server's listener. */
  apiUrl: string | undefined;
  leaseTtlMs: number;
  intervalMs: number;
  /** Forwarded to the in-VM worker (OPENMA_WORKER_MAX_IDLE_MS). */
  workerMaxIdleMs: number | undefined;
}

/** The OPENMA_ACTIVATION_* part of the server's configuration schema (config.ts). */
export const activationEnv = {
  OPENMA_ACTIVATION_ENVIRONMENTS: z
    .string()
    .max(8192)
    .regex(/^[A-Za-z0-9_-]{1,128}(,[A-Za-z0-9_-]{1,128})*$/, "must be comma-separated environment ids")
    .optional(),
  OPENMA_ACTIVATION_IMAGE: z.string().min(1).max(512).optional(),
  OPENMA_ACTIVATION_API_URL: z.url({ protocol: /^https?$/ }).optional(),
  OPENMA_ACTIVATION_LEASE_MS: z.coerce.number().int().min(1000).max(3_600_000).default(30_000),
  OPENMA_ACTIVATION_INTERVAL_MS: z.coerce.number().int().min(100).max(600_000).default(1000),
};

export function activationOf(
  e: {
    OPENMA_ACTIVATION_ENVIRONMENTS?: string | undefined;
    OPENMA_ACTIVATION_IMAGE?: string | undefined;
    OPENMA_ACTIVATION_API_URL?: string | undefined;
    OPENMA_ACTIVATION_LEASE_MS: number;
    OPENMA_ACTIVATION_INTERVAL_MS: number;
  },
  workerMaxIdleMs: number | undefined,
): ActivationConfig | undefined {
  if (e.OPENMA_ACTIVATION_ENVIRONMENTS === undefined) return undefined;
  if (e.OPENMA_ACTIVATION_IMAGE === undefined) {
    throw new Error("invalid configuration: OPENMA_ACTIVATION_ENVIRONMENTS needs OPENMA_ACTIVATION_IMAGE (the MicroVM image)");
  }
  return {
    environmentIds: [...new Set(e.OPENMA_ACTIVATION_ENVIRONMENTS.split(","))],
    imageIdentifier: e.OPENMA_ACTIVATION_IMAGE,
    apiUrl: e.OPENMA_ACTIVATION_API_URL,
    leaseTtlMs: e.OPENMA_ACTIVATION_LEASE_MS,
    intervalMs: e.OPENMA_ACTIVATION_INTERVAL_MS,
    workerMaxIdleMs,
  };
}

export interface RunningActivation {
  stop(): Promise<void>;
}

/** Starts the activation lane; `apiUrl` is used when the configuration names none. */
export async function startActivation(input: {
  config: ActivationConfig;
  storage: Storage;
  apiUrl: string;
  logger: Logger;
}): Promise<RunningActivation> {
  const { config, storage, logger } = input;
  // The AWS client loads only where activation is configured.
  const { ActivationWorker, AwsMicrovmLauncherPort, SqlActivationIntentStore, WorkActivation } = await import("@openma/activation");
  const launcher = new AwsMicrovmLauncherPort({
    imageIdentifier: config.imageIdentifier,
    apiUrl: config.apiUrl ?? input.apiUrl,
    ...(config.workerMaxIdleMs === undefined ? {} : { workerMaxIdleMs: config.workerMaxIdleMs }),
  });
  const store = new SqlActivationIntentStore(storage.db, { clock: systemClock });
  const worker = new ActivationWorker({
    store,
    launcher,
    ownerId: `serve-pid${process.pid}-${randomBytes(4).toString("hex")}`,
    leaseTtlMs: config.leaseTtlMs,
  });
  const lane = new WorkActivation({ db: storage.db, store, worker, environmentIds: config.environmentIds });
  logger.info({ environments: config.environmentIds, image: config.imageIdentifier }, "activation: one MicroVM per Work");
  const running = lane.run(config.intervalMs, {
    // Ids and errors only: an outcome carries no secret.
    outcome: (outcome) => logger.info({ ...outcome }, `activation ${outcome.type}`),
    error: (err) => logger.warn({ err: err instanceof Error ? err.message : String(err) }, "activation pass failed"),
  });
  return {
    async stop() {
      lane.stop();
      await running;
      launcher.close();
    },
  };
}
