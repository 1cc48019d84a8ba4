/**
 * The harness end to end: the real server (SDK over HTTP) on a real storage
 * backend, the scripted model over HTTP, the real subprocess sandbox driver,
 * and `runTurn` driving sessions the SDK created.
 */
import type { BetaManagedAgentsSessionEvent } from "@anthropic-ai/sdk/resources/beta/sessions/events";
import { silentLogger } from "@openma/api";
import { SubprocessSandboxDriver } from "@openma/driver-subprocess";
import {
  backoffPolicy,
  createAnthropicModel,
  type ModelPort,
  needsTurn,
  runTurn,
  type ServerToolExecutor,
  type TurnOutcome,
  type TurnRunnerDeps,
} from "@openma/harness";
import { type ScriptedModel, type ScriptInput, startScriptedModel } from "@openma/scripted-model";
import { type Clock, type Dialect, newId, systemClock } from "@openma/storage";
import { startTestServer, type TestServer } from "../support/server.ts";

export const MODEL_KEY = "sk-scripted-harness";

export interface Harness {
  t: TestServer;
  model: ScriptedModel;
  driver: SubprocessSandboxDriver;
  /** Back-off waits the loop asked for (the sleeper never waits). */
  sleeps: number[];
  deps: TurnRunnerDeps;
  run(sessionId: string, over?: Partial<TurnRunnerDeps>): Promise<TurnOutcome>;
  needsTurn(sessionId: string): Promise<boolean>;
  events(sessionId: string): Promise<BetaManagedAgentsSessionEvent[]>;
  types(sessionId: string): Promise<string[]>;
  agent(tools: unknown[], opts?: { system?: string; mcp_servers?: Array<{ type: "url"; name: string; url: string }> }): Promise<string>;
  environment(type: "cloud" | "self_hosted" | "none"): Promise<string>;
  session(agentId: string, environmentId: string, text?: string): Promise<string>;
  say(sessionId: string, text: string): Promise<void>;
  close(): Promise<void>;
}

export const TOOLSET = { type: "agent_toolset_20260401" };

export function modelPort(url: string, sleeps: number[], maxRetries = 3): ModelPort {
  return createAnthropicModel({
    baseURL: url,
    apiKey: MODEL_KEY,
    retry: backoffPolicy(
      {
        sleep: async (ms) => {
          sleeps.push(ms);
        },
      },
      maxRetries,
    ),
  });
}

export async function startHarness(
  dialect: Dialect,
  script: ScriptInput = [],
  serverTools: ServerToolExecutor[] = [],
  opts: { clock?: Clock } = {},
): Promise<Harness> {
  const t = await startTestServer(dialect, {}, opts);
  const model = await startScriptedModel({ apiKey: MODEL_KEY, script });
  const driver = new SubprocessSandboxDriver();
  const sleeps: number[] = [];
  const deps: TurnRunnerDeps = {
    storage: t.store.storage,
    clock: opts.clock ?? systemClock,
    ids: newId,
    logger: silentLogger,
    model: modelPort(model.url, sleeps),
    sandboxes: driver,
    serverTools,
    secrets: t.secrets,
  };
  const events = async (sessionId: string) => {
    const out: BetaManagedAgentsSessionEvent[] = [];
    for await (const e of t.client.beta.sessions.events.list(sessionId, { limit: 1000 })) out.push(e);
    return out;
  };
  return {
    t,
    model,
    driver,
    sleeps,
    deps,
    run: (sessionId, over = {}) => runTurn({ ...deps, ...over }, sessionId, new AbortController().signal),
    needsTurn: (sessionId) => needsTurn(t.store.storage, sessionId),
    events,
    types: async (sessionId) => (await events(sessionId)).map((e) => e.type),
    async agent(tools, opts = {}) {
      const created = await t.client.beta.agents.create({
        name: "harness-agent",
        model: "claude-test-1",
        system: opts.system ?? "You are a test agent.",
        tools: tools as never,
        ...(opts.mcp_servers ? { mcp_servers: opts.mcp_servers } : {}),
      });
      return created.id;
    },
    async environment(type) {
      return (await t.client.beta.environments.create({ name: `env-${type}`, config: { type } as never })).id;
    },
    async session(agentId, environmentId, text) {
      const created = await t.client.beta.sessions.create({
        agent: agentId,
        environment_id: environmentId,
        ...(text ? { initial_events: [{ type: "user.message", content: [{ type: "text", text }] }] } : {}),
      });
      return created.id;
    },
    async say(sessionId, text) {
      await t.client.beta.sessions.events.send(sessionId, { events: [{ type: "user.message", content: [{ type: "text", text }] }] });
    },
    async close() {
      await model.close();
      await driver.close();
      await t.close();
    },
  };
}

/** Events of one type, typed loosely for field assertions. */
export function ofType(events: BetaManagedAgentsSessionEvent[], type: string): Array<Record<string, unknown> & { id: string }> {
  return events.filter((e) => e.type === type) as unknown as Array<Record<string, unknown> & { id: string }>;
}

export function countTypes(types: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const t of types) out[t] = (out[t] ?? 0) + 1;
  return out;
}
