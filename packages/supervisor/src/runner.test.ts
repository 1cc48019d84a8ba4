/**
 * The supervised runner's state machine against a hand-played child
 * (FakeProcesses) on virtual time (ManualScheduler): every timeout fires
 * exactly when the test advances past it, every transport fault is an
 * explicit call.
 */
import type { FenceIdentity, ManagedRuntimePlan, ManagedSandboxLease, RuntimeResourceScope, WorkspaceCandidateRef } from "@openma/contract";
import type { HarnessRunInput, HarnessRunResult, TurnCommitResult } from "@openma/host";
import { ManualScheduler } from "@openma/time";
import { describe, expect, it } from "vitest";
import type { SupervisorLogEntry } from "./channel.ts";
import { MAX_LINE_BYTES, PROTOCOL } from "./protocol.ts";
import { SupervisedHarnessRunner } from "./runner.ts";
import type { SupervisedDriver } from "./session.ts";
import { type FakeChild, FakeProcesses } from "./testing/fake-processes.ts";

const FENCE_TOKEN = "rtf_fence-token-must-never-leave-the-host";
const STOP_MS = 5_000;
const KILL_MS = 10_000;
const LOSS_SETTLE_MS = 2_000;

const DRIVER: SupervisedDriver = {
  type: "openma_supervised",
  protocol: PROTOCOL,
  supervisor: { command: "node", args: ["/opt/openma/supervisor/openma-supervisor.mjs", "--turns", "2"], cwd: "/workspace" },
  harness: { id: "pi", version: "1.0.0" },
  readyTimeoutMs: 30_000,
  heartbeatTimeoutMs: 15_000,
  drainTimeoutMs: 45_000,
};
const READY = { type: "ready", protocol: PROTOCOL, harness: { id: "pi", version: "1.0.0" } };

const scope: RuntimeResourceScope = { environmentId: "env_sup", sessionId: "sesn_sup" };
const lease: ManagedSandboxLease = { provider: "fake", runtimeId: "rt_1", metadata: { pid: 1 } };
const restored: WorkspaceCandidateRef = { id: "cand_1", contentHash: `sha256:${"a".repeat(64)}`, metadata: { format: "x" } };

function planFor(driver: ManagedRuntimePlan["driver"] = DRIVER): ManagedRuntimePlan {
  return {
    provider: "fake",
    driver,
    workspace: { requirement: "durable", strategy: "checkpoint_restore", durability: "durable" },
    outputs: { requirement: "durable", strategy: "final_collect", durability: "durable" },
    runtimeCheckpoint: null,
  };
}

/** Lets promise chains and queued callbacks run; never advances (virtual or wall) time. */
async function settle(rounds = 10): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

interface Setup {
  scheduler: ManualScheduler;
  processes: FakeProcesses;
  runner: SupervisedHarnessRunner;
  input: HarnessRunInput;
  abort: AbortController;
  commits: string[];
  log: SupervisorLogEntry[];
  answer: (turnId: string) => Promise<TurnCommitResult>;
}

type ProbeAnswer = "alive" | "lost" | "throws";

/** `probe`: the sandbox heartbeat's answers, in order (the last one repeats); absent: no probe wired. */
function setup(opts: { probe?: ProbeAnswer[]; driver?: ManagedRuntimePlan["driver"] } = {}): Setup {
  const scheduler = new ManualScheduler();
  const processes = new FakeProcesses();
  const log: SupervisorLogEntry[] = [];
  const answers = opts.probe;
  const sandbox =
    answers === undefined
      ? undefined
      : {
          heartbeat: async () => {
            const answer = answers.length > 1 ? answers.shift() : answers[0];
            if (answer === "throws") throw new Error("engine unreachable");
            return answer === "lost" ? { type: "lost" as const, reason: "container is gone" } : { type: "alive" as const };
          },
        };
  const runner = new SupervisedHarnessRunner({
    processes,
    scheduler,
    stopTimeoutMs: STOP_MS,
    killTimeoutMs: KILL_MS,
    lossSettleMs: LOSS_SETTLE_MS,
    sandbox,
    onLog: (_runtimeId, entry) => log.push(entry),
  });
  const abort = new AbortController();
  const commits: string[] = [];
  // The host hands the runner a FenceIdentity; smuggle a token into it to prove the runner never serializes the fence.
  const fence = { scope, ownerId: "host#1", generation: 7, expiresAt: 1e13, token: FENCE_TOKEN } as FenceIdentity;
  const t: Setup = {
    scheduler,
    processes,
    runner,
    abort,
    commits,
    log,
    answer: async (turnId) => ({ type: "committed", revision: commits.indexOf(turnId) + 1, replayed: false }),
    input: undefined as unknown as HarnessRunInput,
  };
  t.input = {
    scope,
    fence,
    plan: planFor(opts.driver),
    sandbox: lease,
    workspace: { bindingId: "wsb_1", strategy: "checkpoint_restore", mountPath: "/workspace", metadata: { hostPath: "/srv/ws" } },
    outputs: null,
    restored,
    attempt: 1,
    commitTurn: (turnId) => {
      commits.push(turnId);
      return t.answer(turnId);
    },
    signal: abort.signal,
  };
  return t;
}

