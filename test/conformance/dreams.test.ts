/**
 * Dreams through the official SDK, on both storage backends, with the brain
 * on and the scripted model as the model: every method (create, retrieve,
 * list, cancel, archive); a dream over a store with conflicting memories and
 * a session that settles the conflict produces a reorganized NEW store while
 * the input store stays exactly as it was; `update_existing` rewrites the
 * input store with memory versions attributed to the dream's creator and
 * holds the store against a second such dream (409); a dream canceled while
 * its model request is in flight writes nothing.
 */
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { BACKENDS } from "@openma/storage/testing";
import { ManualScheduler } from "@openma/time";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { errorOf } from "../support/sdk-errors.ts";
import { startTestServer, type TestServer } from "../support/server.ts";
import { until } from "../support/until.ts";

const MODEL_KEY = "sk-ant-api03-dream-model-key-0123456789";
const REORGANIZE = "reorganize an agent's memory store";
const MERGED = {
  memories: [
    {
      path: "/preferences/coffee.md",
      content: "Takes coffee with oat milk (said so on 2026-05-02; older notes saying black are obsolete).",
    },
    { path: "/team.md", content: "Works on the payments team." },
  ],
};
const IN_PLACE = { memories: [{ path: "/preferences/coffee.md", content: "Oat milk." }] };

