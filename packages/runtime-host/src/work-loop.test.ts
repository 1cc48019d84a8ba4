/**
 * The parts of the work loop that need no server: the ticket board the
 * runner reads its claimed item from, and the wait for a crashed owner's
 * fence (virtual time; the claim itself is covered by the e2e tests).
 */
import type { RuntimeRunResult } from "@openma/host";
import { ManualScheduler } from "@openma/time";
import { describe, expect, it } from "vitest";
import type { WorkTicket } from "./ama-worker-runner.ts";
import { runWaitingOutStaleFence, TicketBoard } from "./work-loop.ts";

const ticket = (workId: string, sessionId = "sesn_1", environmentId = "env_1"): WorkTicket => ({
  workId,
  environmentId,
  sessionId,
  secret: `secret-of-${workId}`,
  sessionsToken: `token-of-${workId}`,
});

describe("TicketBoard", () => {
  it("hands each scope its claimed item", () => {
    const board = new TicketBoard();
    const a = ticket("work_a", "sesn_a");
    const b = ticket("work_b", "sesn_b");
    board.set(a);
    board.set(b);
    expect(board.get({ environmentId: "env_1", sessionId: "sesn_a" })).toBe(a);
    expect(board.get({ environmentId: "env_1", sessionId: "sesn_b" })).toBe(b);
    expect(board.get({ environmentId: "env_2", sessionId: "sesn_a" })).toBeUndefined();
    expect(board.size).toBe(2);
  });

  it("deletes only its own ticket: a run that ends after a newer claim of its session leaves that claim in place", () => {
    const board = new TicketBoard();
    const scope = { environmentId: "env_1", sessionId: "sesn_1" };
    const older = ticket("work_old");
    const newer = ticket("work_new");
    board.set(older);
    board.set(newer);
    board.delete(older);
    expect(board.get(scope)).toBe(newer);
    board.delete(newer);
    expect(board.get(scope)).toBeUndefined();
    expect(board.size).toBe(0);
  });
});

const conflict = (holderExpiresAt: number): RuntimeRunResult => ({ type: "conflict", holderExpiresAt, trace: [] });
const cancelled: RuntimeRunResult = {
  type: "cancelled",
  generation: 2,
  stage: "run_harness",
  cleanup: { compute: "terminated", orphanIds: [] },
  trace: [],
};

/** A host-like `run` that answers with `results` in order and records the signal of each call. */
function scriptedRuns(...results: RuntimeRunResult[]) {
  const signals: AbortSignal[] = [];
  const run = async (signal: AbortSignal): Promise<RuntimeRunResult> => {
    signals.push(signal);
    const next = results.shift();
    if (!next) throw new Error("run called more often than scripted");
    return next;
  };
  return { run, signals };
}

describe("runWaitingOutStaleFence", () => {
  it("returns the first result that is not a conflict without waiting", async () => {
    const scheduler = new ManualScheduler();
    const stop = new AbortController();
    const runs = scriptedRuns(cancelled);
    const result = await runWaitingOutStaleFence(runs.run, scheduler, { maxConflictWaitMs: 60_000, signal: stop.signal });
    expect(result).toBe(cancelled);
    expect(runs.signals).toEqual([stop.signal]);
    expect(scheduler.pending).toEqual([]);
  });

  it("waits until just after the holder's fence expires, then runs again", async () => {
    const scheduler = new ManualScheduler();
    const waits: number[] = [];
    const runs = scriptedRuns(conflict(scheduler.now() + 10_000), cancelled);
    const done = runWaitingOutStaleFence(runs.run, scheduler, {
      maxConflictWaitMs: 60_000,
      signal: new AbortController().signal,
      onWait: (ms) => waits.push(ms),
    });
    await scheduler.untilSleeping(1);
    expect(scheduler.pending).toEqual([10_250]);
    expect(waits).toEqual([10_250]);
    scheduler.advance(10_249);
    expect(scheduler.pending).toEqual([10_250]); // not yet: the fence has not surely lapsed
    expect(runs.signals).toHaveLength(1);
    scheduler.advance(1);
    expect(await done).toBe(cancelled);
    expect(runs.signals).toHaveLength(2);
  });

  it("retries at once when the holder's fence has already expired", async () => {
    const scheduler = new ManualScheduler();
    const runs = scriptedRuns(conflict(scheduler.now() - 5_000), cancelled);
    const done = runWaitingOutStaleFence(runs.run, scheduler, { maxConflictWaitMs: 60_000, signal: new AbortController().signal });
    await scheduler.untilSleeping(1);
    expect(scheduler.pending).toEqual([0]);
    scheduler.advance(0);
    expect(await done).toBe(cancelled);
  });

  it("waits again when another conflict follows the first", async () => {
    const scheduler = new ManualScheduler();
    const start = scheduler.now();
    const runs = scriptedRuns(conflict(start + 1_000), conflict(start + 1_250 + 3_000), cancelled);
    const done = runWaitingOutStaleFence(runs.run, scheduler, { maxConflictWaitMs: 60_000, signal: new AbortController().signal });
    await scheduler.untilSleeping(1);
    expect(scheduler.pending).toEqual([1_250]);
    scheduler.advance(1_250);
    await scheduler.untilSleeping(1);
    expect(scheduler.pending).toEqual([3_250]);
    scheduler.advance(3_250);
    expect(await done).toBe(cancelled);
    expect(runs.signals).toHaveLength(3);
  });

  it("gives up when the wait would exceed maxConflictWaitMs, and waits when it is exactly the bound", async () => {
    const scheduler = new ManualScheduler();
    const signal = new AbortController().signal;
    const tooLong = conflict(scheduler.now() + 10_000 - 250 + 1);
    const waits: number[] = [];
    const refused = scriptedRuns(tooLong);
    expect(
      await runWaitingOutStaleFence(refused.run, scheduler, { maxConflictWaitMs: 10_000, signal, onWait: (ms) => waits.push(ms) }),
    ).toBe(tooLong);
    expect(refused.signals).toHaveLength(1);
    expect(waits).toEqual([]);
    expect(scheduler.pending).toEqual([]);

    const accepted = scriptedRuns(conflict(scheduler.now() + 10_000 - 250), cancelled);
    const done = runWaitingOutStaleFence(accepted.run, scheduler, { maxConflictWaitMs: 10_000, signal });
    await scheduler.untilSleeping(1);
    expect(scheduler.pending).toEqual([10_000]);
    scheduler.advance(10_000);
    expect(await done).toBe(cancelled);
  });

  it("stops waiting when the signal aborts, without running again", async () => {
    const scheduler = new ManualScheduler();
    const stop = new AbortController();
    const held = conflict(scheduler.now() + 30_000);
    const runs = scriptedRuns(held);
    const done = runWaitingOutStaleFence(runs.run, scheduler, { maxConflictWaitMs: 60_000, signal: stop.signal });
    await scheduler.untilSleeping(1);
    stop.abort();
    expect(await done).toBe(held);
    expect(runs.signals).toHaveLength(1);
    expect(scheduler.pending).toEqual([]);
  });

  it("does not wait at all when the signal aborted during the run", async () => {
    const scheduler = new ManualScheduler();
    const stop = new AbortController();
    const held = conflict(scheduler.now() + 1_000);
    const result = await runWaitingOutStaleFence(
      async () => {
        stop.abort();
        return held;
      },
      scheduler,
      { maxConflictWaitMs: 60_000, signal: stop.signal },
    );
    expect(result).toBe(held);
    expect(scheduler.pending).toEqual([]);
  });
});
