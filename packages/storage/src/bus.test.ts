/** The bus's data broadcasts (the `event_deltas` transport) on both backends: delivered in order to listeners of the topic only. */
import { describe, expect, it } from "vitest";
import { MAX_BROADCAST_BYTES, publishOnCommitIn } from "./bus.ts";
import { openStorage } from "./storage.ts";
import { BACKENDS, markerSeen, openTestStorage } from "./testing.ts";

describe.each(BACKENDS)("bus broadcasts on %s", (dialect) => {
  it("delivers payloads in order to the topic's listeners, keeps wake-ups apart, and refuses oversized payloads", async () => {
    const store = await openTestStorage(dialect);
    try {
      const { bus } = store.storage;
      const got: string[] = [];
      const other: string[] = [];
      let wakeups = 0;
      const done = new Promise<void>((resolve) => {
        bus.listen("previews:a", (payload) => {
          got.push(payload);
          if (payload === "last") resolve();
        });
      });
      const offOther = bus.listen("previews:b", (payload) => other.push(payload));
      const offWake = bus.subscribe("previews:a", () => wakeups++);
      const payloads = ["one", "two\nlines", JSON.stringify({ text: "é".repeat(100) }), "last"];
      for (const payload of payloads) await bus.broadcast("previews:a", payload);
      await done;
      expect(got).toEqual(payloads);
      expect(other).toEqual([]);
      expect(wakeups).toBe(0);
      await expect(bus.broadcast("previews:a", "x".repeat(MAX_BROADCAST_BYTES))).rejects.toThrow(/exceeds/);
      offOther();
      offWake();
    } finally {
      await store.cleanup();
    }
  });
});

describe.each(BACKENDS)("publishing with a commit on %s", (dialect) => {
  it("publishes every topic once the transaction committed, nothing on rollback; a bus that cannot says so", async () => {
    const store = await openTestStorage(dialect);
    try {
      const { bus, db } = store.storage;
      const woken: string[] = [];
      const offs = ["t:a", "t:b"].map((topic) => bus.subscribe(topic, () => woken.push(topic)));
      let queued = false;
      await db.transaction().execute(async (trx) => {
        queued = await publishOnCommitIn(bus, trx, ["t:a", "t:b"]);
        await markerSeen(bus);
        expect(woken).toEqual([]);
      });
      await markerSeen(bus);
      expect(queued).toBe(dialect === "postgres");
      expect(woken).toEqual(queued ? ["t:a", "t:b"] : []);

      const rolledBack = db.transaction().execute(async (trx) => {
        await publishOnCommitIn(bus, trx, ["t:a"]);
        throw new Error("roll back");
      });
      await expect(rolledBack).rejects.toThrow("roll back");
      await markerSeen(bus);
      expect(woken).toEqual(queued ? ["t:a", "t:b"] : []);
      for (const off of offs) off();
    } finally {
      await store.cleanup();
    }
  });
});

describe("Postgres bus: a commit's wake-up in its own process", () => {
  it("wakes local subscribers once when the writer says committed, before or after the database's delivery; others still by the database", async () => {
    const a = await openTestStorage("postgres");
    // A second process on the same schema.
    const b = await openStorage({ dataDir: a.dataDir, databaseUrl: a.databaseUrl, pgSchema: a.pgSchema });
    try {
      const { bus, db } = a.storage;
      const woken: string[] = [];
      const off = bus.subscribe("t:x", () => woken.push("t:x"));
      let elsewhere = 0;
      const offB = b.bus.subscribe("t:x", () => elsewhere++);
      // Said before the delivery: woken at once (synchronously), and the delivery is not repeated.
      await db.transaction().execute((trx) => publishOnCommitIn(bus, trx, ["t:x"]));
      bus.committed?.(["t:x", "t:x"]);
      expect(woken).toEqual(["t:x"]);
      await markerSeen(bus);
      expect(woken).toEqual(["t:x"]);
      // The delivery first: it wakes, and the writer's late word does not wake again.
      await db.transaction().execute((trx) => publishOnCommitIn(bus, trx, ["t:x"]));
      await markerSeen(bus);
      expect(woken).toEqual(["t:x", "t:x"]);
      bus.committed?.(["t:x"]);
      expect(woken).toEqual(["t:x", "t:x"]);
      // A writer that never says committed: its delivery wakes, and the next commit is still woken (by its delivery).
      await db.transaction().execute((trx) => publishOnCommitIn(bus, trx, ["t:x"]));
      await markerSeen(bus);
      await db.transaction().execute((trx) => publishOnCommitIn(bus, trx, ["t:x"]));
      bus.committed?.(["t:x"]);
      await markerSeen(bus);
      expect(woken).toEqual(["t:x", "t:x", "t:x", "t:x"]);
      // The other process was woken by the database, once per commit.
      await markerSeen(b.bus);
      expect(elsewhere).toBe(4);
      off();
      offB();
    } finally {
      await b.close();
      await a.cleanup();
    }
  });
});

describe("Postgres bus channels", () => {
  it("keep each schema's wake-ups to the storages of that schema", async () => {
    const [a, b] = await Promise.all([openTestStorage("postgres"), openTestStorage("postgres")]);
    try {
      const seenByB: string[] = [];
      let bWoke = () => {};
      const off = b.storage.bus.subscribe("execution:pending", () => {
        seenByB.push("execution:pending");
        bWoke();
      });
      const seenByA = new Promise<void>((resolve) => {
        const offA = a.storage.bus.subscribe("execution:pending", () => {
          offA();
          resolve();
        });
      });
      await a.storage.bus.publish("execution:pending");
      await seenByA;
      // Postgres hands queued notifications to each listener in commit order: B's own marker comes after A's publish.
      await markerSeen(b.storage.bus);
      expect(seenByB).toEqual([]);
      const woke = new Promise<void>((resolve) => {
        bWoke = resolve;
      });
      await b.storage.bus.publish("execution:pending");
      await woke;
      expect(seenByB).toEqual(["execution:pending"]);
      off();
    } finally {
      await Promise.all([a.cleanup(), b.cleanup()]);
    }
  });
});
