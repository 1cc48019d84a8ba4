/**
 * Two real `openma serve` processes with their brains on, sharing one
 * Postgres schema, and 50 sessions each sending a user message at once
 * (half through each process): every turn runs exactly once. Counted twice:
 * in the scripted model's request log (one request per session, keyed by
 * `metadata.user_id`, which the harness sets to the session id) and in the
 * event log (one `agent.message` and one ending idle per session).
 * Completion is observed through the Postgres change bus, never by waiting
 * on time.
 */
import { EXECUTION_TOPIC } from "@openma/execution/queue";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ChildServer, startChildServer } from "../support/child-server.ts";
import { TEST_API_KEY } from "../support/server.ts";

const SESSIONS = 50;
const MODEL_KEY = "sk-scripted-exactly-once";

describe("exactly-once turns across two server processes (postgres)", () => {
  let store: TestStorage;
  let model: ScriptedModel;
  const servers: ChildServer[] = [];

  beforeAll(async () => {
    store = await openTestStorage("postgres");
    // A short first-byte delay keeps turns in flight while the other process is claiming.
    model = await startScriptedModel({ apiKey: MODEL_KEY, script: [{ response: "done", times: 10_000, delay: { first_byte_ms: 25 } }] });
    const env = {
      OPENMA_BRAIN: "on",
      OPENMA_MODEL_BASE_URL: model.url,
      OPENMA_MODEL_API_KEY: MODEL_KEY,
      OPENMA_EXECUTION_CONCURRENCY: "8",
    };
    servers.push(...(await Promise.all([startChildServer(store, TEST_API_KEY, env), startChildServer(store, TEST_API_KEY, env)])));
  });
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.close()));
    await model?.close();
    await store?.cleanup();
  });

  /** Resolves once `done()` holds, re-checking on every session or queue notification of either process. */
  async function whenAll(sessionIds: string[], done: () => Promise<boolean>): Promise<void> {
    const { bus } = store.storage;
    let wake: () => void = () => {};
    const unsubscribes = [...sessionIds.map((id) => `session:${id}`), EXECUTION_TOPIC].map((topic) => bus.subscribe(topic, () => wake()));
    try {
      for (;;) {
        const woken = new Promise<void>((resolve) => {
          wake = resolve;
        });
        if (await done()) return;
        // Releasing a claim back to idle publishes nothing, and it lands after the
        // session's final idle event: re-check on a short poll as well.
        const poll = setTimeout(() => wake(), 250);
        await woken;
        clearTimeout(poll);
      }
    } finally {
      for (const u of unsubscribes) u();
    }
  }

  it("runs each of 50 concurrent turns exactly once", { timeout: 240_000 }, async () => {
    const [a, b] = servers as [ChildServer, ChildServer];
    const environmentId = (await a.client.beta.environments.create({ name: "cloud" })).id;
    const agentId = (await a.client.beta.agents.create({ name: "once", model: "claude-test-1" })).id;
    const ids = await Promise.all(
      Array.from(
        { length: SESSIONS },
        async (_, i) => (await (i % 2 ? a : b).client.beta.sessions.create({ agent: agentId, environment_id: environmentId })).id,
      ),
    );
    await Promise.all(
      ids.map((id, i) =>
        (i % 2 ? b : a).client.beta.sessions.events.send(id, {
          events: [{ type: "user.message", content: [{ type: "text", text: `hello ${id}` }] }],
        }),
      ),
    );

    const { db } = store.storage;
    const countOf = async (type: string) => {
      const rows = await db
        .selectFrom("session_events")
        .select((eb) => ["session_id", eb.fn.countAll<number>().as("n")])
        .where("session_id", "in", ids)
        .where("type", "=", type)
        .groupBy("session_id")
        .execute();
      return new Map(rows.map((r) => [r.session_id, Number(r.n)]));
    };
    // Every session answered, and every queue row released (so no attempt is still running anywhere).
    await whenAll(ids, async () => {
      const idles = await countOf("session.status_idle");
      if (idles.size < SESSIONS) return false;
      const busy = await db
        .selectFrom("session_executions")
        .select("session_id")
        .where("session_id", "in", ids)
        .where("state", "!=", "idle")
        .execute();
      return busy.length === 0;
    });
    await model.idle();

    const requests = new Map<string, number>();
    for (const r of model.requests) {
      const sessionId = (r.body as { metadata?: { user_id?: string } }).metadata?.user_id;
      if (sessionId) requests.set(sessionId, (requests.get(sessionId) ?? 0) + 1);
    }
    const messages = await countOf("agent.message");
    const idles = await countOf("session.status_idle");
    for (const id of ids) {
      expect({ id, requests: requests.get(id), messages: messages.get(id), idles: idles.get(id) }).toEqual({
        id,
        requests: 1,
        messages: 1,
        idles: 1,
      });
    }
    expect(model.requests).toHaveLength(SESSIONS);

    // Both processes took part: the last owner of each row names its process.
    const owners = await db.selectFrom("session_executions").select("owner_id").where("session_id", "in", ids).execute();
    const processes = new Set(owners.map((o) => o.owner_id?.split(":")[0]));
    expect(processes.size).toBe(2);
  });
});
