/**
 * The parts of the work loop that need no server: the ticket board the
 * runner reads its claimed item from, the order (and bounded wait) of one
 * session's runs, and the wait for a crashed owner's fence (virtual time;
 * the claim itself is covered by the e2e tests).
 */
import type { BetaSelfHostedWork } from "@anthropic-ai/sdk/resources/beta/environments/work";
import type { RunInput, RuntimeRunResult } from "@openma/host";
import { ManualScheduler } from "@openma/time";
import { describe, expect, it } from "vitest";
import type { WorkTicket } from "./ama-worker-runner.ts";
import { type RuntimeHostLogger, runWaitingOutStaleFence, TicketBoard, WorkLoop } from "./work-loop.ts";

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

/** A claimed session item as the poller yields it (the secret carries the sessions token). */
const claimed = (workId: string, sessionId = "sesn_1"): BetaSelfHostedWork => ({
  type: "work",
  id: workId,
  environment_id: "env_1",
  data: { type: "session", id: sessionId },
  secret: Buffer.from(JSON.stringify({ sessions_token: `token-of-${workId}` })).toString("base64url"),
  state: "starting",
  metadata: {},
  created_at: "2026-01-01T00:00:00.000Z",
  acknowledged_at: "2026-01-01T00:00:00.000Z",
  started_at: null,
  latest_heartbeat_at: null,
  stop_requested_at: null,
  stopped_at: null,
});

const completed = (generation: number): RuntimeRunResult => ({
  type: "completed",
  generation,
  publication: null,
  rejectedOutputs: [],
  cleanup: { compute: "terminated", orphanIds: [] },
  trace: [],
});

/** Lets every promise that can settle now settle (no clock involved: one macrotask turn each). */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
}

/**
 * A host whose runs end when the test says so. Each call records the ticket
 * the board held for its scope when it started (what the runner would read).
 */
function heldRuns(tickets: TicketBoard) {
  const calls: Array<{
    sessionId: string;
    workOnBoard: string | undefined;
    signal: AbortSignal | undefined;
    end(r: RuntimeRunResult): void;
  }> = [];
  const host = {
    run: (input: RunInput) =>
      new Promise<RuntimeRunResult>((resolve) => {
        calls.push({ sessionId: input.scope.sessionId, workOnBoard: tickets.get(input.scope)?.workId, signal: input.signal, end: resolve });
      }),
  };
  return { host, calls };
}

/** Ends a held run as completed and waits until its item has been served. */
async function complete(call: { end(r: RuntimeRunResult): void } | undefined, serving: Promise<void>, generation: number): Promise<void> {
  call?.end(completed(generation));
  await serving;
}

function recordingLogger() {
  const lines: Array<{ level: string; msg: string; obj: Record<string, unknown> }> = [];
  const at = (level: string) => (obj: object, msg: string) => lines.push({ level, msg, obj: obj as Record<string, unknown> });
  const logger: RuntimeHostLogger = { info: at("info"), warn: at("warn"), error: at("error") };
  return { logger, lines };
}

function workLoop(maxEarlierRunWaitMs?: number) {
  const scheduler = new ManualScheduler();
  const tickets = new TicketBoard();
  const { host, calls } = heldRuns(tickets);
  const { logger, lines } = recordingLogger();
  const results: string[] = [];
  const loop = new WorkLoop({
    apiUrl: "http://127.0.0.1:9",
    environmentId: "env_1",
    environmentKey: "sk-env-unused",
    host,
    profile: { workspace: { requirement: "durable" }, outputs: { requirement: "none" }, driver: { type: "ama_worker" } } as never,
    tickets,
    scheduler,
    logger,
    concurrency: 1,
    workerId: "rh-test",
    ...(maxEarlierRunWaitMs !== undefined ? { maxEarlierRunWaitMs } : {}),
    onResult: (t, r) => results.push(`${t.workId}: ${r.type}`),
  });
  return { loop, scheduler, tickets, calls, lines, results };
}

