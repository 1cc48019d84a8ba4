/**
 * The server's automation loops: the deployments' cron scheduler and the
 * webhook delivery worker. Every `openma serve` process may run both against
 * one database: the scheduler claims each cron occurrence with a unique
 * insert, the worker each delivery attempt with a lease.
 */
import { type ApiDeps, runDeployment } from "@openma/api";
import { DeploymentScheduler } from "@openma/scheduler";
import { realScheduler, type Scheduler } from "@openma/time";
import { WebhookDeliveryWorker } from "@openma/webhooks";
import type { ServerConfig } from "./config.ts";

export interface Automation {
  stop(): Promise<void>;
}

/** `schedulerTimers`: the scheduler's waits between ticks (tests drive them with their clock); default real timers. */
export function startAutomation(config: ServerConfig["automation"], deps: ApiDeps, schedulerTimers: Scheduler = realScheduler): Automation {
  const scheduler = config.scheduler
    ? new DeploymentScheduler({
        db: deps.storage.db,
        clock: deps.clock,
        scheduler: schedulerTimers,
        logger: deps.logger,
        intervalMs: config.schedulerIntervalMs,
        fire: async (id, at) => (await runDeployment(deps, id, { type: "schedule", scheduledAtMs: at })).outcome,
      })
    : null;
  const webhooks = config.webhooks
    ? new WebhookDeliveryWorker({
        db: deps.storage.db,
        clock: deps.clock,
        scheduler: realScheduler,
        logger: deps.logger,
        allowPrivateTargets: config.allowPrivateWebhookTargets,
        maxAttempts: config.webhookMaxAttempts,
        baseDelayMs: config.webhookRetryBaseMs,
      })
    : null;
  scheduler?.start();
  webhooks?.start();
  return {
    async stop() {
      await Promise.all([scheduler?.stop(), webhooks?.stop()]);
    },
  };
}
