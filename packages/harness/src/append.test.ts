/** The loop's guarded appends against real storage, on both backends: refusals write nothing and leave no seq gap. */
import { readEventsAfter } from "@openma/api";
import { newId, systemClock } from "@openma/storage";
import { BACKENDS, insertTestSession, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { appendToSession, draft, withSession } from "./append.ts";

describe.each(BACKENDS)("guarded appends on %s", (dialect) => {
  let store: TestStorage;
  let deps: { storage: TestStorage["storage"]; clock: typeof systemClock; ids: typeof newId };
  beforeAll(async () => {
    store = await openTestStorage(dialect);
    deps = { storage: store.storage, clock: systemClock, ids: newId };
  });
  afterAll(async () => store?.cleanup());

  const session = (status = "idle") => insertTestSession(store.storage, { status });
  const log = async (id: string) => (await readEventsAfter(store.storage.db, id, 0, 1000)).map((e) => `${e.seq}:${e.type}`);
  const lastSeq = async (id: string) =>
    (await store.storage.db.selectFrom("sessions").select("last_seq").where("id", "=", id).executeTakeFirstOrThrow()).last_seq;

  it("appends with the lock taken by the reservation, idempotently per dedupe key", async () => {
    const id = await session();
    const first = await appendToSession(deps, id, [draft("agent.message", { content: [] }, "k1")]);
    const again = await appendToSession(deps, id, [draft("agent.message", { content: [] }, "k1"), draft("agent.thinking", {}, "k2")]);
    expect(first.type).toBe("ok");
    expect(again.type === "ok" && again.value[0]).toEqual(first.type === "ok" && first.value[0]);
    expect(await log(id)).toEqual(["1:agent.message", "2:agent.thinking"]);
    expect(await lastSeq(id)).toBe(2);
  });

  it("refuses a terminated or deleted session and writes nothing", async () => {
    const id = await session("terminated");
    expect(await appendToSession(deps, id, [draft("agent.message", { content: [] }, "k")])).toEqual({ type: "terminated" });
    expect(await withSession(deps, id, (tx) => tx.append([draft("agent.message", { content: [] }, "k")]))).toEqual({ type: "terminated" });
    expect(await log(id)).toEqual([]);
    expect(await lastSeq(id)).toBe(0);
    expect(await appendToSession(deps, newId("sesn"), [draft("agent.message", {}, "k")])).toEqual({ type: "terminated" });
  });

  it("refuses after an interrupt or a newer user.message past the guard's position, without a seq gap", async () => {
    const id = await session();
    await appendToSession(deps, id, [draft("user.message", { content: [] }, "m1")]);
    await appendToSession(deps, id, [draft("user.message", { content: [] }, "m2")]);
    const superseded = await appendToSession(deps, id, [draft("agent.message", { content: [] }, "r")], {
      messageAfter: { seq: 1, threadId: null },
    });
    expect(superseded).toEqual({ type: "superseded" });
    // Only the primary thread's messages supersede a primary response; a later position lets it land.
    expect((await appendToSession(deps, id, [draft("agent.thinking", {}, "t")], { messageAfter: { seq: 2, threadId: null } })).type).toBe(
      "ok",
    );
    await appendToSession(deps, id, [draft("user.interrupt", {}, "i")]);
    expect(await appendToSession(deps, id, [draft("agent.message", { content: [] }, "r2")], { interruptAfterSeq: 3 })).toEqual({
      type: "interrupted",
    });
    expect(await log(id)).toEqual(["1:user.message", "2:user.message", "3:agent.thinking", "4:user.interrupt"]);
    // The refused reservations were rolled back: the next append follows without a gap.
    await appendToSession(deps, id, [draft("agent.thinking", {}, "t2")]);
    expect(await lastSeq(id)).toBe(5);
  });
});
