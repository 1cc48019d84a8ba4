/**
 * Test support for deployments and webhooks: API dependencies over a test
 * storage (what `openma serve` hands its scheduler), and a scheduler whose
 * fire is the real `runDeployment`.
 */
import { type ApiDeps, runDeployment, silentLogger } from "@openma/api";
import { DeploymentScheduler } from "@openma/scheduler";
import { type Clock, newId, type Storage } from "@openma/storage";
import { ManualScheduler } from "@openma/time";

export function automationDeps(storage: Storage, clock: Clock): ApiDeps {
  return {
    storage,
    clock,
    ids: newId,
    logger: silentLogger,
    configuredApiKeyHashes: new Set(),
    workTtlSeconds: 60,
    sse: { keepAliveMs: 15_000 },
  };
}

export function testScheduler(deps: ApiDeps): DeploymentScheduler {
  return new DeploymentScheduler({
    db: deps.storage.db,
    clock: deps.clock,
    scheduler: new ManualScheduler(),
    logger: silentLogger,
    fire: async (id, at) => (await runDeployment(deps, id, { type: "schedule", scheduledAtMs: at })).outcome,
  });
}
