/**
 * Crashes of a whole harness placement (SIGKILL to its process group) at the
 * two points the contract names, with real processes and files
 * (testing/crash-harness.ts runs AcpSessionRunner + testing/profile-agent.ts):
 *
 * - inside the capture of turn 2's native files: the durable copy of turn 1
 *   stays whole beside the staged one, the committed candidate is turn 1's,
 *   and the next placement from it resumes (watermarks match: turn 2's idle
 *   was never published); from the uncommitted workspace it is stale;
 * - between publishing turn 2's idle and its workspace commit: the next
 *   placement gets turn 1's candidate behind the canonical idle, classifies
 *   it stale, and recovers once with turn 2 in the recovery prompt.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { cp, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { nodeSpawn, nodeStatePort } from "./node.ts";
import type { CanonicalEvent } from "./recovery-prompt.ts";
import { AcpSessionRunner } from "./session-runner.ts";

const HARNESS = fileURLToPath(new URL("./testing/crash-harness.ts", import.meta.url));
const AGENT = fileURLToPath(new URL("./testing/profile-agent.ts", import.meta.url));
const NATIVE = ".openma/harness-state/acp/sesn_crash/codex/v1";

let dir: string;
afterEach(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function sh(argv: string[]): Promise<string> {
  const r = await nodeStatePort().exec(argv);
  if (r.exitCode !== 0) throw new Error(`${argv.join(" ")}: ${r.stderr}`);
  return r.stdout;
}

/** Runs the harness until it parks at `stop`, then SIGKILLs its whole process group. */
async function crashAt(stop: "capture" | "commit"): Promise<void> {
  dir = await mkdtemp(join(tmpdir(), "openma-acp-crash-"));
  await sh(["mkfifo", join(dir, "park.fifo")]);
  await sh(["mkdir", "-p", join(dir, "bin"), join(dir, "ws")]);
  const realCp = (await sh(["sh", "-c", "command -v cp"])).trim();
  // Copies for real, then (once armed) parks before the caller's rename: the
  // staged copy is on disk, the target not yet replaced.
  await writeFile(
    join(dir, "bin", "cp"),
    `#!/bin/sh\n"${realCp}" "$@" || exit $?\nif [ -e "${dir}/armed" ]; then : > "${dir}/parked"; read _ < "${dir}/park.fifo"; fi\n`,
    { mode: 0o755 },
  );
  // tsx: the runner uses TypeScript that Node's type stripping does not take (parameter properties).
  const child = spawn(process.execPath, ["--no-warnings", "--import", "tsx", HARNESS, dir, stop], {
    env: { ...process.env, PATH: `${join(dir, "bin")}:${process.env.PATH ?? "/usr/bin:/bin"}` },
    stdio: ["ignore", "ignore", "inherit"],
    detached: true,
  });
  let gone: string | null = null;
  const exited = new Promise<string | null>((resolve) =>
    child.once("exit", (code, signal) => {
      gone = `exit ${code} ${signal}`;
      resolve(signal);
    }),
  );
  // Parked, or gone early (then the test fails at once with how it ended).
  await expect.poll(() => gone ?? existsSync(join(dir, "parked")), { timeout: 60_000 }).toBe(true);
  process.kill(-(child.pid as number), "SIGKILL");
  expect(await exited).toBe("SIGKILL");
}

const canonicalLog = async (): Promise<CanonicalEvent[]> =>
  (await readFile(join(dir, "log.jsonl"), "utf8"))
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as CanonicalEvent);

/** The prompts profile-agent.ts logged (as codex) in one rollout file. */
const lines = async (rollout: string): Promise<string[]> =>
  (await readFile(rollout, "utf8"))
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l).text as string);
const rolloutPrompts = (workspace: string, acpSessionId: string): Promise<string[]> =>
  lines(join(workspace, NATIVE, "native", `sessions/2026/12/01/rollout-${acpSessionId}.jsonl`));

/** A fresh placement (new live home) on `workspace`, with the canonical log as it stands. */
async function placement(workspace: string, history: CanonicalEvent[]) {
  const published: CanonicalEvent[] = [];
  const runner = new AcpSessionRunner({
    sessionId: "sesn_crash",
    agent: {
      id: "codex",
      command: process.execPath,
      args: ["--no-warnings", AGENT],
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", PROFILE_AGENT_ID: "codex" },
    },
    spawn: nodeSpawn,
    state: nodeStatePort(),
    history,
    workspaceRoot: workspace,
    ephemeralRoot: join(dir, "eph2"),
    publish: async (events) => {
      published.push(...(events as CanonicalEvent[]));
    },
    commitWorkspace: async () => {},
  });
  return { runner, published };
}

