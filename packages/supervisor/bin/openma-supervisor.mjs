#!/usr/bin/env node
/**
 * The reference in-sandbox supervisor for openma-harness-supervisor-v1
 * (docs/supervisor-protocol.md). Plain, dependency-free JavaScript for the
 * node inside the sandbox images.
 *
 *   openma-supervisor.mjs --harness-id ID --harness-version VERSION
 *                         [--turns N | --turns-file PATH] [--stop-grace-ms MS]
 *                         -- COMMAND [ARG...]
 *
 * It runs the harness COMMAND once per turn: N times (`--turns`, default 1)
 * or once per non-empty line of PATH (`--turns-file`, read after start,
 * relative to the working directory). Turn k has id `turn-k`; the harness
 * gets OPENMA_TURN_ID, OPENMA_TURN_INDEX, OPENMA_TURN_INPUT (the line, also
 * on its stdin), OPENMA_ENVIRONMENT_ID, OPENMA_SESSION_ID, OPENMA_GENERATION,
 * OPENMA_ATTEMPT and OPENMA_RESTORED_CANDIDATE (empty for a fresh workspace).
 * Its stdout and stderr go to the supervisor's stderr: stdout is the
 * protocol channel and nothing else may write to it.
 *
 * After each successful turn it asks the host to checkpoint (publish) the
 * workspace and outputs, and waits for the answer: `committed` goes on,
 * `failed` is logged and goes on (the next commit carries the changes),
 * `rejected` ends the run as failed. A harness exiting non-zero ends the run
 * as failed. After the last turn it reports `completed` and waits.
 *
 * `drain` stops it from starting turns; the current turn (and its
 * checkpoint) finishes, then it answers `drained`. `stop`, the end of stdin
 * or SIGTERM end the harness (SIGTERM to its process group, SIGKILL after
 * the grace period) and exit. The host holds no expectation that this
 * process is polite: it kills it at every bound.
 */
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";

const PROTOCOL = "openma-harness-supervisor-v1";
const MAX_LINE_BYTES = 64 * 1024;
const USAGE =
  "usage: openma-supervisor.mjs --harness-id ID --harness-version VERSION [--turns N | --turns-file PATH] [--stop-grace-ms MS] -- COMMAND [ARG...]";

// ---- arguments ---------------------------------------------------------------

function parseArgs(argv) {
  const options = { harnessId: null, harnessVersion: null, turns: null, turnsFile: null, stopGraceMs: 2000, command: [] };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--") {
      options.command = argv.slice(i + 1);
      break;
    }
    const value = argv[i + 1];
    if (value === undefined) throw new Error(`${arg} needs a value`);
    i++;
    if (arg === "--harness-id") options.harnessId = value;
    else if (arg === "--harness-version") options.harnessVersion = value;
    else if (arg === "--turns") options.turns = nonNegativeInteger(arg, value);
    else if (arg === "--turns-file") options.turnsFile = value;
    else if (arg === "--stop-grace-ms") options.stopGraceMs = nonNegativeInteger(arg, value);
    else throw new Error(`unknown option ${arg}`);
  }
  if (!options.harnessId || !options.harnessVersion) throw new Error("--harness-id and --harness-version are required");
  if (options.turns !== null && options.turnsFile !== null) throw new Error("--turns and --turns-file exclude each other");
  if (options.command.length === 0) throw new Error("no harness command after --");
  return options;
}

function nonNegativeInteger(name, text) {
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < 0) throw new Error(`${name} must be a non-negative integer`);
  return n;
}

let options;
try {
  options = parseArgs(process.argv.slice(2));
} catch (err) {
  process.stderr.write(`openma-supervisor: ${err.message}\n${USAGE}\n`);
  process.exit(2);
}

// ---- the wire ----------------------------------------------------------------

function log(text) {
  process.stderr.write(`openma-supervisor: ${text}\n`);
}

function send(message) {
  process.stdout.write(`${JSON.stringify(message)}\n`);
}

// A broken stdout means the host is gone: nobody is left to report to.
process.stdout.on("error", () => process.exit(1));

let exiting = false;
/** Set by stop: a harness cut short by it is not a failure, and nothing more is reported. */
let stopping = false;
let heartbeatTimer;

/** Exits once everything written to stdout has been handed to the pipe. */
function exit(code) {
  if (exiting) return;
  exiting = true;
  clearInterval(heartbeatTimer);
  process.stdout.write("", () => process.exit(code));
}

/** A fatal problem: report it (the host decides what follows) and go. */
function fail(error, code = 1) {
  log(error);
  if (!exiting && !stopping) send({ type: "failed", error: String(error).slice(0, 4000) });
  void stopHarness().then(() => exit(code));
}

/** `stop`, end of stdin, SIGTERM: end the harness, then exit. */
function stop() {
  stopping = true;
  void stopHarness().then(() => exit(0));
}

const state = {
  phase: "awaiting_start", // awaiting_start | running | completed | failed
  start: null,
  draining: false,
  drainedSent: false,
  /** The turn in progress (harness running or its checkpoint pending), or null. */
  turn: null,
  pendingCheckpoint: null,
};
/** The harness child of the current turn, or null. */
let harness = null;

function onMessage(message) {
  if (message === null || typeof message !== "object" || typeof message.type !== "string") {
    return fail("protocol error: a message must be an object with a type");
  }
  if (state.phase === "awaiting_start") {
    if (message.type === "stop") return stop();
    if (message.type !== "start") return fail(`protocol error: expected start, got ${message.type}`);
    return onStart(message);
  }
  switch (message.type) {
    case "checkpoint_result":
      return onCheckpointResult(message);
    case "drain":
      state.draining = true;
      return maybeDrained();
    case "stop":
      return stop();
    default:
      return fail(`protocol error: unexpected ${message.type}`);
  }
}

