/**
 * The execution worker on real storage (both backends) and virtual time:
 * claim, renewal, loss, crash-and-reclaim, release, interrupts, retries,
 * the concurrency limit and graceful shutdown. Turns are driven by the test
 * through a controllable runner; nothing waits on the wall clock.
 */
import { sessionTopic as apiSessionTopic, appendEvents, type EventLogDeps, notifySession } from "@openma/api";
import { newId, systemClock } from "@openma/storage";
import { BACKENDS, insertTestSession, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { ManualScheduler } from "@openma/time";
import { afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { claimNext, EXECUTION_TOPIC, executionRow, forgetSession, renewClaim, requestTurn } from "./queue.ts";
import type { TurnOutcome, TurnRunner } from "./runner.ts";
import { sessionTopic } from "./watch.ts";
import { ExecutionWorker, type ExecutionWorkerOptions, type WorkerEvent } from "./worker.ts";

const TTL = 30_000;

interface Run {
  sessionId: string;
  signal: AbortSignal;
  finish(outcome?: TurnOutcome): void;
  fail(err: Error): void;
}

/** A runner whose turns end when the test says so (or at once in `auto` mode); an abort ends a turn as interrupted. */
class ControlledRunner implements TurnRunner {
  runs: Run[] = [];
  auto = false;
  throwing = false;
  /** Whether a session still has unanswered input; a finished turn answers it. */
  readonly wants = new Map<string, boolean>();
  #waiters: Array<() => void> = [];

  async needsTurn(sessionId: string): Promise<boolean> {
    return this.wants.get(sessionId) ?? true;
  }

  readonly gaveUp: Array<{ sessionId: string; error: string; attempts: number; generation: number }> = [];
  giveUpFails = false;

  async giveUp(sessionId: string, input: { error: string; attempts: number; generation: number }): Promise<void> {
    if (this.giveUpFails) throw new Error("database went away");
    this.gaveUp.push({ sessionId, ...input });
    this.wants.set(sessionId, false);
  }

  runTurn(sessionId: string, signal: AbortSignal): Promise<TurnOutcome> {
    if (this.throwing) return Promise.reject(new Error("model port exploded"));
    return new Promise<TurnOutcome>((resolve, reject) => {
      const run: Run = {
        sessionId,
        signal,
        finish: (outcome = { type: "idle", stopReason: "end_turn" }) => {
          this.wants.set(sessionId, false);
          resolve(outcome);
        },
        fail: reject,
      };
      signal.addEventListener("abort", () => resolve({ type: "interrupted" }), { once: true });
      this.runs.push(run);
      for (const w of this.#waiters.splice(0)) w();
      if (this.auto) run.finish();
    });
  }

  /** Resolves with run number `n` (1-based) once it has started. */
  async run(n: number): Promise<Run> {
    while (this.runs.length < n) await new Promise<void>((resolve) => this.#waiters.push(resolve));
    return this.runs[n - 1] as Run;
  }
}

/** Collects worker events and lets a test await one. */
class Recorder {
  events: WorkerEvent[] = [];
  #waiters: Array<() => void> = [];
  readonly push = (event: WorkerEvent): void => {
    this.events.push(event);
    for (const w of this.#waiters.splice(0)) w();
  };
  async until<T extends WorkerEvent>(match: (e: WorkerEvent) => e is T, nth = 1): Promise<T> {
    for (;;) {
      const found = this.events.filter(match);
      if (found.length >= nth) return found[nth - 1] as T;
      await new Promise<void>((resolve) => this.#waiters.push(resolve));
    }
  }
}

const ended =
  (sessionId: string) =>
  (e: WorkerEvent): e is Extract<WorkerEvent, { type: "ended" }> =>
    e.type === "ended" && e.sessionId === sessionId;
const claimed =
  (sessionId: string) =>
  (e: WorkerEvent): e is Extract<WorkerEvent, { type: "claimed" }> =>
    e.type === "claimed" && e.sessionId === sessionId;
const renewed =
  (sessionId: string) =>
  (e: WorkerEvent): e is Extract<WorkerEvent, { type: "renewal" }> =>
    e.type === "renewal" && e.sessionId === sessionId;

describe.each(BACKENDS)("execution worker on %s", (dialect) => {
  let t: TestStorage;
  let deps: EventLogDeps;
  let clock: ManualScheduler;
  let runner: ControlledRunner;
  let recorder: Recorder;
  const workers: ExecutionWorker[] = [];

  beforeAll(async () => {
    t = await openTestStorage(dialect);
    deps = { storage: t.storage, clock: systemClock, ids: newId };
    return () => t.cleanup();
  });
  beforeEach(() => {
    clock = new ManualScheduler();
    runner = new ControlledRunner();
    recorder = new Recorder();
  });
  afterEach(async () => {
    runner.auto = true;
    for (const r of runner.runs) r.finish();
    await Promise.all(workers.splice(0).map((w) => w.stop()));
    // Leave no claimable rows behind for the next test's workers.
    await t.storage.db
      .updateTable("session_executions")
      .set({ state: "idle", owner_id: null, token_hash: null, expires_at_ms: 0 })
      .execute();
  });

  function startWorker(opts: Partial<ExecutionWorkerOptions> = {}): ExecutionWorker {
    const worker = new ExecutionWorker({
      storage: t.storage,
      runner,
      scheduler: clock,
      leaseTtlMs: TTL,
      pollIntervalMs: 3_600_000,
      onEvent: recorder.push,
      ...opts,
    });
    workers.push(worker);
    worker.start();
    return worker;
  }

  const newSession = () => insertTestSession(t.storage);

  /** What the events route does: the event and the turn request in one transaction, then the wake-ups. */
  async function send(sessionId: string, type = "user.message"): Promise<void> {
    runner.wants.set(sessionId, true);
    await t.storage.db.transaction().execute(async (trx) => {
      await appendEvents(deps, sessionId, [{ type, fields: { content: [{ type: "text", text: "hi" }] }, dedupeKey: null }], { trx });
      await requestTurn(trx, sessionId, systemClock.now());
    });
    await notifySession(deps, sessionId);
    await t.storage.bus.publish(EXECUTION_TOPIC);
  }

  const row = async (sessionId: string) => executionRow(t.storage.db, sessionId);

  it("subscribes to the same session topic the event log publishes", () => {
    expect(sessionTopic("sesn_x")).toBe(apiSessionTopic("sesn_x"));
  });

  it("runs a pending session once on a bus wake-up and settles it idle", async () => {
    startWorker();
    const id = await newSession();
    await send(id);
    const run = await runner.run(1);
    expect(run.sessionId).toBe(id);
    expect(await row(id)).toMatchObject({ state: "running", generation: 1 });
    run.finish();
    const end = await recorder.until(ended(id));
    expect(end).toMatchObject({ result: { type: "ran", outcome: { type: "idle" } }, releasedAs: "idle" });
    expect(await row(id)).toMatchObject({ state: "idle", token_hash: null, attempts: 0 });
    expect(runner.runs).toHaveLength(1);
  });

  it("renews the lease on schedule while the turn runs", async () => {
    startWorker();
    const id = await newSession();
    await send(id);
    const run = await runner.run(1);
    const before = (await row(id))?.expires_at_ms ?? 0;
    await clock.untilSleeping(2); // the poll and the renewal schedule
    clock.advance(TTL / 3);
    const renewal = await recorder.until(renewed(id));
    expect(renewal).toMatchObject({ result: "renewed", expiresAt: clock.now() + TTL });
    expect((await row(id))?.expires_at_ms).toBe(clock.now() + TTL);
    expect(clock.now() + TTL).toBeGreaterThan(before);
    expect(run.signal.aborted).toBe(false);
  });

  it("aborts the turn when the lease is lost, and does not release it", async () => {
    startWorker();
    const id = await newSession();
    await send(id);
    const run = await runner.run(1);
    // Another process took the session over (as after a partition): our token no longer matches.
    await t.storage.db.updateTable("session_executions").set({ token_hash: "taken-over" }).where("session_id", "=", id).execute();
    await clock.untilSleeping(2);
    clock.advance(TTL / 3);
    const end = await recorder.until(ended(id));
    expect(run.signal.aborted).toBe(true);
    expect(end).toMatchObject({ result: { type: "lease_lost" }, releasedAs: null });
    expect(await row(id)).toMatchObject({ state: "running", token_hash: "taken-over" });
  });

  it("reclaims the lease of a crashed process after expiry and re-runs the turn", async () => {
    const id = await newSession();
    await send(id);
    // A process claims the session and dies without a word: no renewal, no release.
    const crashed = await claimNext(t.storage.db, dialect, { nowMs: clock.now(), ttlMs: TTL });
    expect(crashed?.sessionId).toBe(id);
    startWorker({ pollIntervalMs: 5_000 });
    await clock.untilSleeping(1);
    expect(runner.runs).toHaveLength(0); // still held
    clock.advance(TTL);
    const claim = await recorder.until(claimed(id));
    expect(claim).toMatchObject({ generation: 2, attempts: 2 });
    (await runner.run(1)).finish();
    expect(await recorder.until(ended(id))).toMatchObject({ releasedAs: "idle" });
    // The crashed holder is fenced out for good.
    if (crashed) expect(await renewClaim(t.storage.db, crashed, clock.now(), TTL)).toBeNull();
  });

  it("delivers a user.interrupt to the running turn at once, then runs again to answer it", async () => {
    startWorker();
    const id = await newSession();
    await send(id);
    const first = await runner.run(1);
    await send(id, "user.interrupt");
    const end = await recorder.until(ended(id));
    expect(first.signal.aborted).toBe(true);
    expect(end).toMatchObject({
      result: { type: "interrupted", reason: { type: "event", eventType: "user.interrupt" } },
      releasedAs: "pending",
    });
    const second = await runner.run(2);
    expect(second.sessionId).toBe(id);
    second.finish({ type: "interrupted" });
    expect(await recorder.until(ended(id), 2)).toMatchObject({ releasedAs: "idle" });
  });

  it("goes straight back to pending when input arrives during the turn", async () => {
    startWorker();
    const id = await newSession();
    await send(id);
    const first = await runner.run(1);
    await send(id);
    first.finish();
    runner.wants.set(id, true); // the second message is still unanswered
    expect(await recorder.until(ended(id))).toMatchObject({ releasedAs: "pending" });
    (await runner.run(2)).finish();
    expect(await recorder.until(ended(id), 2)).toMatchObject({ releasedAs: "idle" });
    expect(runner.runs).toHaveLength(2);
  });

  it("skips a session with nothing to answer", async () => {
    startWorker();
    const id = await newSession();
    await send(id);
    runner.wants.set(id, false);
    // The request is claimed; the runner says the input was already answered.
    const end = await recorder.until(ended(id));
    expect(end).toMatchObject({ result: { type: "skipped" }, releasedAs: "idle" });
    expect(runner.runs).toHaveLength(0);
  });

  it("retries a runner that throws after a backoff, then gives up", async () => {
    runner.throwing = true;
    startWorker({ maxAttempts: 2, retryBackoffMs: () => 1_000, pollIntervalMs: 1_000 });
    const id = await newSession();
    await send(id);
    expect(await recorder.until(ended(id))).toMatchObject({
      result: { type: "threw", error: "model port exploded" },
      releasedAs: "pending",
    });
    expect(await row(id)).toMatchObject({ state: "pending", available_at_ms: clock.now() + 1_000, last_error: "model port exploded" });
    await clock.untilSleeping(1);
    clock.advance(1_000);
    expect(await recorder.until(ended(id), 2)).toMatchObject({ result: { type: "threw" }, releasedAs: "idle" });
    expect(await row(id)).toMatchObject({ state: "idle", attempts: 0 });
    // The session is told: the runner records the give-up (an error, then idle) under the last claim.
    expect(runner.gaveUp).toEqual([{ sessionId: id, error: "model port exploded", attempts: 2, generation: 2 }]);
  });

  it("still releases a given-up turn when recording the give-up fails", async () => {
    runner.throwing = true;
    runner.giveUpFails = true;
    startWorker({ maxAttempts: 1, retryBackoffMs: () => 1_000 });
    const id = await newSession();
    await send(id);
    expect(await recorder.until(ended(id))).toMatchObject({ result: { type: "threw" }, releasedAs: "idle" });
    expect(runner.gaveUp).toEqual([]);
  });

  it("settles a failed turn that answered its input, and retries one that did not", async () => {
    startWorker({ retryBackoffMs: () => 2_000, pollIntervalMs: 2_000 });
    const answered = await newSession();
    await send(answered);
    (await runner.run(1)).finish({ type: "failed", error: "no model key" });
    expect(await recorder.until(ended(answered))).toMatchObject({ releasedAs: "idle" });

    const blip = await newSession();
    await send(blip);
    const run = await runner.run(2);
    run.finish({ type: "failed", error: "database went away" });
    runner.wants.set(blip, true); // the turn did not get to answer
    expect(await recorder.until(ended(blip))).toMatchObject({ releasedAs: "pending" });
    expect(await row(blip)).toMatchObject({ available_at_ms: clock.now() + 2_000, last_error: "database went away" });
    await clock.untilSleeping(1);
    clock.advance(2_000);
    (await runner.run(3)).finish();
    expect(await recorder.until(ended(blip), 2)).toMatchObject({ releasedAs: "idle" });
  });

  it("never runs more turns at once than its concurrency limit", async () => {
    startWorker({ concurrency: 2 });
    const ids = [await newSession(), await newSession(), await newSession()];
    for (const id of ids) await send(id);
    const a = await runner.run(1);
    await runner.run(2);
    await recorder.until((e): e is WorkerEvent => e.type === "claimed", 2);
    expect(runner.runs).toHaveLength(2);
    expect(workers[0]?.active).toBe(2);
    a.finish();
    const third = await runner.run(3);
    expect(new Set(runner.runs.map((r) => r.sessionId))).toEqual(new Set(ids));
    expect(third.sessionId).not.toBe(a.sessionId);
  });

  it("hands running turns back as pending when stopped", async () => {
    const worker = startWorker();
    const id = await newSession();
    await send(id);
    const run = await runner.run(1);
    await worker.stop();
    expect(run.signal.aborted).toBe(true);
    expect(await recorder.until(ended(id))).toMatchObject({ result: { type: "shutdown" }, releasedAs: "pending" });
    expect(await row(id)).toMatchObject({ state: "pending", token_hash: null, attempts: 0 });
  });

  it("drains: claims nothing more and lets the running turn finish", async () => {
    const worker = startWorker();
    const first = await newSession();
    await send(first);
    const run = await runner.run(1);
    const drained = worker.drain(60_000);
    const second = await newSession();
    await send(second);
    run.finish();
    await drained;
    // It ran to its end ("ran", released idle), not cut short ("shutdown", handed back).
    expect(await recorder.until(ended(first))).toMatchObject({ result: { type: "ran" }, releasedAs: "idle" });
    // Left for another process: this one claimed nothing after the drain began.
    expect(runner.runs).toHaveLength(1);
    expect(await row(second)).toMatchObject({ state: "pending", generation: 0 });
  });

  it("hands back, at the drain deadline, a turn still running", async () => {
    const worker = startWorker();
    const id = await newSession();
    await send(id);
    const run = await runner.run(1);
    const drained = worker.drain(5_000);
    await clock.untilSleeping(3); // the poll, the renewal schedule and the drain deadline
    clock.advance(5_000);
    await drained;
    expect(run.signal.aborted).toBe(true);
    expect(await recorder.until(ended(id))).toMatchObject({ result: { type: "shutdown" }, releasedAs: "pending" });
    expect(await row(id)).toMatchObject({ state: "pending", token_hash: null });
  });

  it("runs every session exactly once with two workers competing", async () => {
    runner.auto = true;
    startWorker();
    startWorker();
    const ids: string[] = [];
    for (let i = 0; i < 20; i++) ids.push(await newSession());
    await Promise.all(ids.map((id) => send(id)));
    for (const id of ids) await recorder.until(ended(id));
    const counts = new Map<string, number>();
    for (const r of runner.runs) counts.set(r.sessionId, (counts.get(r.sessionId) ?? 0) + 1);
    expect([...counts.values()].every((n) => n === 1)).toBe(true);
    expect(counts.size).toBe(20);
  });

  it("stops a running turn when the session is deleted", async () => {
    startWorker();
    const id = await newSession();
    await send(id);
    const run = await runner.run(1);
    // What the delete route does: the log, the row and the execution row go in one transaction.
    await t.storage.db.transaction().execute(async (trx) => {
      await forgetSession(trx, id);
      await trx.deleteFrom("session_events").where("session_id", "=", id).execute();
      await trx.deleteFrom("sessions").where("id", "=", id).execute();
    });
    await notifySession(deps, id);
    expect(await recorder.until(ended(id))).toMatchObject({
      result: { type: "interrupted", reason: { type: "deleted" } },
      releasedAs: null,
    });
    expect(run.signal.aborted).toBe(true);
  });
});