/** Starts a run and answers `ready`. */
async function running(t: Setup): Promise<{ run: Promise<HarnessRunResult>; child: FakeChild }> {
  const run = t.runner.run(t.input);
  await settle();
  const child = t.processes.last;
  await child.next("start");
  child.say(READY);
  await settle();
  return { run, child };
}

/** A run that reached `completed`, ready to drain. */
async function completed(t: Setup): Promise<FakeChild> {
  const { run, child } = await running(t);
  child.say({ type: "completed" });
  expect(await run).toEqual({ type: "completed" });
  return child;
}

const drainInput = (t: Setup) => ({ scope, fence: t.input.fence, sandbox: lease, signal: t.abort.signal });

describe("SupervisedHarnessRunner: the happy path", () => {
  it("starts the supervisor, commits each requested turn, completes, drains and stops it", async () => {
    const t = setup();
    const { run, child } = await running(t);
    expect(child.input.command).toEqual(["node", "/opt/openma/supervisor/openma-supervisor.mjs", "--turns", "2"]);
    expect(child.input.cwd).toBe("/workspace");
    expect(child.input.env).toEqual({ OPENMA_SUPERVISOR_PROTOCOL: PROTOCOL });
    expect(child.received[0]).toEqual({
      type: "start",
      protocol: PROTOCOL,
      scope: { environmentId: "env_sup", sessionId: "sesn_sup" },
      generation: 7,
      attempt: 1,
      restored: { candidateId: "cand_1", contentHash: restored.contentHash },
      heartbeatIntervalMs: 5_000,
    });

    child.say({ type: "heartbeat" });
    child.say({ type: "checkpoint_request", turnId: "turn-1" });
    await settle();
    child.say({ type: "checkpoint_request", turnId: "turn-2" });
    await settle();
    expect(t.commits).toEqual(["turn-1", "turn-2"]);
    expect(child.received.filter((m) => m.type === "checkpoint_result")).toEqual([
      { type: "checkpoint_result", turnId: "turn-1", result: { type: "committed", revision: 1, replayed: false } },
      { type: "checkpoint_result", turnId: "turn-2", result: { type: "committed", revision: 2, replayed: false } },
    ]);
    child.say({ type: "completed" });
    expect(await run).toEqual({ type: "completed" });
    expect(child.ended).toBeNull(); // the process stays for drain
    expect(child.kills).toBe(0);

    const drain = t.runner.drain(drainInput(t));
    await child.next("drain");
    child.say({ type: "heartbeat" });
    child.say({ type: "drained" });
    await child.next("stop");
    expect(child.stdinClosed).toBe(true);
    child.exit(0);
    expect(await drain).toEqual({ type: "drained" });
    expect(child.kills).toBe(0);
    expect(t.scheduler.pending).toEqual([]); // no timer left behind
    expect(t.log.some((e) => e.type === "received" && e.message.type === "drained")).toBe(true);
  });

  it("accepts a child that says ready before it was sent start", async () => {
    const t = setup();
    t.processes.onSpawn = (child) => child.say(READY);
    const run = t.runner.run(t.input);
    await settle();
    const child = t.processes.last;
    child.say({ type: "completed" });
    expect(await run).toEqual({ type: "completed" });
    expect(t.scheduler.pending).toEqual([]);
  });

  it("sends a null restore and the attempt number of a cold restart", async () => {
    const t = setup();
    t.input = { ...t.input, restored: null, attempt: 2 };
    const { child } = await running(t);
    expect(child.received[0]).toMatchObject({ restored: null, attempt: 2 });
  });

  it("drains a supervisor that exited cleanly after completing", async () => {
    const t = setup();
    const child = await completed(t);
    child.exit(0);
    await settle();
    expect(await t.runner.drain(drainInput(t))).toEqual({ type: "drained" });
  });

  it("treats a clean exit in answer to drain as drained", async () => {
    const t = setup();
    const child = await completed(t);
    const drain = t.runner.drain(drainInput(t));
    await child.next("drain");
    child.exit(0);
    expect(await drain).toEqual({ type: "drained" });
  });
});

