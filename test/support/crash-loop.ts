/**
 * The kill -9 loop of issue 21, shared by every driver (the local ones in
 * test/serve/sandbox-crash-loop.test.ts, the cloud ones against their
 * stand-ins in test/cloud/crash-loop-<vendor>.test.ts): `openma serve` (a child
 * process on Postgres, scripted model) runs 4 sessions that take tool turns
 * in their sandboxes and is `kill -9`ed 20 times at seeded random points
 * (after a random number of new log events; fewer kills where a driver asks). Afterwards:
 *  - every session's log is consistent: each user message answered once,
 *    every tool use answered by exactly one result, event ids unique, `seq`
 *    gap-free;
 *  - once the last server's reaper has run, the live sandboxes counted where
 *    they live (the engine by label, bubblewrap's runtime records whose
 *    processes live, a cloud stand-in's own count) equal the sessions still
 *    holding one, and 0 after archiving them.
 * Each kill cycle is cheap: short owner and execution leases, a fast reap
 * interval, and waits on conditions (the log, the engine), never on time.
 */
import type Anthropic from "@anthropic-ai/sdk";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { deploymentId } from "@openma/storage/sandbox-owners";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type CrashableServer, crashableServer } from "../support/crash-server.ts";
import { TEST_API_KEY } from "../support/server.ts";
import { until } from "../support/until.ts";

const MODEL_KEY = "sk-scripted-crash-loop";
const SESSIONS = 4;
const ENV = {
  OPENMA_BRAIN: "on",
  OPENMA_MODEL_API_KEY: MODEL_KEY,
  OPENMA_AUTO_PROVISION: "off",
  LOG_LEVEL: "warn",
  // The shortest leases the server accepts: a dead server's turns and sandboxes are free again quickly.
  OPENMA_EXECUTION_LEASE_TTL_MS: "3000",
  OPENMA_EXECUTION_POLL_MS: "200",
  // The loop kills the server mid-turn on purpose, possibly many times in a row: no turn may be given up for that.
  OPENMA_EXECUTION_MAX_ATTEMPTS: "100",
  OPENMA_SANDBOX_LEASE_TTL_MS: "1500",
  OPENMA_SANDBOX_REAP_INTERVAL_MS: "250",
};

type Row = { seq: number; id: string; type: string; body: string };

/** Where a driver's sandboxes live, as the loop needs it. */
export interface CrashLoopTarget {
  /** Readies the driver's engine or stand-in; fails (never skips) when it is missing. */
  setup(): Promise<void>;
  /** The child server's variables that select the driver (OPENMA_SANDBOX, the vendor's own). */
  env(): Record<string, string>;
  /** Live sandboxes of this deployment, counted where they live, never from our own records. */
  live(deployment: string): Promise<number>;
  /** What the engine or stand-in holds, for a failure's message. */
  inventory?(): Promise<unknown>;
  teardown?(): Promise<void>;
  /** Seeds the kill points, so every run of this driver kills at the same points. */
  seed: number;
  /** How many times the server is killed (default 20). */
  kills?: number;
}

