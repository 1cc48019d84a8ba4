/**
 * Exactly once per tick when a scheduler process dies mid-tick: two
 * scheduler processes on one Postgres tick together under a clock the test
 * sets; every 10th tick one of them gets SIGKILL right after it was told to
 * tick (inside its transaction or not, as it happens), and a fresh process
 * takes its place. Every occurrence still becomes exactly one run.
 */
import { type ChildProcess, fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import { ManualClock } from "@openma/storage";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { automationDeps, inProcessClient } from "../support/automation.ts";

const CHILD = fileURLToPath(new URL("../support/scheduler-child.ts", import.meta.url));
const KEY = "sk-ant-api03-scheduler-kill-key-0123456789";
const TICKS = 100;

interface Child {
  proc: ChildProcess;
  tick(ms: number): Promise<{ fired: number; taken: number; failed: number }>;
}

async function spawnChild(store: TestStorage): Promise<Child> {
  const proc = fork(CHILD, [], {
    execArgv: ["--import", "tsx"],
    env: { ...process.env, SCHEDULER_PG_SCHEMA: store.pgSchema, SCHEDULER_DATA_DIR: store.dataDir },
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  await new Promise<void>((resolve, reject) => {
    proc.once("message", () => resolve());
    proc.once("exit", (code) => reject(new Error(`scheduler child exited (${code}) before it was ready`)));
  });
  return {
    proc,
    tick(ms) {
      return new Promise((resolve, reject) => {
        const onMessage = (m: { done?: number; fired: number; taken: number; failed: number }) => {
          if (m.done !== ms) return;
          proc.off("message", onMessage);
          proc.off("exit", onExit);
          resolve(m);
        };
        const onExit = () => reject(new Error("scheduler child died"));
        proc.on("message", onMessage);
        proc.once("exit", onExit);
        proc.send({ tick: ms });
      });
    },
  };
}

describe("a scheduler process killed mid-tick", () => {
  let store: TestStorage;
  const children: Child[] = [];
  beforeAll(async () => {
    store = await openTestStorage("postgres");
  });
  afterAll(async () => {
    for (const c of children) c.proc.kill("SIGKILL");
    await store?.cleanup();
  });

  it(`leaves exactly one run per tick over ${TICKS} ticks`, { timeout: 300_000 }, async () => {
    const start = Date.parse("2026-06-01T00:00:30.000Z");
    const client = inProcessClient(automationDeps(store.storage, new ManualClock(start), KEY), KEY);
    const agent = await client.beta.agents.create({ name: "ticker", model: "claude-sonnet-4-5" });
    const env = await client.beta.environments.create({ name: "cloud" });
    const deployment = await client.beta.deployments.create({
      agent: agent.id,
      environment_id: env.id,
      initial_events: [{ type: "user.message", content: [{ type: "text", text: "tick" }] }],
      name: "every minute",
      schedule: { type: "cron", expression: "* * * * *", timezone: "UTC" },
    });
    children.push(await spawnChild(store), await spawnChild(store));
    let kills = 0;
    for (let i = 1; i <= TICKS; i++) {
      const at = start + i * 60_000;
      if (i % 10 === 0) {
        const victim = children[i % 2] as Child;
        const survivor = children[(i + 1) % 2] as Child;
        const dying = victim.tick(at).catch(() => null);
        victim.proc.kill("SIGKILL");
        await dying;
        kills++;
        await survivor.tick(at);
        children[i % 2] = await spawnChild(store);
      } else {
        await Promise.all(children.map((c) => c.tick(at)));
      }
    }
    expect(kills).toBe(TICKS / 10);
    const runs = await store.storage.db
      .selectFrom("deployment_runs")
      .select("scheduled_at")
      .where("deployment_id", "=", deployment.id)
      .execute();
    const scheduled = runs.map((r) => r.scheduled_at).sort();
    expect(scheduled).toEqual(Array.from({ length: TICKS }, (_, k) => new Date(start + 30_000 + k * 60_000).toISOString()));
    const sessions = await store.storage.db
      .selectFrom("sessions")
      .select((eb) => eb.fn.countAll<number>().as("n"))
      .executeTakeFirstOrThrow();
    expect(Number(sessions.n)).toBe(TICKS);
  });
});
