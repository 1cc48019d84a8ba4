import { afterEach, describe, expect, it } from "vitest";
import { createIdFactory } from "./ids.ts";
import { BACKENDS, openTestStorage, type TestStorage } from "./testing.ts";

describe.each(BACKENDS)("storage on %s", (dialect) => {
  let t: TestStorage;
  afterEach(async () => t?.cleanup());

  it("migrates and round-trips a row, including bigint columns", async () => {
    t = await openTestStorage(dialect);
    const { db } = t.storage;
    await db
      .insertInto("sessions")
      .values({
        id: "sesn_1",
        agent_id: "agent_1",
        agent_version: 1,
        environment_id: "env_1",
        status: "idle",
        body: "{}",
        last_seq: 2 ** 40,
        created_at: "2026-01-01T00:00:00.000Z",
        updated_at: "2026-01-01T00:00:00.000Z",
        archived_at: null,
      })
      .execute();
    const row = await db.selectFrom("sessions").selectAll().where("id", "=", "sesn_1").executeTakeFirstOrThrow();
    expect(row.last_seq).toBe(2 ** 40);
    expect(typeof row.last_seq).toBe("number");
  });

  it("delivers change notifications to subscribers", async () => {
    t = await openTestStorage(dialect);
    const woke = new Promise<void>((resolve) => t.storage.bus.subscribe("session:x", resolve));
    await t.storage.bus.publish("session:x");
    await expect(woke).resolves.toBeUndefined();
  });
});

describe("ids", () => {
  it("sort by creation time and stay monotonic within one millisecond", () => {
    let now = 1_000;
    const id = createIdFactory(() => now);
    const a = id("x");
    const b = id("x");
    now = 1_001;
    const c = id("x");
    expect([c, b, a].sort()).toEqual([a, b, c]);
  });
});
