/** Scripted delays run on an injected scheduler: tests hold and release the server by hand. */
import Anthropic, { APIConnectionError, APIUserAbortError } from "@anthropic-ai/sdk";
import { afterEach, describe, expect, it } from "vitest";
import { ManualScheduler, type ScriptedModel, type ScriptInput, startScriptedModel } from "./index.ts";

let model: ScriptedModel | null = null;

afterEach(async () => {
  await model?.close();
  model = null;
});

async function start(script: ScriptInput) {
  const scheduler = new ManualScheduler();
  model = await startScriptedModel({ script, scheduler });
  return { model, scheduler, client: new Anthropic({ baseURL: model.url, apiKey: "any", maxRetries: 0 }) };
}

const ask = { model: "claude-test-1", max_tokens: 64, messages: [{ role: "user" as const, content: "hi" }] };

/** Flag that flips when a promise settles, to show a response has not arrived yet. */
function track<T>(p: Promise<T>): { settled: () => boolean } {
  let done = false;
  p.then(
    () => (done = true),
    () => (done = true),
  );
  return { settled: () => done };
}

describe("time to first byte", () => {
  it("holds a JSON response until the scheduler reaches the delay", async () => {
    const { client, scheduler, model } = await start([{ delay: { first_byte_ms: 5000 }, response: "late" }]);
    const pending = client.messages.create(ask);
    const state = track(pending);
    await scheduler.untilSleeping();
    expect(scheduler.pending).toEqual([5000]);
    scheduler.advance(4999);
    expect(scheduler.pending).toEqual([5000]);
    expect(state.settled()).toBe(false);
    scheduler.advance(1);
    expect((await pending).content).toEqual([expect.objectContaining({ text: "late" })]);
    expect(model.requests[0]!.received_at).toBe("2026-01-01T00:00:00.000Z");
  });

  it("holds a stream's headers until the delay passes", async () => {
    const { client, scheduler } = await start([{ delay: { first_byte_ms: 250 }, response: "streamed late" }]);
    const stream = client.messages.stream(ask);
    let connected = false;
    stream.on("connect", () => {
      connected = true;
    });
    await scheduler.untilSleeping();
    expect(connected).toBe(false);
    scheduler.advance(250);
    const msg = await stream.finalMessage();
    expect(connected).toBe(true);
    expect(msg.content).toEqual([expect.objectContaining({ text: "streamed late" })]);
  });
});

describe("per-chunk delay", () => {
  it("waits chunk_ms before every event after the first", async () => {
    const text = "twelve chars";
    const { client, scheduler } = await start([
      { delay: { chunk_ms: 40 }, response: { content: [{ type: "text", text }], chunk_chars: 4 } },
    ]);
    const stream = client.messages.stream(ask);
    const seen: string[] = [];
    stream.on("streamEvent", (e) => seen.push(e.type));
    const done = stream.finalMessage();
    let advances = 0;
    for (;;) {
      const next = await Promise.race([scheduler.untilSleeping().then(() => "sleep" as const), done.then(() => "done" as const)]);
      if (next === "done") break;
      expect(scheduler.pending).toEqual([40]);
      // Sleeping before event k (k ≥ 1) means at most k events were sent: the client cannot be ahead.
      expect(seen.length).toBeLessThanOrEqual(advances + 1);
      scheduler.advance(40);
      advances++;
    }
    // message_start, ping, block start, 3 text deltas, block stop, message_delta, message_stop = 9 events, 8 gaps.
    expect(advances).toBe(8);
    expect((await done).content).toEqual([expect.objectContaining({ text })]);
  });
});

describe("abandoned requests", () => {
  it("hands the turn back when the client aborts during a delay", async () => {
    const { client, scheduler, model } = await start([
      { delay: { first_byte_ms: 1000 }, response: "first turn" },
      { response: "second turn" },
    ]);
    const abort = new AbortController();
    const pending = client.messages.create(ask, { signal: abort.signal });
    await scheduler.untilSleeping();
    abort.abort();
    await expect(pending).rejects.toBeInstanceOf(APIUserAbortError);
    await model.idle();
    expect(model.requests[0]).toMatchObject({ outcome: "aborted", turn: 0 });
    expect(scheduler.pending).toEqual([]); // the server's sleep was cancelled, not left to fire
    const retry = client.messages.create(ask);
    await scheduler.untilSleeping();
    scheduler.advance(1000);
    expect((await retry).content).toEqual([expect.objectContaining({ text: "first turn" })]);
  });

  it("hands the turn back when a stream is abandoned mid-way", async () => {
    const { client, scheduler, model } = await start([{ delay: { chunk_ms: 10 }, response: "complete answer" }]);
    const stream = client.messages.stream(ask);
    const firstEvent = new Promise<void>((resolve) => stream.once("streamEvent", () => resolve()));
    const ended = stream.finalMessage().catch((e: unknown) => e);
    await firstEvent;
    stream.abort();
    expect(await ended).toBeInstanceOf(APIUserAbortError);
    await model.idle();
    expect(model.requests[0]).toMatchObject({ outcome: "aborted", turn: 0 });
    expect(model.unusedTurns()).toEqual([{ session_key: null, index: 0, label: null, remaining: 1 }]);
    expect(scheduler.pending).toEqual([]);
  });

  it("closes promptly while a request is held by a delay", async () => {
    const { client, scheduler, model } = await start([{ delay: { first_byte_ms: 60_000 }, response: "never" }]);
    const pending = client.messages.create(ask).catch((e: unknown) => e);
    await scheduler.untilSleeping();
    await model.close();
    expect(await pending).toBeInstanceOf(APIConnectionError);
    await model.idle();
    expect(model.requests[0]!.outcome).toBe("aborted");
  });
});
