/** Sandboxes of sessions closed through another process are released on the change-bus wake-up. */
import { SESSIONS_CLOSED_TOPIC, silentLogger } from "@openma/api";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { followSessionClosures } from "./session-closures.ts";

async function insertSession(store: TestStorage, id: string, archived: boolean): Promise<void> {
  const now = new Date().toISOString();
  await store.storage.db
    .insertInto("sessions")
    .values({
      id,
      agent_id: "agent_1",
      agent_version: 1,
      environment_id: "env_1",
      status: "idle",
      body: "{}",
      last_seq: 0,
      created_at: now,
      updated_at: now,
      archived_at: archived ? now : null,
    })
    .execute();
}

describe.each(BACKENDS)("following session closures on %s", (dialect) => {
  let store: TestStorage;
  beforeEach(async () => {
    store = await openTestStorage(dialect);
  });
  afterEach(async () => store.cleanup());

  it("releases exactly the held sessions that are archived or gone, once per wake-up burst", async () => {
    await insertSession(store, "sesn_open", false);
    await insertSession(store, "sesn_archived", true);
    const released: string[] = [];
    const held = ["sesn_open", "sesn_archived", "sesn_deleted"];
    let bothReleased!: () => void;
    const done = new Promise<void>((resolve) => {
      bothReleased = resolve;
    });
    const closures = followSessionClosures({
      storage: store.storage,
      sandboxes: {
        active: () => held.filter((id) => !released.includes(id)),
        release: async (id) => {
          released.push(id);
          if (released.length === 2) bothReleased();
        },
      },
      logger: silentLogger,
    });
    try {
      // The wake-up may cross processes (Postgres NOTIFY): wait for its effect, not for time.
      await store.storage.bus.publish(SESSIONS_CLOSED_TOPIC);
      await done;
      await closures.settled();
      expect(released.sort()).toEqual(["sesn_archived", "sesn_deleted"]);
    } finally {
      closures.stop();
    }
  });
});
