/**
 * Test support for deployments and webhooks: API dependencies over a test
 * storage (what `openma serve` hands its scheduler), and a scheduler whose
 * fire is the real `runDeployment`.
 */
import Anthropic from "@anthropic-ai/sdk";
import { type ApiDeps, createApp, runDeployment, silentLogger } from "@openma/api";
import { DeploymentScheduler } from "@openma/scheduler";
import { type Clock, hashSecret, newId, type Storage } from "@openma/storage";
import { ManualScheduler } from "@openma/time";

export function automationDeps(storage: Storage, clock: Clock, apiKey?: string): ApiDeps {
  return {
    storage,
    clock,
    ids: newId,
    logger: silentLogger,
    configuredApiKeyHashes: new Set(apiKey ? [hashSecret(apiKey)] : []),
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

/** The official SDK over `deps` without a listener: requests go straight to the app. */
export function inProcessClient(deps: ApiDeps, apiKey: string): Anthropic {
  const app = createApp(deps);
  return new Anthropic({
    baseURL: "http://openma.invalid",
    apiKey,
    maxRetries: 0,
    fetch: async (input: string | URL | Request, init?: RequestInit) => app.fetch(new Request(input, init)),
  });
}

/** An agent, an environment and a deployment firing every minute (UTC): what the scheduler tests tick. */
export async function minutelyDeployment(client: Anthropic): Promise<{ id: string }> {
  const agent = await client.beta.agents.create({ name: "ticker", model: "claude-sonnet-4-5" });
  const env = await client.beta.environments.create({ name: "cloud" });
  return client.beta.deployments.create({
    agent: agent.id,
    environment_id: env.id,
    initial_events: [{ type: "user.message", content: [{ type: "text", text: "tick" }] }],
    name: "every minute",
    schedule: { type: "cron", expression: "* * * * *", timezone: "UTC" },
  });
}
