/**
 * The outbox is part of the change it reports: rows written by
 * recordWebhookEvents inside a transaction exist iff that transaction
 * commits, one per enabled endpoint subscribed to the event type, on both
 * storage backends.
 */
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { recordWebhookEvents } from "./outbox.ts";

class Rollback extends Error {}

describe.each(BACKENDS)("the webhook outbox on %s", (dialect) => {
  let t: TestStorage;
  let n = 0;
  const deps = { clock: { now: () => Date.parse("2026-06-01T00:00:00Z") }, ids: (prefix: string) => `${prefix}_${++n}` };
  const endpoint = (id: string, state: string, events: string[]) => ({
    id,
    body: JSON.stringify({ id, url: "https://hooks.example.com/x", enabled_events: events }),
    secret: "whsec_test",
    state,
    created_at: "2026-06-01T00:00:00.000Z",
  });
  const change = (type: string, id: string) => ({ type, id, orderKey: id, orderSeq: 1 });
  const deliveries = () =>
    t.storage.db.selectFrom("webhook_deliveries").select(["endpoint_id", "event_type", "payload"]).orderBy("endpoint_id").execute();

  beforeAll(async () => {
    t = await openTestStorage(dialect);
    await t.storage.db
      .insertInto("webhook_endpoints")
      .values([
        endpoint("whep_a", "enabled", ["session.created", "session.status_idled"]),
        endpoint("whep_b", "enabled", ["session.status_idled"]),
        endpoint("whep_off", "disabled", ["session.created"]),
      ])
      .execute();
  });
  afterAll(async () => t?.cleanup());

  it("writes nothing when the change's transaction rolls back", async () => {
    const attempt = t.storage.db.transaction().execute(async (trx) => {
      await recordWebhookEvents(trx, deps, [change("session.created", "sesn_rolled_back")]);
      throw new Rollback();
    });
    await expect(attempt).rejects.toBeInstanceOf(Rollback);
    expect(await deliveries()).toEqual([]);
  });

  it("writes one row per enabled, subscribed endpoint when it commits, each with the same event", async () => {
    await t.storage.db.transaction().execute(async (trx) => {
      await recordWebhookEvents(trx, deps, [change("session.created", "sesn_1"), change("session.status_idled", "sesn_1")]);
    });
    const rows = await deliveries();
    expect(rows.map((r) => [r.endpoint_id, r.event_type])).toEqual(
      expect.arrayContaining([
        ["whep_a", "session.created"],
        ["whep_a", "session.status_idled"],
        ["whep_b", "session.status_idled"],
      ]),
    );
    expect(rows).toHaveLength(3);
    const idled = rows.filter((r) => r.event_type === "session.status_idled").map((r) => JSON.parse(r.payload));
    expect(idled[0]).toEqual(idled[1]);
    expect(idled[0]).toMatchObject({ type: "event", data: { type: "session.status_idled", id: "sesn_1" } });
  });
});