function onStart(start) {
  if (start.protocol !== PROTOCOL) return fail(`the host speaks ${start.protocol}, this supervisor ${PROTOCOL}`);
  const interval = Number(start.heartbeatIntervalMs);
  if (!Number.isSafeInteger(interval) || interval < 1) return fail("start.heartbeatIntervalMs must be a positive integer");
  state.start = start;
  state.phase = "running";
  send({ type: "ready", protocol: PROTOCOL, harness: { id: options.harnessId, version: options.harnessVersion } });
  heartbeatTimer = setInterval(() => send({ type: "heartbeat" }), interval);
  runTurns().catch((err) => fail(`supervisor error: ${err.message}`));
}

function onCheckpointResult(message) {
  const pending = state.pendingCheckpoint;
  if (pending === null || message.turnId !== pending.turnId) {
    return fail(`protocol error: checkpoint_result for ${JSON.stringify(message.turnId)} that was not requested`);
  }
  state.pendingCheckpoint = null;
  pending.resolve(message.result ?? { type: "failed", error: "no result" });
}

/** Answers a drain once no turn is in progress (at once when idle, completed or failed). */
function maybeDrained() {
  if (!state.draining || state.drainedSent || state.turn !== null) return;
  state.drainedSent = true;
  send({ type: "drained" });
}

// ---- turns -------------------------------------------------------------------

function turnInputs() {
  if (options.turnsFile === null) return Array.from({ length: options.turns ?? 1 }, () => "");
  return readFileSync(options.turnsFile, "utf8")
    .split("\n")
    .map((line) => line.replace(/\r$/, ""))
    .filter((line) => line.trim() !== "");
}

async function runTurns() {
  const inputs = turnInputs();
  for (let index = 1; index <= inputs.length; index++) {
    if (state.draining || exiting || stopping) break;
    const turnId = `turn-${index}`;
    state.turn = turnId;
    const code = await runHarness(turnId, index, inputs[index - 1]);
    if (exiting || stopping) return;
    if (code !== 0) {
      state.turn = null;
      state.phase = "failed";
      return fail(`turn ${turnId}: the harness ${code === null ? "was killed" : `exited with code ${code}`}`);
    }
    const result = await requestCheckpoint(turnId);
    state.turn = null;
    if (exiting || stopping) return;
    if (result.type === "rejected") {
      state.phase = "failed";
      return fail(`turn ${turnId}: the host rejected its checkpoint (${result.reason})`);
    }
    if (result.type === "failed") log(`turn ${turnId}: checkpoint failed (${result.error}); the next checkpoint carries its changes`);
    else log(`turn ${turnId}: committed revision ${result.revision}${result.replayed ? " (replayed)" : ""}`);
  }
  // A drain that arrived mid-run is answered; the run is not complete then, so no `completed`.
  if (state.draining) return maybeDrained();
  state.phase = "completed";
  send({ type: "completed" });
}

function requestCheckpoint(turnId) {
  return new Promise((resolve) => {
    state.pendingCheckpoint = { turnId, resolve };
    send({ type: "checkpoint_request", turnId });
  });
}

function runHarness(turnId, index, input) {
  const start = state.start;
  const [file, ...args] = options.command;
  return new Promise((resolve) => {
    const child = spawn(file, args, {
      // Harness output is a log: it must never reach stdout, the protocol channel.
      stdio: ["pipe", 2, 2],
      // Its own process group, so stop reaches everything it started.
      detached: true,
      env: {
        ...process.env,
        OPENMA_TURN_ID: turnId,
        OPENMA_TURN_INDEX: String(index),
        OPENMA_TURN_INPUT: input,
        OPENMA_ENVIRONMENT_ID: String(start.scope?.environmentId ?? ""),
        OPENMA_SESSION_ID: String(start.scope?.sessionId ?? ""),
        OPENMA_GENERATION: String(start.generation ?? ""),
        OPENMA_ATTEMPT: String(start.attempt ?? ""),
        OPENMA_RESTORED_CANDIDATE: String(start.restored?.candidateId ?? ""),
      },
    });
    harness = child;
    child.stdin.on("error", () => {}); // a harness that does not read its input is fine
    child.stdin.end(input === "" ? "" : `${input}\n`);
    child.on("error", (err) => {
      log(`turn ${turnId}: ${err.message}`);
      harness = null;
      resolve(127);
    });
    child.on("exit", (code) => {
      harness = null;
      resolve(code);
    });
  });
}

/** SIGTERM to the harness's process group, SIGKILL after the grace period. */
function stopHarness() {
  const child = harness;
  if (child === null || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const signalGroup = (signal) => {
      try {
        process.kill(-child.pid, signal);
      } catch {
        // already gone
      }
    };
    const timer = setTimeout(() => signalGroup("SIGKILL"), options.stopGraceMs);
    child.once("exit", () => {
      clearTimeout(timer);
      resolve();
    });
    signalGroup("SIGTERM");
  });
}

// ---- stdin -------------------------------------------------------------------

let buffered = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  buffered += chunk;
  let newline = buffered.indexOf("\n");
  while (newline >= 0 && !exiting) {
    const line = buffered.slice(0, newline);
    buffered = buffered.slice(newline + 1);
    if (line.trim() !== "") {
      let message;
      try {
        message = JSON.parse(line);
      } catch {
        return fail("protocol error: a line from the host is not JSON");
      }
      onMessage(message);
    }
    newline = buffered.indexOf("\n");
  }
  if (Buffer.byteLength(buffered) > MAX_LINE_BYTES) fail("protocol error: a line from the host is too long");
});
// The host closing stdin means stop.
process.stdin.on("end", stop);
process.on("SIGTERM", stop);
