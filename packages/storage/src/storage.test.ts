import { sql } from "kysely";
import { afterEach, describe, expect, it } from "vitest";
import { createIdFactory } from "./ids.ts";
import { openStorage } from "./storage.ts";
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

describe("migrations on postgres", () => {
  it("let several processes start on one schema at once, applying each migration exactly once", async () => {
    const t = await openTestStorage("postgres");
    try {
      // A fresh schema, so the four starts race to create it and to apply every migration.
      const pgSchema = `${t.pgSchema}_race`;
      const opened = await Promise.all(
        Array.from({ length: 4 }, () => openStorage({ dataDir: t.dataDir, databaseUrl: t.databaseUrl, pgSchema })),
      );
      const { rows } = await sql<{ name: string; n: number }>`select name, count(*)::int as n from openma_migrations group by name`.execute(
        opened[0]!.db,
      );
      await sql`drop schema ${sql.id(pgSchema)} cascade`.execute(t.storage.db);
      expect(rows.length).toBeGreaterThan(0);
      expect(rows.every((r) => r.n === 1)).toBe(true);
      await Promise.all(opened.map((s) => s.close()));
    } finally {
      await t.cleanup();
    }
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
