/**
 * Exactly once per tick across processes: two schedulers, each with its own
 * connection pool to one Postgres schema (what two `openma serve` processes
 * are), tick concurrently under one manual clock through 1,000 minutes of a
 * minutely deployment. Every occurrence becomes exactly one run — the unique
 * (deployment_id, scheduled_at) insert decides which process makes it.
 */
import { ManualClock, openStorage } from "@openma/storage";
import { openTestStorage, TEST_DATABASE_URL, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { automationDeps, inProcessClient, minutelyDeployment, testScheduler } from "../support/automation.ts";

const KEY = "sk-ant-api03-scheduler-test-key-0123456789";
const TICKS = 1000;

describe("two schedulers on one Postgres", () => {
  let store: TestStorage;
  let second: Awaited<ReturnType<typeof openStorage>>;
  beforeAll(async () => {
    store = await openTestStorage("postgres");
    second = await openStorage({ dataDir: store.dataDir, databaseUrl: TEST_DATABASE_URL, pgSchema: store.pgSchema });
  });
  afterAll(async () => {
    await second?.close();
    await store?.cleanup();
  });

  it(`fire a minutely deployment exactly ${TICKS} times in ${TICKS} ticks`, { timeout: 300_000 }, async () => {
    const clock = new ManualClock(Date.parse("2026-06-01T00:00:30.000Z"));
    const depsA = automationDeps(store.storage, clock, KEY);
    const depsB = automationDeps(second, clock, KEY);
    const client = inProcessClient(depsA, KEY);
    const deployment = await minutelyDeployment(client);
    const a = testScheduler(depsA);
    const b = testScheduler(depsB);
    let fired = 0;
    let taken = 0;
    for (let i = 0; i < TICKS; i++) {
      clock.advance(60_000);
      const reports = await Promise.all([a.tick(), b.tick()]);
      for (const r of reports) {
        expect(r.failed).toBe(0);
        fired += r.fired;
        taken += r.taken;
      }
    }
    expect(fired).toBe(TICKS);
    const runs = await store.storage.db
      .selectFrom("deployment_runs")
      .select(["scheduled_at", "has_error", "body"])
      .where("deployment_id", "=", deployment.id)
      .execute();
    expect(runs).toHaveLength(TICKS);
    const scheduled = new Set(runs.map((r) => r.scheduled_at));
    expect(scheduled.size).toBe(TICKS);
    const first = Date.parse("2026-06-01T00:01:00.000Z");
    for (let i = 0; i < TICKS; i++) expect(scheduled.has(new Date(first + i * 60_000).toISOString())).toBe(true);
    expect(runs.every((r) => r.has_error === 0)).toBe(true);
    // Each run made its own session; the losers of a claim made none.
    const sessions = await store.storage.db
      .selectFrom("sessions")
      .select((eb) => eb.fn.countAll<number>().as("n"))
      .executeTakeFirstOrThrow();
    expect(Number(sessions.n)).toBe(TICKS);
    // Both processes took part (a claim lost is counted; which process wins each tick is the database's business).
    expect(fired + taken).toBeGreaterThanOrEqual(TICKS);
  });
});