describe("SupervisedHarnessRunner: transport faults", () => {
  it("kills a supervisor that sends no ready within readyTimeoutMs", async () => {
    const t = setup();
    const run = t.runner.run(t.input);
    await settle();
    const child = t.processes.last;
    t.scheduler.advance(DRIVER.readyTimeoutMs - 1);
    await settle();
    expect(child.kills).toBe(0);
    t.scheduler.advance(1);
    expect(await run).toEqual({ type: "failed", error: "the supervisor sent no ready within 30000 ms" });
    expect(child.kills).toBe(1);
    expect(t.scheduler.pending).toEqual([]);
  });

  // `wire`: caught by the channel's decoder (and logged as such) rather than by the phase rules.
  it.each([
    ["not JSON", "hello world\n", /protocol error: not JSON: "hello world"/, true],
    ["an unknown type", '{"type":"launch_missiles"}\n', /protocol error: invalid message/, true],
    ["a bad field", '{"type":"checkpoint_request","turnId":""}\n', /protocol error: invalid message \(turnId: /, true],
    ["a message out of phase", '{"type":"drained"}\n', /protocol error: unexpected drained while running/, false],
    ["a second ready", `${JSON.stringify(READY)}\n`, /protocol error: unexpected ready while running/, false],
  ])("kills the supervisor on a garbage line: %s", async (_name, line, error, wire) => {
    const t = setup();
    const { run, child } = await running(t);
    child.say(line);
    const result = await run;
    expect(result.type).toBe("failed");
    expect(result.type === "failed" && result.error).toMatch(error);
    expect(child.kills).toBe(1);
    expect(t.log.some((e) => e.type === "protocol_error")).toBe(wire);
  });

  it("kills the supervisor on an oversized line, even one that never ends", async () => {
    const t = setup();
    const { run, child } = await running(t);
    child.sayBytes(new Uint8Array(MAX_LINE_BYTES).fill(0x61)); // exactly at the bound: still waiting for the newline
    await settle();
    expect(child.kills).toBe(0);
    child.sayBytes(new Uint8Array([0x61]));
    expect(await run).toEqual({ type: "failed", error: `protocol error: a line longer than ${MAX_LINE_BYTES} bytes` });
    expect(child.kills).toBe(1);
  });

  it("kills the supervisor on a line that is not UTF-8", async () => {
    const t = setup();
    const { run, child } = await running(t);
    child.sayBytes(new Uint8Array([0xff, 0xfe, 0x0a]));
    expect(await run).toEqual({ type: "failed", error: "protocol error: a line that is not UTF-8" });
  });

  it("ignores blank lines and splits messages across chunks", async () => {
    const t = setup();
    const { run, child } = await running(t);
    child.say('\n  \n{"type":"heart');
    child.say('beat"}\n{"type":"comp');
    child.say('leted"}\n');
    expect(await run).toEqual({ type: "completed" });
  });

  it("refuses a ready for another protocol or another harness", async () => {
    for (const [ready, error] of [
      [{ ...READY, protocol: "openma-harness-supervisor-v0" }, /speaks "openma-harness-supervisor-v0"/],
      [{ ...READY, harness: { id: "pi", version: "2.0.0" } }, /runs harness "pi@2.0.0", the profile expects pi@1.0.0/],
    ] as const) {
      const t = setup();
      const run = t.runner.run(t.input);
      await settle();
      t.processes.last.say(ready);
      const result = await run;
      expect(result.type === "failed" && result.error).toMatch(error);
      expect(t.processes.last.kills).toBe(1);
    }
  });

  it("kills a supervisor that misses heartbeats; every message resets the deadline", async () => {
    const t = setup();
    const { run, child } = await running(t);
    t.scheduler.advance(DRIVER.heartbeatTimeoutMs - 1);
    child.say({ type: "heartbeat" });
    await settle();
    t.scheduler.advance(DRIVER.heartbeatTimeoutMs - 1);
    child.say({ type: "checkpoint_request", turnId: "turn-1" });
    await settle();
    t.scheduler.advance(DRIVER.heartbeatTimeoutMs - 1);
    await settle();
    expect(child.kills).toBe(0);
    t.scheduler.advance(1);
    expect(await run).toEqual({ type: "failed", error: "heartbeat timeout: nothing from the supervisor for 15000 ms" });
    expect(child.kills).toBe(1);
  });

  it("reports an early exit as failed, with the child's stderr", async () => {
    const t = setup();
    const { run, child } = await running(t);
    child.stderr("loading harness\nTypeError: boom\n");
    child.exit(3);
    const result = await run;
    expect(result).toEqual({
      type: "failed",
      error: 'the supervisor exited with code 3 before completing; stderr: "loading harness\\nTypeError: boom"',
    });
    expect(child.kills).toBe(0);
    expect(t.log.filter((e) => e.type === "stderr")).toEqual([
      { type: "stderr", line: "loading harness" },
      { type: "stderr", line: "TypeError: boom" },
    ]);
  });

  it("reports an exit before ready as failed", async () => {
    const t = setup();
    const run = t.runner.run(t.input);
    await settle();
    t.processes.last.exit(127);
    expect(await run).toMatchObject({ type: "failed", error: expect.stringMatching(/exited with code 127/) });
    expect(t.scheduler.pending).toEqual([]);
  });

  it("reads a process killed from outside as sandbox loss when no probe is wired", async () => {
    const t = setup();
    const { run, child } = await running(t);
    child.vanish();
    expect(await run).toEqual({ type: "sandbox_lost", reason: "the supervisor was killed before completing" });
  });

  it("asks the sandbox probe: lost means sandbox_lost at once", async () => {
    const t = setup({ probe: ["lost"] });
    const { run, child } = await running(t);
    child.exit(137, "SIGKILL");
    expect(await run).toEqual({
      type: "sandbox_lost",
      reason: "container is gone; the supervisor exited with code 137 (SIGKILL) before completing",
    });
  });

  it.each<[string, ProbeAnswer[], HarnessRunResult]>([
    [
      "alive, then lost (a teardown still in progress)",
      ["alive", "lost"],
      { type: "sandbox_lost", reason: "container is gone; the supervisor was killed before completing" },
    ],
    [
      "unknown, then lost",
      ["throws", "lost"],
      { type: "sandbox_lost", reason: "container is gone; the supervisor was killed before completing" },
    ],
    ["alive twice", ["alive"], { type: "failed", error: "the supervisor was killed before completing" }],
    ["unknown twice", ["throws"], { type: "failed", error: "the supervisor was killed before completing" }],
  ])("looks again after the settle time when the probe first says %s", async (_name, answers, expected) => {
    const t = setup({ probe: answers });
    const { run, child } = await running(t);
    child.vanish();
    await settle();
    expect(t.scheduler.pending).toEqual([LOSS_SETTLE_MS]);
    t.scheduler.advance(LOSS_SETTLE_MS);
    expect(await run).toEqual(expected);
  });

  it("fails on the supervisor's own failed message and kills it", async () => {
    const t = setup();
    const { run, child } = await running(t);
    child.say({ type: "failed", error: "turn turn-1: the harness exited with code 2" });
    expect(await run).toEqual({ type: "failed", error: "the supervisor failed: turn turn-1: the harness exited with code 2" });
    expect(child.kills).toBe(1);
  });

  it("accepts failed before ready (a supervisor that cannot start its harness)", async () => {
    const t = setup();
    const run = t.runner.run(t.input);
    await settle();
    t.processes.last.say({ type: "failed", error: "no such harness" });
    expect(await run).toEqual({ type: "failed", error: "the supervisor failed: no such harness" });
  });

  it("reports a refused spawn, as sandbox loss when the probe says the sandbox is gone", async () => {
    const t = setup();
    t.processes.refuseNext = "the sandbox is not running";
    expect(await t.runner.run(t.input)).toEqual({
      type: "failed",
      error: "the supervisor could not be started: the sandbox is not running",
    });
    const lost = setup({ probe: ["lost"] });
    lost.processes.refuseNext = "the sandbox is not running";
    expect(await lost.runner.run(lost.input)).toEqual({
      type: "sandbox_lost",
      reason: "container is gone; the supervisor could not be started: the sandbox is not running",
    });
  });

  it("refuses other lanes and a second run in the same sandbox", async () => {
    const other = setup({ driver: { type: "ama_worker", process: { command: "ant-worker" } } });
    expect(await other.runner.run(other.input)).toEqual({ type: "failed", error: "the supervised runner cannot run a ama_worker driver" });
    expect(other.processes.children).toEqual([]);

    const t = setup();
    const { child } = await running(t);
    expect(await t.runner.run(t.input)).toEqual({ type: "failed", error: "a supervisor is already running in sandbox rt_1" });
    expect(t.processes.children).toEqual([child]);
  });
});

describe("SupervisedHarnessRunner: turn commits", () => {
  it.each<[string, (turnId: string) => Promise<TurnCommitResult>, unknown]>([
    ["rejected", async () => ({ type: "rejected", reason: "lease_lost" }), { type: "rejected", reason: "lease_lost" }],
    ["failed", async () => ({ type: "failed", error: "disk full" }), { type: "failed", error: "disk full" }],
    [
      "thrown",
      async () => {
        throw new Error("store unreachable");
      },
      { type: "failed", error: "store unreachable" },
    ],
    [
      "replayed",
      async () => ({ type: "committed", revision: null, replayed: true }),
      { type: "committed", revision: null, replayed: true },
    ],
  ])("forwards a %s commit answer to the child and keeps running", async (_name, answer, expected) => {
    const t = setup();
    t.answer = answer;
    const { run, child } = await running(t);
    child.say({ type: "checkpoint_request", turnId: "turn-1" });
    expect(await child.next("checkpoint_result")).toEqual({ type: "checkpoint_result", turnId: "turn-1", result: expected });
    child.say({ type: "completed" });
    expect(await run).toEqual({ type: "completed" });
  });

  it("allows one checkpoint request in flight", async () => {
    const t = setup();
    let release!: () => void;
    t.answer = () =>
      new Promise((resolve) => {
        release = () => resolve({ type: "committed", revision: 1, replayed: false });
      });
    const { run, child } = await running(t);
    child.say({ type: "checkpoint_request", turnId: "turn-1" });
    await settle();
    child.say({ type: "checkpoint_request", turnId: "turn-2" });
    expect(await run).toEqual({ type: "failed", error: 'protocol error: checkpoint_request "turn-2" while another is in flight' });
    release();
    await settle();
    expect(child.received.filter((m) => m.type === "checkpoint_result")).toEqual([]); // nobody left to answer
  });

  it("answers not_running after completed without asking the host", async () => {
    const t = setup();
    const child = await completed(t);
    child.say({ type: "checkpoint_request", turnId: "late" });
    expect(await child.next("checkpoint_result")).toEqual({
      type: "checkpoint_result",
      turnId: "late",
      result: { type: "rejected", reason: "not_running" },
    });
    expect(t.commits).toEqual([]);
  });
});

describe("SupervisedHarnessRunner: bounded stop", () => {
  it("kills a supervisor that does not drain within drainTimeoutMs", async () => {
    const t = setup();
    const child = await completed(t);
    const drain = t.runner.drain(drainInput(t));
    await child.next("drain");
    t.scheduler.advance(DRIVER.drainTimeoutMs - 1);
    child.say({ type: "heartbeat" }); // liveness does not extend a drain
    await settle();
    expect(child.kills).toBe(0);
    t.scheduler.advance(1);
    expect(await drain).toEqual({ type: "failed", error: "the supervisor did not drain within 45000 ms" });
    expect(child.kills).toBe(1);
    expect(child.received.some((m) => m.type === "stop")).toBe(false);
  });

  it("kills a drained supervisor that does not exit within the stop bound; the drain still holds", async () => {
    const t = setup();
    const child = await completed(t);
    const drain = t.runner.drain(drainInput(t));
    await child.next("drain");
    child.say({ type: "drained" });
    await child.next("stop");
    t.scheduler.advance(STOP_MS - 1);
    await settle();
    expect(child.kills).toBe(0);
    t.scheduler.advance(1);
    expect(await drain).toEqual({ type: "drained" });
    expect(child.kills).toBe(1);
    expect(child.ended).toEqual({ type: "killed" });
  });

  it("fails the drain when even the kill does not end the process", async () => {
    const t = setup();
    const child = await completed(t);
    child.ignoreKill = true;
    const drain = t.runner.drain(drainInput(t));
    await child.next("drain");
    child.say({ type: "drained" });
    await child.next("stop");
    t.scheduler.advance(STOP_MS);
    await settle();
    expect(child.kills).toBe(1);
    t.scheduler.advance(KILL_MS);
    expect(await drain).toEqual({ type: "failed", error: "the supervisor did not end within 10000 ms of a kill" });
  });

  it("on abort, sends stop and lets the supervisor exit by itself", async () => {
    const t = setup();
    const { run, child } = await running(t);
    t.abort.abort(new Error("fence lost"));
    await child.next("stop");
    expect(child.stdinClosed).toBe(true);
    child.exit(0);
    expect(await run).toEqual({ type: "failed", error: "the run was stopped (fence lost)" });
    expect(child.kills).toBe(0);
  });

  it("on abort, kills a supervisor that ignores stop after the stop bound", async () => {
    const t = setup();
    const { run, child } = await running(t);
    t.abort.abort(new Error("cancelled"));
    await child.next("stop");
    child.say({ type: "completed" }); // too late: nothing the child says after the abort changes the outcome
    t.scheduler.advance(STOP_MS);
    expect(await run).toEqual({ type: "failed", error: "the run was stopped (cancelled)" });
    expect(child.kills).toBe(1);
  });

  it("kills at once when the drain is aborted", async () => {
    const t = setup();
    const child = await completed(t);
    const drain = t.runner.drain(drainInput(t));
    await child.next("drain");
    t.abort.abort(new Error("lease lost"));
    expect(await drain).toEqual({ type: "failed", error: "the drain was aborted (lease lost)" });
    expect(child.kills).toBe(1);
  });

  it("a fault between completed and drain kills at once and fails the drain", async () => {
    const t = setup();
    const child = await completed(t);
    child.say("garbage\n");
    await settle();
    expect(child.kills).toBe(1);
    expect(await t.runner.drain(drainInput(t))).toEqual({ type: "failed", error: 'protocol error: not JSON: "garbage"' });
  });

  it("fails a drain for a sandbox with no supervisor, and a drain after a crash", async () => {
    const t = setup();
    expect(await t.runner.drain(drainInput(t))).toEqual({ type: "failed", error: "no supervisor is running in sandbox rt_1" });
    const child = await completed(t);
    child.exit(2);
    await settle();
    expect(await t.runner.drain(drainInput(t))).toEqual({ type: "failed", error: "the supervisor exited with code 2 before drain" });
  });
});

describe("SupervisedHarnessRunner: secrets", () => {
  it("never writes the fence token (or the fence owner) to the child's stdin, argv or environment", async () => {
    const t = setup();
    const { run, child } = await running(t);
    child.say({ type: "checkpoint_request", turnId: "turn-1" });
    await child.next("checkpoint_result");
    child.say({ type: "completed" });
    await run;
    const drain = t.runner.drain(drainInput(t));
    await child.next("drain");
    child.say({ type: "drained" });
    await child.next("stop");
    child.exit(0);
    await drain;

    const everything = [child.stdin.join(""), child.input.command.join("\0"), JSON.stringify(child.input.env ?? {}), child.input.cwd ?? ""];
    expect(child.stdin.join("")).toContain('"type":"start"'); // the probe sees real traffic
    for (const text of everything) {
      expect(text).not.toContain(FENCE_TOKEN);
      expect(text).not.toContain("token");
      expect(text).not.toContain("host#1");
    }
    const logged = JSON.stringify(t.log);
    expect(logged).not.toContain(FENCE_TOKEN);
  });
});