describe("WorkLoop: one session's runs on this host", () => {
  it("starts a session's next Work once its earlier run here has ended; the earlier run keeps its own ticket until then", async () => {
    const { loop, scheduler, tickets, calls, results } = workLoop();
    const scope = { environmentId: "env_1", sessionId: "sesn_1" };
    const first = loop.serve(claimed("work_1"));
    await settle();
    expect(calls.map((c) => c.workOnBoard)).toEqual(["work_1"]);

    const second = loop.serve(claimed("work_2"));
    await settle();
    // Not started, and the board still hands the running run its own item (a cold restart re-reads it).
    expect(calls).toHaveLength(1);
    expect(tickets.get(scope)?.workId).toBe("work_1");
    expect(scheduler.pending).toEqual([30_000]);

    await complete(calls[0], first, 1);
    await settle();
    expect(calls.map((c) => c.workOnBoard)).toEqual(["work_1", "work_2"]);
    // The bound's timer went with the wait.
    expect(scheduler.pending).toEqual([]);
    await complete(calls[1], second, 2);
    expect(results).toEqual(["work_1: completed", "work_2: completed"]);
    expect(tickets.size).toBe(0);
  });

  it("does not hold another session's Work", async () => {
    const { loop, scheduler, calls } = workLoop();
    void loop.serve(claimed("work_a", "sesn_a"));
    void loop.serve(claimed("work_b", "sesn_b"));
    await settle();
    expect(calls.map((c) => c.sessionId)).toEqual(["sesn_a", "sesn_b"]);
    expect(scheduler.pending).toEqual([]);
  });

  it("waits for an earlier run that never ends only up to the bound, then starts without cancelling it", async () => {
    const { loop, scheduler, tickets, calls, lines, results } = workLoop(20_000);
    const first = loop.serve(claimed("work_1"));
    await settle();
    const second = loop.serve(claimed("work_2"));
    await settle();
    scheduler.advance(19_999);
    await settle();
    expect(calls).toHaveLength(1);

    scheduler.advance(1);
    await settle();
    expect(calls.map((c) => c.workOnBoard)).toEqual(["work_1", "work_2"]);
    expect(lines.map((l) => l.msg)).toContain("waiting for the session's earlier run here to end");
    expect(lines.find((l) => l.level === "warn")).toMatchObject({
      msg: "the session's earlier run here has not ended; starting anyway",
      obj: { work_id: "work_2", waited_ms: 20_000 },
    });
    // The earlier run goes on (its final commit may still publish the last turn): nothing cancelled it.
    expect(calls[0]!.signal?.aborted).toBe(false);

    await complete(calls[1], second, 2);
    await complete(calls[0], first, 1);
    expect(results).toEqual(["work_2: completed", "work_1: completed"]);
    expect(tickets.size).toBe(0);
  });

  it("a third Work of the session waits for the second, which waits for the first", async () => {
    const { loop, calls } = workLoop();
    void loop.serve(claimed("work_1"));
    void loop.serve(claimed("work_2"));
    void loop.serve(claimed("work_3"));
    await settle();
    expect(calls.map((c) => c.workOnBoard)).toEqual(["work_1"]);
    calls[0]!.end(completed(1));
    await settle();
    expect(calls.map((c) => c.workOnBoard)).toEqual(["work_1", "work_2"]);
    calls[1]!.end(completed(2));
    await settle();
    expect(calls.map((c) => c.workOnBoard)).toEqual(["work_1", "work_2", "work_3"]);
  });

  it("stopping the loop ends a wait without starting the run (its item is left to be reclaimed)", async () => {
    const { loop, scheduler, calls, results } = workLoop();
    void loop.serve(claimed("work_1"));
    await settle();
    const second = loop.serve(claimed("work_2"));
    await settle();
    await loop.stop();
    await second;
    expect(calls).toHaveLength(1);
    expect(results).toEqual([]);
    expect(scheduler.pending).toEqual([]);
  });
});