const checkpointOf = async (workspace: string) => JSON.parse(await readFile(join(workspace, NATIVE, "acp-session.json"), "utf8"));

describe("a harness killed (SIGKILL) mid-turn", () => {
  it("inside the capture: the last committed candidate and the durable copy stay whole; the next placement classifies right", async () => {
    await crashAt("capture");
    const log = await canonicalLog();
    // Turn 2's idle was never published; only turn 1 was committed.
    expect(log.filter((e) => e.type === "session.status_idle")).toHaveLength(1);
    expect(await readFile(join(dir, "commits"), "utf8")).toBe("evt_1\n");
    const { acp_session_id: sid } = await checkpointOf(join(dir, "committed"));

    // The kill landed mid-capture: the staged copy holds turn 2, the durable copy it was to replace still holds turn 1 whole.
    const sessions = join(dir, "ws", NATIVE, "native", "sessions");
    expect(existsSync(`${sessions}.openma-partial`)).toBe(true);
    expect(await lines(join(sessions, `2026/12/01/rollout-${sid}.jsonl`))).toEqual(["one"]);
    expect(await lines(join(`${sessions}.openma-partial`, `2026/12/01/rollout-${sid}.jsonl`))).toEqual(["one", "two"]);
    // The committed candidate is turn 1's, unchanged by the partial upload.
    expect(await checkpointOf(join(dir, "committed"))).toMatchObject({ last_completed_turn_id: "evt_1" });
    expect(await rolloutPrompts(join(dir, "committed"), sid)).toEqual(["one"]);

    // The uncommitted workspace: its marker (advanced before the capture) is ahead of the canonical idle → stale.
    expect(await checkpointOf(join(dir, "ws"))).toMatchObject({ last_completed_turn_id: "evt_2" });
    const live = await placement(join(dir, "ws"), log);
    expect(await live.runner.start()).toMatchObject({ mode: "new", recovery: "native-state-stale" });
    await live.runner.shutdown();

    // The committed candidate: watermarks match → resume with turn 1's context; turn 2 runs again.
    const candidate = join(dir, "candidate");
    await cp(join(dir, "committed"), candidate, { recursive: true });
    const next = await placement(candidate, log);
    expect(await next.runner.start()).toMatchObject({ mode: "resume", recovery: null, acpSessionId: sid });
    await next.runner.runTurn("evt_2", "two");
    const said = next.published.filter((e) => e.type === "agent.message").map((e) => (e.content as { text: string }[])[0]?.text);
    expect(said).toEqual(["profile:codex history=1 rows=0"]);
    expect(next.published.filter((e) => e.type === "session.warning")).toHaveLength(0);
    await next.runner.destroy();
  }, 120_000);

  it("between publishing the idle and the workspace commit: stale candidate, one recovery, no context lost", async () => {
    await crashAt("commit");
    const log = await canonicalLog();
    // Turn 2 completed in the canonical log (its idle is published) but its candidate was never committed.
    expect(log.filter((e) => e.type === "session.status_idle")).toHaveLength(2);
    expect(await readFile(join(dir, "commits"), "utf8")).toBe("evt_1\n");
    const committed = await checkpointOf(join(dir, "committed"));
    expect(committed).toMatchObject({ last_completed_turn_id: "evt_1" });

    const candidate = join(dir, "candidate");
    await cp(join(dir, "committed"), candidate, { recursive: true });
    const next = await placement(candidate, log);
    const started = await next.runner.start();
    expect(started).toMatchObject({ mode: "new", recovery: "native-state-stale" });
    expect(started.acpSessionId).not.toBe(committed.acp_session_id);
    await next.runner.runTurn("evt_3", "three");
    const warnings = next.published.filter((e) => e.type === "session.warning");
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ source: "acp_semantic_recovery", details: { reason: "native-state-stale" } });
    // Turn 2, lost with the uncommitted candidate, reaches the new session through the recovery prompt.
    const [prompt, ...rest] = await rolloutPrompts(candidate, started.acpSessionId);
    expect(rest).toEqual([]);
    expect(prompt).toContain('<openma-recovery version="1" reason="native-state-stale">');
    expect(prompt).toContain("User: two");
    expect(prompt).toContain("Assistant: profile:codex turn=2");
    expect(prompt).toContain("Current request:\nthree\n");
    await next.runner.destroy();
  }, 120_000);
});
