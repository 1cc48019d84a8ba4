/**
 * A dream attempt that dies after its start step committed (here: the model
 * answers 500, a retryable failure the worker meets with a new attempt, as
 * it would a crashed process's expired lease) is simply run again: the
 * second attempt finds the output store already recorded, creates no other
 * one, and completes. The model is the scripted model behind the harness's
 * own model port (the official SDK), as in `openma serve`.
 */
import { runDream } from "@openma/api";
import { createAnthropicModel } from "@openma/harness";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { ManualClock } from "@openma/storage";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { automationDeps, inProcessClient } from "../support/automation.ts";

const KEY = "sk-ant-api03-dream-rerun-key-0123456789";
const MODEL_KEY = "sk-ant-api03-dream-rerun-model-0123456789";
const RESULT = { memories: [{ path: "/facts.md", content: "One fact, merged." }] };

describe.each(BACKENDS)("a dream re-run after a failed attempt on %s", (dialect) => {
  let store: TestStorage;
  let model: ScriptedModel;
  beforeAll(async () => {
    store = await openTestStorage(dialect);
    model = await startScriptedModel({
      apiKey: MODEL_KEY,
      script: [{ error: { status: 500, message: "upstream fell over" } }, { response: JSON.stringify(RESULT) }],
    });
  });
  afterAll(async () => {
    await model?.close();
    await store?.cleanup();
  });

  it("writes one output store, once", async () => {
    const deps = automationDeps(store.storage, new ManualClock(Date.parse("2026-06-01T00:00:00.000Z")), KEY);
    const client = inProcessClient(deps, KEY);
    const memoryStore = await client.beta.memoryStores.create({ name: "facts" });
    await client.beta.memoryStores.memories.create(memoryStore.id, { path: "/a.md", content: "Fact, first telling." });
    await client.beta.memoryStores.memories.create(memoryStore.id, { path: "/b.md", content: "Fact, second telling." });
    const agent = await client.beta.agents.create({ name: "a", model: "claude-sonnet-4-5" });
    const env = await client.beta.environments.create({ name: "e" });
    const session = await client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    const dream = await client.beta.dreams.create({
      inputs: [
        { type: "memory_store", memory_store_id: memoryStore.id },
        { type: "sessions", session_ids: [session.id] },
      ],
      model: "claude-dream-1",
    });
    const port = createAnthropicModel({ baseURL: model.url, apiKey: MODEL_KEY });
    const job = { storage: store.storage, clock: deps.clock, ids: deps.ids, model: port };

    await expect(runDream(job, dream.id, new AbortController().signal)).rejects.toThrow(/upstream fell over/);
    const midway = await client.beta.dreams.retrieve(dream.id);
    expect(midway.status).toBe("running");
    const output = midway.outputs[0]?.memory_store_id as string;
    expect(output).toMatch(/^memstore_/);

    await runDream(job, dream.id, new AbortController().signal);
    const done = await client.beta.dreams.retrieve(dream.id);
    expect(done).toMatchObject({ status: "completed", outputs: [{ type: "memory_store", memory_store_id: output }] });
    const stores = await store.storage.db.selectFrom("memory_stores").select("id").execute();
    expect(stores.map((s) => s.id).sort()).toEqual([memoryStore.id, output].sort());
    const memories = await client.beta.memoryStores.memories.list(output, { view: "full" });
    expect(memories.data.map((m) => (m.type === "memory" ? [m.path, m.content] : []))).toEqual([["/facts.md", "One fact, merged."]]);
    // A third run (a stale attempt) finds the dream ended and changes nothing.
    await runDream(job, dream.id, new AbortController().signal);
    expect(await client.beta.dreams.retrieve(dream.id)).toEqual(done);
    expect(model.requests).toHaveLength(2);
  });

  it("fails a dream whose inputs cannot fit one request, before it creates an output store", async () => {
    const deps = automationDeps(store.storage, new ManualClock(Date.parse("2026-06-02T00:00:00.000Z")), KEY);
    const client = inProcessClient(deps, KEY);
    const big = await client.beta.memoryStores.create({ name: "big" });
    for (let i = 0; i < 7; i++) await client.beta.memoryStores.memories.create(big.id, { path: `/m${i}.md`, content: "x".repeat(100_000) });
    const [session] = (await client.beta.sessions.list()).data;
    const dream = await client.beta.dreams.create({
      inputs: [
        { type: "memory_store", memory_store_id: big.id },
        { type: "sessions", session_ids: [session?.id as string] },
      ],
      model: "claude-dream-1",
    });
    const before = await store.storage.db.selectFrom("memory_stores").select("id").execute();
    const port = createAnthropicModel({ baseURL: model.url, apiKey: MODEL_KEY });
    await runDream({ storage: store.storage, clock: deps.clock, ids: deps.ids, model: port }, dream.id, new AbortController().signal);
    const failed = await client.beta.dreams.retrieve(dream.id);
    expect(failed).toMatchObject({ status: "failed", outputs: [], error: { type: "input_too_large" } });
    expect(await store.storage.db.selectFrom("memory_stores").select("id").execute()).toEqual(before);
    expect(model.requests).toHaveLength(2);
  });
});
