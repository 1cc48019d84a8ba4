/** The event log against real storage, on both backends. */
import { newId, systemClock } from "@openma/storage";
import { BACKENDS, insertTestSession, markerSeen, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiError } from "./errors.ts";
import { appendEvents, type EventLogDeps, eventSeq, notifyAppended, readEventsAfter, sessionTopic } from "./event-log.ts";
import type { EventDraft } from "./schemas/events.ts";

const draft = (type: string, fields: Record<string, unknown> = {}, dedupeKey: string | null = null): EventDraft => ({
  type,
  fields,
  dedupeKey,
});

describe.each(BACKENDS)("event log on %s", (dialect) => {
  let store: TestStorage;
  let deps: EventLogDeps;
  beforeAll(async () => {
    store = await openTestStorage(dialect);
    deps = { storage: store.storage, clock: systemClock, ids: newId };
  });
  afterAll(async () => store?.cleanup());

  const session = (opts: { archived?: boolean } = {}) => insertTestSession(store.storage, opts);

  const seqs = async (id: string) => (await readEventsAfter(store.storage.db, id, 0, 10_000)).map((e) => e.seq);
  const row = (id: string) => store.storage.db.selectFrom("sessions").selectAll().where("id", "=", id).executeTakeFirstOrThrow();

  it("allocates gap-free sequence numbers under concurrent appends", async () => {
    const id = await session();
    await Promise.all(
      Array.from({ length: 25 }, (_, i) => appendEvents(deps, id, [draft("agent.message", { i }), draft("agent.thinking")])),
    );
    expect(await seqs(id)).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    expect((await row(id)).last_seq).toBe(50);
  });

  it("stamps ids and processed_at and keeps reserved fields its own", async () => {
    const id = await session();
    const { events } = await appendEvents(deps, id, [draft("agent.message", { id: "forged", type: "forged", content: [] })]);
    expect(events[0]).toMatchObject({ type: "agent.message", content: [] });
    expect(events[0]?.id).toMatch(/^sevt_/);
    expect(await eventSeq(store.storage.db, id, String(events[0]?.id))).toBe(1);
    expect(await eventSeq(store.storage.db, "sesn_other", String(events[0]?.id))).toBeUndefined();
  });

  it("is idempotent per dedupe key, across calls and within one call", async () => {
    const id = await session();
    const first = await appendEvents(deps, id, [draft("user.tool_result", { tool_use_id: "t1" }, "tool_result:t1")]);
    const again = await appendEvents(deps, id, [
      draft("user.tool_result", { tool_use_id: "t1", content: "x" }, "tool_result:t1"),
      draft("user.tool_result", { tool_use_id: "t2" }, "tool_result:t2"),
      draft("user.tool_result", { tool_use_id: "t2" }, "tool_result:t2"),
    ]);
    expect(again.events[0]).toEqual(first.events[0]);
    expect(again.events[2]).toEqual(again.events[1]);
    expect(again.appended.map((e) => e.tool_use_id)).toEqual(["t2"]);
    expect(await seqs(id)).toEqual([1, 2]);
    const racing = await Promise.all(Array.from({ length: 8 }, () => appendEvents(deps, id, [draft("x", {}, "k")])));
    expect(new Set(racing.map((r) => r.events[0]?.id)).size).toBe(1);
    expect(await seqs(id)).toEqual([1, 2, 3]);
    // Seqs reserved for drafts already in the log are given back: the next append follows without a gap.
    expect((await row(id)).last_seq).toBe(3);
    await appendEvents(deps, id, [draft("y")]);
    expect(await seqs(id)).toEqual([1, 2, 3, 4]);
  });

  it("projects status, outcomes and usage onto the session, except that an archived session stays terminated", async () => {
    const id = await session();
    await appendEvents(deps, id, [
      draft("session.status_running"),
      draft("user.define_outcome", { outcome_id: "outc_1", description: "d" }),
      draft("session.usage", { usage: { input_tokens: 5 } }),
    ]);
    const live = await row(id);
    expect(live.status).toBe("running");
    expect(JSON.parse(live.body)).toMatchObject({
      status: "running",
      usage: { input_tokens: 5 },
      outcome_evaluations: [{ type: "outcome_evaluation", outcome_id: "outc_1", description: "d", result: "pending", iteration: 0 }],
    });
    await appendEvents(deps, id, [draft("session.status_idle")]);
    expect((await row(id)).status).toBe("idle");

    const archived = await session({ archived: true });
    await store.storage.db.updateTable("sessions").set({ status: "terminated" }).where("id", "=", archived).execute();
    await appendEvents(deps, archived, [draft("session.status_idle")]);
    expect((await row(archived)).status).toBe("terminated");
  });

  it("wakes the session's readers once its append committed: never before the commit, never after a rollback", async () => {
    const id = await session();
    let wakes = 0;
    const unsubscribe = store.storage.bus.subscribe(sessionTopic(id), () => wakes++);
    const settled = () => markerSeen(store.storage.bus);
    try {
      await appendEvents(deps, id, [draft("agent.message")]);
      await settled();
      expect(wakes).toBe(1);

      await store.storage.db.transaction().execute(async (trx) => {
        await appendEvents(deps, id, [draft("agent.message")], { trx });
        await settled();
        expect(wakes).toBe(1);
      });
      // The caller's part: on a transactional bus (Postgres) the commit itself published.
      await notifyAppended(deps, id);
      await settled();
      expect(wakes).toBe(2);

      const rolledBack = store.storage.db.transaction().execute(async (trx) => {
        await appendEvents(deps, id, [draft("agent.message")], { trx });
        throw new Error("roll back");
      });
      await expect(rolledBack).rejects.toThrow("roll back");
      await settled();
      expect(wakes).toBe(2);
      expect((await row(id)).last_seq).toBe(2);
    } finally {
      unsubscribe();
    }
  });

  it("wakes this process's readers by the time the append returns, also after an append that only found its dedupe key", async () => {
    const id = await session();
    let wakes = 0;
    const unsubscribe = store.storage.bus.subscribe(sessionTopic(id), () => wakes++);
    try {
      await appendEvents(deps, id, [draft("agent.message", {}, "k")]);
      expect(wakes).toBe(1);
      // Nothing added: on Postgres its reservation still queued a wake-up, which must not throw the next one's pairing off.
      await appendEvents(deps, id, [draft("agent.message", {}, "k")]);
      await markerSeen(store.storage.bus);
      const before = wakes;
      await appendEvents(deps, id, [draft("agent.thinking", {}, "k2")]);
      expect(wakes).toBe(before + 1);
      // The commit's own delivery (Postgres) does not wake them again.
      await markerSeen(store.storage.bus);
      expect(wakes).toBe(before + 1);
    } finally {
      unsubscribe();
    }
  });

  it("refuses a missing session with a 404 and appends nothing", async () => {
    const err = await appendEvents(deps, "sesn_missing", [draft("agent.message")]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect((err as ApiError).status).toBe(404);
    expect(await seqs("sesn_missing")).toEqual([]);
  });
});