describe.each(BACKENDS)("dreams on %s", (dialect) => {
  let model: ScriptedModel;
  let held: ManualScheduler;
  let t: TestServer;
  let storeId: string;
  let sessionId: string;

  beforeAll(async () => {
    held = new ManualScheduler();
    model = await startScriptedModel({
      apiKey: MODEL_KEY,
      scheduler: held,
      script: [
        // Held until the test advances the model's clock: the cancel test's dream is mid-request meanwhile.
        {
          label: "held",
          match: { system_matches: "HOLD-ME" },
          delay: { first_byte_ms: 60_000 },
          response: JSON.stringify({ memories: [{ path: "/never.md", content: "never written" }] }),
        },
        { label: "in-place", match: { system_matches: "IN-PLACE" }, response: JSON.stringify(IN_PLACE) },
        { label: "merge", match: { system_matches: REORGANIZE }, response: `Here is the set:\n${JSON.stringify(MERGED)}` },
        // Last: a dream's prompt quotes the session, so the dream turns (guarded by their system prompt) come first.
        { label: "session", match: { last_user_text_contains: "oat milk" }, response: "Noted: oat milk from now on." },
      ],
    });
    t = await startTestServer(dialect, {
      OPENMA_BRAIN: "on",
      OPENMA_MODEL_BASE_URL: model.url,
      OPENMA_MODEL_API_KEY: MODEL_KEY,
      OPENMA_WEBHOOKS: "off",
    });
    // Webhooks stay undelivered here (OPENMA_WEBHOOKS off): the outbox shows what a dream reports.
    await t.client.beta.organization.webhooks.create(
      { url: "https://hooks.example.com/openma", enabled_events: ["memory_store.created"] as never },
      { headers: { "anthropic-beta": "webhooks-2026-10-07" } },
    );
    const store = await t.client.beta.memoryStores.create({ name: "user notes" });
    storeId = store.id;
    await t.client.beta.memoryStores.memories.create(storeId, { path: "/preferences/coffee.md", content: "Drinks coffee black." });
    await t.client.beta.memoryStores.memories.create(storeId, { path: "/preferences/coffee-2.md", content: "Takes milk in coffee." });
    await t.client.beta.memoryStores.memories.create(storeId, { path: "/team.md", content: "Works on the payments team." });
    const env = await t.client.beta.environments.create({ name: "cloud" });
    const agent = await t.client.beta.agents.create({ name: "barista", model: "claude-sonnet-4-5" });
    const session = await t.client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    sessionId = session.id;
    await t.client.beta.sessions.events.send(sessionId, {
      events: [{ type: "user.message", content: [{ type: "text", text: "Remember: I switched to oat milk." }] }],
    });
    await until(
      async () => (await t.client.beta.sessions.events.list(sessionId)).data.some((e) => e.type === "agent.message"),
      "the session's answer",
    );
  }, 120_000);
  afterAll(async () => {
    await t?.close();
    await model?.close();
  });

  async function settled(id: string) {
    await until(async () => ["completed", "failed", "canceled"].includes((await t.client.beta.dreams.retrieve(id)).status), `dream ${id}`);
    return t.client.beta.dreams.retrieve(id);
  }

  async function memoriesOf(store: string) {
    const page = await t.client.beta.memoryStores.memories.list(store, { view: "full" });
    return page.data
      .flatMap((m) => (m.type === "memory" ? [{ path: m.path, content: m.content, version: m.memory_version_id }] : []))
      .sort((a, b) => a.path.localeCompare(b.path));
  }

  it("writes a reorganized new store from the memories and the session, leaving the input store untouched", async () => {
    const before = await memoriesOf(storeId);
    const created = await t.client.beta.dreams.create({
      inputs: [
        { type: "memory_store", memory_store_id: storeId },
        { type: "sessions", session_ids: [sessionId] },
      ],
      model: "claude-dream-1",
    });
    expect(created).toMatchObject({
      type: "dream",
      status: "pending",
      outputs: [],
      output_behavior: { type: "create_new" },
      model: { id: "claude-dream-1", speed: "standard" },
      instructions: null,
      error: null,
      archived_at: null,
      ended_at: null,
      usage: { input_tokens: 0, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    });
    expect(created.id).toMatch(/^drm_/);
    const done = await settled(created.id);
    expect(done.status).toBe("completed");
    expect(done.ended_at).not.toBeNull();
    expect(done.usage.output_tokens).toBeGreaterThan(0);
    const output = done.outputs[0]?.memory_store_id as string;
    expect(output).toMatch(/^memstore_/);
    expect(output).not.toBe(storeId);

    // The model saw both conflicting memories and the session that settles them.
    const asked = model.requests.find((r) => JSON.stringify(r.body).includes(REORGANIZE));
    const prompt = JSON.stringify(asked?.body);
    expect(prompt).toContain("Drinks coffee black.");
    expect(prompt).toContain("Takes milk in coffee.");
    expect(prompt).toContain("I switched to oat milk.");
    expect(prompt).toContain("Noted: oat milk from now on.");

    expect((await memoriesOf(output)).map(({ path, content }) => ({ path, content }))).toEqual(MERGED.memories);
    expect(await memoriesOf(storeId)).toEqual(before);
    // The new store's history: the copy of the input, then the dream's changes.
    const versions = await t.client.beta.memoryStores.memoryVersions.list(output);
    const ops = versions.data.map((v) => `${v.operation} ${v.path}`).sort();
    expect(ops).toEqual([
      "created /preferences/coffee-2.md",
      "created /preferences/coffee.md",
      "created /team.md",
      "deleted /preferences/coffee-2.md",
      "modified /preferences/coffee.md",
    ]);
    expect((await t.client.beta.memoryStores.retrieve(output)).name).toContain(created.id);
    const outbox = await t.store.storage.db.selectFrom("webhook_deliveries").select(["event_type", "payload"]).execute();
    expect(outbox.filter((d) => (JSON.parse(d.payload) as { data: { id: string } }).data.id === output).map((d) => d.event_type)).toEqual([
      "memory_store.created",
    ]);
  }, 120_000);

  it("update_existing rewrites the input store with versions and holds it against a second such dream", async () => {
    const store = await t.client.beta.memoryStores.create({ name: "in place" });
    await t.client.beta.memoryStores.memories.create(store.id, { path: "/preferences/coffee.md", content: "Black." });
    await t.client.beta.memoryStores.memories.create(store.id, { path: "/preferences/tea.md", content: "No tea." });
    const inputs = [
      { type: "memory_store" as const, memory_store_id: store.id },
      { type: "sessions" as const, session_ids: [sessionId] },
    ];
    const holding = await t.client.beta.dreams.create({
      inputs,
      model: { id: "claude-dream-1", speed: "standard" },
      instructions: "HOLD-ME",
      output_behavior: { type: "update_existing", memory_store_id: store.id },
    });
    await held.untilSleeping(1);
    const conflict = await errorOf(
      t.client.beta.dreams.create({
        inputs,
        model: "claude-dream-1",
        output_behavior: { type: "update_existing", memory_store_id: store.id },
      }),
    );
    expect(conflict.status).toBe(409);
    expect(conflict.message).toContain(holding.id);
    // Cancel the held one: its model answer arrives afterwards and is not written.
    const canceled = await t.client.beta.dreams.cancel(holding.id);
    expect(canceled).toMatchObject({ status: "canceled", outputs: [{ type: "memory_store", memory_store_id: store.id }] });
    expect(await t.client.beta.dreams.cancel(holding.id)).toEqual(canceled);
    held.advance(60_000);
    await model.idle();

    const dream = await t.client.beta.dreams.create({
      inputs,
      model: "claude-dream-1",
      instructions: "IN-PLACE",
      output_behavior: { type: "update_existing", memory_store_id: store.id },
    });
    expect((await settled(dream.id)).status).toBe("completed");
    expect((await settled(holding.id)).status).toBe("canceled");
    expect((await memoriesOf(store.id)).map(({ path, content }) => ({ path, content }))).toEqual(IN_PLACE.memories);
    const versions = await t.client.beta.memoryStores.memoryVersions.list(store.id);
    const latest = versions.data.filter((v) => v.operation !== "created").map((v) => `${v.operation} ${v.path}`);
    expect(latest.sort()).toEqual(["deleted /preferences/tea.md", "modified /preferences/coffee.md"]);
    expect(versions.data.every((v) => v.created_by?.type === "api_actor")).toBe(true);
  }, 120_000);

  it("lists, filters, archives and refuses what the API refuses", async () => {
    const all = [];
    for await (const d of t.client.beta.dreams.list({ limit: 1 })) all.push(d);
    expect(all.length).toBe(3);
    expect(all.map((d) => d.created_at)).toEqual([...all.map((d) => d.created_at)].sort().reverse());
    const canceled = await t.client.beta.dreams.list({ statuses: ["canceled"] });
    expect(canceled.data.map((d) => d.status)).toEqual(["canceled"]);
    const target = all[0] as (typeof all)[number];
    const archived = await t.client.beta.dreams.archive(target.id);
    expect(archived.archived_at).not.toBeNull();
    expect(await t.client.beta.dreams.archive(target.id)).toEqual(archived);
    expect((await t.client.beta.dreams.list()).data.map((d) => d.id)).not.toContain(target.id);
    expect((await t.client.beta.dreams.list({ include_archived: true })).data.map((d) => d.id)).toContain(target.id);
    expect(await t.client.beta.dreams.retrieve(target.id)).toEqual(archived);
    const later = await t.client.beta.dreams.list({ "created_at[gt]": new Date(Date.now() + 60_000).toISOString() });
    expect(later.data).toEqual([]);

    expect((await errorOf(t.client.beta.dreams.cancel(target.id))).status).toBe(400);
    expect((await errorOf(t.client.beta.dreams.retrieve("drm_missing"))).status).toBe(404);
    const base = { model: "claude-dream-1" };
    const noSessions = t.client.beta.dreams.create({ ...base, inputs: [{ type: "memory_store", memory_store_id: storeId }] });
    expect((await errorOf(noSessions)).status).toBe(400);
    const ghost = t.client.beta.dreams.create({
      ...base,
      inputs: [
        { type: "memory_store", memory_store_id: storeId },
        { type: "sessions", session_ids: ["sesn_missing"] },
      ],
    });
    expect((await errorOf(ghost)).status).toBe(404);
    const fast = t.client.beta.dreams.create({
      model: { id: "claude-dream-1", speed: "fast" },
      inputs: [
        { type: "memory_store", memory_store_id: storeId },
        { type: "sessions", session_ids: [sessionId] },
      ],
    });
    expect((await errorOf(fast)).status).toBe(400);
  });
});
