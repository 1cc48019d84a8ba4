/**
 * The reference supervisor (bin/openma-supervisor.mjs) as a real child
 * process on the host, driven by hand over its stdin/stdout: turns, the
 * harness environment, checkpoint answers, drain in the middle of a turn,
 * stop, and the failures it must report. A harness that has to stay inside
 * a turn blocks on a FIFO the test opens when it is ready, so nothing waits
 * on the wall clock.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type ChildMessage, PROTOCOL, parseChildLine } from "./protocol.ts";
import { REFERENCE_SUPERVISOR } from "./reference.ts";

const SCRIPT = join(REFERENCE_SUPERVISOR.hostDir, REFERENCE_SUPERVISOR.script);
const HARNESS = ["--harness-id", "demo", "--harness-version", "1.0.0"];

function startMessage(overrides: Record<string, unknown> = {}) {
  return {
    type: "start",
    protocol: PROTOCOL,
    scope: { environmentId: "env_ref", sessionId: "sesn_ref" },
    generation: 4,
    attempt: 2,
    restored: { candidateId: "cand_9", contentHash: `sha256:${"b".repeat(64)}` },
    heartbeatIntervalMs: 60_000,
    ...overrides,
  };
}

/** The supervisor process, its stdout parsed as protocol messages (every line must be one). */
class Supervisor {
  readonly proc: ChildProcess;
  readonly messages: ChildMessage[] = [];
  readonly garbage: string[] = [];
  stderr = "";
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  #waiters: { check: () => boolean; resolve: () => void }[] = [];

  constructor(args: string[], cwd: string) {
    this.proc = spawn(process.execPath, [SCRIPT, ...args], { cwd, stdio: ["pipe", "pipe", "pipe"] });
    let buffered = "";
    this.proc.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      buffered += chunk;
      const lines = buffered.split("\n");
      buffered = lines.pop()!;
      for (const line of lines) {
        const parsed = parseChildLine(line);
        if (parsed.ok) this.messages.push(parsed.message);
        else this.garbage.push(line);
      }
      this.#wake();
    });
    this.proc.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
      this.stderr += chunk;
      this.#wake();
    });
    this.proc.stdin!.on("error", () => {});
    this.exited = new Promise((resolve) => this.proc.once("exit", (code, signal) => resolve({ code, signal })));
  }

  send(message: Record<string, unknown>): void {
    this.proc.stdin!.write(`${JSON.stringify(message)}\n`);
  }

  /** Resolves with the first message matching, received so far or to come. */
  async message<T extends ChildMessage["type"]>(type: T, where: (m: Extract<ChildMessage, { type: T }>) => boolean = () => true) {
    const find = () => this.messages.find((m): m is Extract<ChildMessage, { type: T }> => m.type === type && where(m as never));
    await this.#until(() => find() !== undefined);
    return find()!;
  }

  /** Resolves once `n` messages of `type` arrived. */
  async count(type: ChildMessage["type"], n: number): Promise<void> {
    await this.#until(() => this.messages.filter((m) => m.type === type).length >= n);
  }

  /** Resolves once stderr contains `text`. */
  async logged(text: string): Promise<void> {
    await this.#until(() => this.stderr.includes(text));
  }

  types(): string[] {
    return this.messages
      .filter((m) => m.type !== "heartbeat")
      .map((m) => (m.type === "checkpoint_request" ? `${m.type}:${m.turnId}` : m.type));
  }

  #until(check: () => boolean): Promise<void> {
    if (check()) return Promise.resolve();
    return new Promise((resolve) => this.#waiters.push({ check, resolve }));
  }

  #wake(): void {
    this.#waiters = this.#waiters.filter((w) => {
      if (!w.check()) return true;
      w.resolve();
      return false;
    });
  }
}