export function describeCrashLoop(driver: string, target: CrashLoopTarget): void {
  const KILLS = target.kills ?? 20;
  describe(`kill -9 loop of openma serve with ${driver} session sandboxes`, () => {
    let store: TestStorage;
    let model: ScriptedModel;
    let server: CrashableServer | null = null;
    let deployment: string;

    beforeAll(async () => {
      await target.setup();
      store = await openTestStorage("postgres");
      deployment = await deploymentId(store.storage.db);
      model = await startScriptedModel({
        apiKey: MODEL_KEY,
        script: [
          { match: { tool_result_for: "bash" }, response: "the tool ran", times: 100_000 },
          { response: { content: [{ type: "tool_use", name: "bash", input: { command: "echo tool-ran" } }] }, times: 100_000 },
        ],
      });
    });
    afterAll(async () => {
      await server?.close();
      await model?.close();
      await store?.cleanup();
      await target.teardown?.();
    });

    const liveAtEngine = () => target.live(deployment);

    const rows = (sessionId: string): Promise<Row[]> =>
      store.storage.db
        .selectFrom("session_events")
        .select(["seq", "id", "type", "body"])
        .where("session_id", "=", sessionId)
        .orderBy("seq")
        .execute() as Promise<Row[]>;

    const totalEvents = async (ids: string[]) => (await Promise.all(ids.map(rows))).reduce((n, r) => n + r.length, 0);

    /** Every user message answered, and the session idle after the last answer. */
    async function answered(sessionId: string): Promise<boolean> {
      const log = await rows(sessionId);
      const asked = log.filter((r) => r.type === "user.message").length;
      const replies = log.filter((r) => r.type === "agent.message").length;
      return replies === asked && (asked === 0 || log.at(-1)?.type === "session.status_idle");
    }

    /** The sessions' event types, for a failure's message. */
    const summary = async (ids: string[]) =>
      (await Promise.all(ids.map(async (id) => `${id}: ${(await rows(id)).map((r) => r.type).join(" ")}`))).join("\n");

    const send = (client: Anthropic, sessionId: string, n: number) =>
      client.beta.sessions.events.send(sessionId, {
        events: [{ type: "user.message", content: [{ type: "text", text: `run the tool (${n})` }] }],
      });

    it(`keeps every log consistent and leaks no sandbox across ${KILLS} kills`, { timeout: 600_000 }, async () => {
      const s = await crashableServer(store, TEST_API_KEY, { ...ENV, ...target.env(), OPENMA_MODEL_BASE_URL: model.url });
      server = s;
      // The kill points: after 0 to 11 new log events, seeded, so every run kills at the same points.
      const points = fc.sample(fc.integer({ min: 0, max: 11 }), { seed: target.seed, numRuns: KILLS });
      await s.start();
      const env = await s.client.beta.environments.create({ name: "cloud" });
      const agent = await s.client.beta.agents.create({
        name: "crash-loop",
        model: "claude-test-1",
        tools: [{ type: "agent_toolset_20260401", default_config: { permission_policy: { type: "always_allow" } } }],
      });
      const ids: string[] = [];
      for (let i = 0; i < SESSIONS; i++) ids.push((await s.client.beta.sessions.create({ agent: agent.id, environment_id: env.id })).id);
      const sent = new Map(ids.map((id) => [id, 0]));

      for (let kill = 0; kill < KILLS; kill++) {
        if (kill > 0) await s.start();
        // A session gets its next message once the previous one was answered, so "answered once" stays countable.
        for (const id of ids) {
          if (!(await answered(id))) continue;
          const n = (sent.get(id) ?? 0) + 1;
          sent.set(id, n);
          await send(s.client, id, n);
        }
        // Killed after that many new log events, or once every session is answered, whichever is first.
        const base = await totalEvents(ids);
        const wait = points[kill] ?? 0;
        await until(
          async () => (await totalEvents(ids)) >= base + wait || (await Promise.all(ids.map(answered))).every(Boolean),
          "the kill point",
        );
        await s.kill9();
      }

      await s.start();
      await until(async () => (await Promise.all(ids.map(answered))).every(Boolean), "every session answered", 120_000).catch(
        async (err: Error) => {
          throw new Error(`${err.message}: ${await summary(ids)}\nthe servers' last output:\n${s.logs().slice(-3000)}`);
        },
      );

      for (const id of ids) {
        const log = await rows(id);
        expect(log.map((r) => Number(r.seq))).toEqual(log.map((_, i) => i + 1));
        expect(new Set(log.map((r) => r.id)).size).toBe(log.length);
        const messages = log.filter((r) => r.type === "user.message").length;
        expect(messages).toBe(sent.get(id));
        expect(log.filter((r) => r.type === "agent.message")).toHaveLength(messages);
        const uses = log.filter((r) => r.type === "agent.tool_use").map((r) => r.id);
        const results = log
          .filter((r) => r.type === "agent.tool_result")
          .map((r) => (JSON.parse(r.body) as { tool_use_id: string }).tool_use_id);
        expect(new Set(uses).size).toBe(uses.length);
        // The tool really ran in the session's sandbox (not refused): its output is in a result.
        const toolResults = log.filter((r) => r.type === "agent.tool_result");
        expect(
          toolResults.some((r) => r.body.includes("tool-ran")),
          `no tool ran in ${id}: ${toolResults.map((r) => r.body).join("\n")}`,
        ).toBe(true);
        expect([...results].sort()).toEqual([...uses].sort());
      }
      expect([...sent.values()].reduce((a, b) => a + b, 0)).toBeGreaterThanOrEqual(SESSIONS);

      // After the last server's reaper passes: exactly the sessions still holding a sandbox have one at the engine.
      const holding = async () =>
        Number(
          (
            await store.storage.db
              .selectFrom("sandbox_owners")
              .select((eb) => eb.fn.count<number>("session_id").distinct().as("n"))
              .where("lease_expires_at_ms", ">", Date.now())
              .executeTakeFirstOrThrow()
          ).n,
        );
      await until(async () => (await liveAtEngine()) === (await holding()), "the reaper to end the dead servers' sandboxes").catch(
        async (err: Error) => {
          const records = await store.storage.db
            .selectFrom("sandbox_owners")
            .select(["session_id", "provider_id", "lease_expires_at_ms", "idle_deadline_at_ms", "deployment"])
            .execute();
          const now = Date.now();
          throw new Error(
            `${err.message}: ${await liveAtEngine()} live, ${await holding()} holding; records ${JSON.stringify(
              records.map((r) => ({
                ...r,
                lease_in_ms: Number(r.lease_expires_at_ms) - now,
                idle_in_ms: Number(r.idle_deadline_at_ms) - now,
              })),
            )}; at the engine ${JSON.stringify(await target.inventory?.())}\nthe servers' last output:\n${s.logs().slice(-4000)}`,
          );
        },
      );
      expect(await holding()).toBeLessThanOrEqual(SESSIONS);

      for (const id of ids) await s.client.beta.sessions.archive(id);
      await until(async () => (await liveAtEngine()) === 0, "archiving to end every sandbox", 30_000);
      expect(await holding()).toBe(0);
    });
  });
}