describe("the reference supervisor (bin/openma-supervisor.mjs)", () => {
  let dir: string;
  const running: Supervisor[] = [];

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "openma-refsup-"));
  });
  afterEach(async () => {
    for (const sup of running.splice(0)) {
      if (sup.proc.exitCode === null && sup.proc.signalCode === null) sup.proc.kill("SIGKILL");
      await sup.exited;
    }
    await rm(dir, { recursive: true, force: true });
  });

  const supervise = (args: string[]) => {
    const sup = new Supervisor(args, dir);
    running.push(sup);
    return sup;
  };

  /** A FIFO a harness blocks on (`cat gate`) until the test opens it. */
  const gate = () => {
    const path = join(dir, "gate");
    execFileSync("mkfifo", [path]);
    return { path, open: () => writeFile(path, "go\n") };
  };

  it("runs one harness process per line of a turns file, with the turn's environment, and checkpoints each", async () => {
    await writeFile(join(dir, "turns.txt"), "fix the bug\n\nwrite the report\n");
    const harness = [
      'read line; echo "harness stdout must not reach the protocol channel"',
      'printf "%s|%s|%s|%s|%s|%s|%s|%s|%s\\n" "$OPENMA_TURN_ID" "$OPENMA_TURN_INDEX" "$OPENMA_TURN_INPUT" "$line" "$OPENMA_ENVIRONMENT_ID" "$OPENMA_SESSION_ID" "$OPENMA_GENERATION" "$OPENMA_ATTEMPT" "$OPENMA_RESTORED_CANDIDATE" >> turns.log',
    ].join("\n");
    const sup = supervise([...HARNESS, "--turns-file", "turns.txt", "--", "sh", "-c", harness]);
    sup.send(startMessage());
    expect(await sup.message("ready")).toEqual({ type: "ready", protocol: PROTOCOL, harness: { id: "demo", version: "1.0.0" } });
    await sup.message("checkpoint_request", (m) => m.turnId === "turn-1");
    sup.send({ type: "checkpoint_result", turnId: "turn-1", result: { type: "committed", revision: 7, replayed: false } });
    await sup.message("checkpoint_request", (m) => m.turnId === "turn-2");
    // A failed checkpoint is not fatal: the next one carries the changes.
    sup.send({ type: "checkpoint_result", turnId: "turn-2", result: { type: "failed", error: "disk full" } });
    await sup.message("completed");
    sup.send({ type: "drain" });
    await sup.message("drained");
    sup.send({ type: "stop" });
    expect(await sup.exited).toEqual({ code: 0, signal: null });

    expect(sup.types()).toEqual(["ready", "checkpoint_request:turn-1", "checkpoint_request:turn-2", "completed", "drained"]);
    expect(sup.garbage).toEqual([]);
    expect(sup.stderr).toContain("harness stdout must not reach the protocol channel");
    expect(sup.stderr).toContain("turn turn-2: checkpoint failed (disk full)");
    expect(await readFile(join(dir, "turns.log"), "utf8")).toBe(
      [
        "turn-1|1|fix the bug|fix the bug|env_ref|sesn_ref|4|2|cand_9",
        "turn-2|2|write the report|write the report|env_ref|sesn_ref|4|2|cand_9",
        "",
      ].join("\n"),
    );
  });

  it("heartbeats at the interval the host asked for while a turn runs", async () => {
    const { path, open } = gate();
    const sup = supervise([...HARNESS, "--turns", "1", "--", "sh", "-c", `cat "${path}" > /dev/null`]);
    sup.send(startMessage({ heartbeatIntervalMs: 5 }));
    await sup.message("ready");
    await sup.count("heartbeat", 3);
    await open();
    await sup.message("checkpoint_request");
    expect(sup.types()).toEqual(["ready", "checkpoint_request:turn-1"]);
  });

  it("on drain, finishes the current turn and its checkpoint, starts no other, and answers drained", async () => {
    const { path, open } = gate();
    const harness = `echo "started $OPENMA_TURN_ID" >&2; cat "${path}" > /dev/null; touch "done-$OPENMA_TURN_ID"`;
    const sup = supervise([...HARNESS, "--turns", "3", "--", "sh", "-c", harness]);
    sup.send(startMessage());
    await sup.logged("started turn-1");
    sup.send({ type: "drain" });
    await open();
    await sup.message("checkpoint_request", (m) => m.turnId === "turn-1");
    sup.send({ type: "checkpoint_result", turnId: "turn-1", result: { type: "committed", revision: 1, replayed: false } });
    await sup.message("drained");
    sup.send({ type: "stop" });
    expect(await sup.exited).toEqual({ code: 0, signal: null });
    expect(sup.types()).toEqual(["ready", "checkpoint_request:turn-1", "drained"]);
    expect(existsSync(join(dir, "done-turn-1"))).toBe(true);
    expect(existsSync(join(dir, "done-turn-2"))).toBe(false);
  });

  it("on stop, ends the harness and everything it started, then exits", async () => {
    const { path } = gate();
    const harness = `echo $$ > harness.pid; sleep 600 & echo $! > sleeper.pid; echo "blocked" >&2; cat "${path}" > /dev/null`;
    const sup = supervise([...HARNESS, "--stop-grace-ms", "60000", "--", "sh", "-c", harness]);
    sup.send(startMessage());
    await sup.logged("blocked");
    const pids = await Promise.all(["harness.pid", "sleeper.pid"].map(async (f) => Number(await readFile(join(dir, f), "utf8"))));
    sup.send({ type: "stop" });
    expect(await sup.exited).toEqual({ code: 0, signal: null });
    // The supervisor waited for the harness's exit; the sleeper in its process group got the same SIGTERM.
    expect(existsSync(`/proc/${pids[0]}`)).toBe(false);
    const sleeper = await readFile(`/proc/${pids[1]}/stat`, "utf8").catch(() => null);
    expect(sleeper === null || /\) [ZX] /.test(sleeper)).toBe(true);
    expect(sup.types()).toEqual(["ready"]);
  });

  it("treats the end of stdin as stop", async () => {
    const { path } = gate();
    const sup = supervise([...HARNESS, "--", "sh", "-c", `echo blocked >&2; cat "${path}" > /dev/null`]);
    sup.send(startMessage());
    await sup.logged("blocked");
    sup.proc.stdin!.end();
    expect(await sup.exited).toEqual({ code: 0, signal: null });
  });

  it.each([
    ["a harness that exits non-zero", "exit 3", null, "turn turn-1: the harness exited with code 3"],
    [
      "a rejected checkpoint",
      "true",
      { type: "rejected", reason: "lease_lost" },
      "turn turn-1: the host rejected its checkpoint (lease_lost)",
    ],
  ])("reports %s as failed and exits 1", async (_name, harness, answer, error) => {
    const sup = supervise([...HARNESS, "--turns", "2", "--", "sh", "-c", harness]);
    sup.send(startMessage());
    if (answer !== null) {
      await sup.message("checkpoint_request");
      sup.send({ type: "checkpoint_result", turnId: "turn-1", result: answer });
    }
    expect(await sup.message("failed")).toEqual({ type: "failed", error });
    expect(await sup.exited).toEqual({ code: 1, signal: null });
    expect(sup.types()).not.toContain("completed");
  });

  it("refuses a start for another protocol, and a message before start", async () => {
    const wrong = supervise([...HARNESS, "--", "true"]);
    wrong.send(startMessage({ protocol: "openma-harness-supervisor-v0" }));
    expect(await wrong.message("failed")).toEqual({
      type: "failed",
      error: `the host speaks openma-harness-supervisor-v0, this supervisor ${PROTOCOL}`,
    });
    expect((await wrong.exited).code).toBe(1);

    const early = supervise([...HARNESS, "--", "true"]);
    early.send({ type: "drain" });
    expect(await early.message("failed")).toEqual({ type: "failed", error: "protocol error: expected start, got drain" });
    expect(early.types()).toEqual(["failed"]);
  });

  it("exits 2 with its usage on bad arguments, before speaking the protocol", async () => {
    const sup = supervise(["--turns", "2", "--", "true"]);
    expect(await sup.exited).toEqual({ code: 2, signal: null });
    expect(sup.stderr).toContain("--harness-id and --harness-version are required");
    expect(sup.stderr).toContain("usage:");
    expect(sup.messages).toEqual([]);
  });
});
