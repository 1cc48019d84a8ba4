/**
 * Real ACP agents: the first token of an ACP turn against the agent's own
 * cold start, and resuming a stored session against opening a fresh one.
 * `npx tsx bench/acp-agents.ts [runs=5] [agent...]` (default agent: codex;
 * the others are the names in test/acp/agents.ts). Each release is installed
 * once into the agent cache (docs/acp.md).
 *
 * On the host, no sandbox (the sandbox's own start is bench/bwrap-primitive's
 * subject): each agent runs with the same setup as its e2e test, its native
 * home bound by its profile to a temporary directory, straight at the
 * scripted model (answers are immediate, so what is measured is the agent).
 * Per run, one fresh process each time, timed with the ACP SDK client:
 *
 *   cold start   spawn -> `initialize` answered -> `session/new` answered
 *   first token  `session/prompt` sent -> first `agent_message_chunk`, for
 *                the new session's first turn and for its second turn (the
 *                process is warm then)
 *   resume       a second process on a rebuilt native home (capture,
 *                release, restore, untimed, as a new placement): spawn ->
 *                `session/resume` (or `session/load`) answered, against the
 *                cold start's spawn -> `session/new`; then the first token
 *                of the resumed session's turn, which carries the history.
 *
 * Restoring the native files into a new sandbox is not in these figures
 * (it is a copy of the declared artifacts, a few files per session here).
 *
 * Result lines (bench/report.ts): issue 10 sets no numeric target for ACP
 * agents, so there is nothing to pass or fail against. Each agent prints one
 * line, its resume / new ratio (p50) with target "measured (no target)";
 * `pass` says only that the measurement completed (every run of that agent
 * finished and its resumed turn carried the earlier ones), never that a
 * figure is good. An agent that fails prints its line with pass false and
 * no figure, and the bench goes on to the next.
 */
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { AcpAgentClient, AcpNativeState, bindAcpState, ensureAgentRelease, nodeSpawn, nodeStatePort } from "@openma/acp";
import { startScriptedModel } from "@openma/scripted-model";
import { AGENT_NAMES, type AgentName, agentLaunch, agentSetup, DEFAULT_AGENT_MODELS, modernNodeHostDir } from "../test/acp/agents.ts";
import { reportTarget } from "./report.ts";
import { summary } from "./session-first-exec.ts";

const KEY = "sk-bench-model-key";
const RUNS = Number(process.argv[2] ?? 5);
const agents = (process.argv.slice(3).length > 0 ? process.argv.slice(3) : ["codex"]) as AgentName[];
for (const a of agents) if (!AGENT_NAMES.includes(a)) throw new Error(`unknown agent ${a}; one of ${AGENT_NAMES.join(", ")}`);

interface Sample {
  coldStart: number;
  firstTokenCold: number;
  firstTokenWarm: number;
  resumeOpen: number;
  firstTokenResumed: number;
  mode: string;
}

async function benchAgent(name: AgentName): Promise<Sample[]> {
  const turns = Array.from({ length: RUNS }, (_, i) =>
    ["first", "second", "third"].map((n) => ({ match: { last_user_text_contains: `bench ${i} ${n}` }, response: `${n}-${i}-ok` })),
  ).flat();
  // Side rules do not depend on the endpoint.
  const sideRules = (agentSetup(name, { origin: "", key: "" }).sideRules ?? []) as never[];
  const model = await startScriptedModel({ apiKey: KEY, script: { turns, side_requests: { rules: sideRules } } });
  const setup = agentSetup(name, { origin: model.url, key: KEY, model: DEFAULT_AGENT_MODELS[name] });
  const agentDir = (await ensureAgentRelease(setup.release)).dir;
  const launch = agentLaunch(setup.release, { agentDir, nodeDir: modernNodeHostDir() });
  const root = await mkdtemp(join(tmpdir(), `bench-acp-${name}-`));
  const samples: Sample[] = [];
  try {
    for (let i = 0; i < RUNS; i++) {
      const workspace = join(root, `ws${i}`);
      await mkdir(workspace, { recursive: true });
      const binding = bindAcpState({
        sessionId: `bench${i}`,
        agent: { id: setup.release.id },
        workspaceRoot: workspace,
        ephemeralRoot: join(root, `eph${i}`),
      });
      // As the runner does: the live home and every directory its profile binds exist before the agent starts.
      const state = new AcpNativeState(nodeStatePort(), binding);
      await state.materialize();
      await setup.configure?.(binding, nodeStatePort());
      // The first chunk of this turn's answer (`<turn>-<run>-ok`, turn name first):
      // Gemini CLI replays a loaded session's history after answering
      // session/load, so other chunks can arrive while the prompt is in flight.
      let expected = "";
      let firstChunk: number | null = null;
      const onUpdate = (u: { update: { sessionUpdate: string } }) => {
        const content = (u.update as { content?: { text?: unknown } }).content;
        const text = u.update.sessionUpdate === "agent_message_chunk" && typeof content?.text === "string" ? content.text : "";
        if (firstChunk === null && text.trim() !== "" && expected.startsWith(text.trim())) firstChunk = performance.now();
      };
      const env = { TMPDIR: root, HOME: join(root, `home${i}`), PATH: launch.path, ...setup.env, ...binding.env };
      const spawnInput = { command: launch.command, args: launch.args, cwd: workspace, env };
      const turn = async (c: AcpAgentClient, sid: string, n: string) => {
        expected = `${n}-${i}-ok`;
        firstChunk = null;
        const sent = performance.now();
        await c.prompt(sid, [{ type: "text", text: `bench ${i} ${n}` }]);
        if (firstChunk === null) throw new Error(`${name}: no "${expected}" in the answer to "bench ${i} ${n}"`);
        return (firstChunk as number) - sent;
      };

      const t0 = performance.now();
      const cold = await AcpAgentClient.start(nodeSpawn, spawnInput, { onUpdate });
      const sid = await cold.newSession(workspace);
      const coldStart = performance.now() - t0;
      const firstTokenCold = await turn(cold, sid, "first");
      const firstTokenWarm = await turn(cold, sid, "second");
      await cold.close(sid).catch(() => {});
      await cold.dispose();
      // As a new placement (untimed): the declared artifacts go to the durable
      // copy, the live home is dropped and rebuilt, and they come back (with
      // the profile's restore renames: Gemini CLI cannot load a chat in the
      // minute it began without them).
      await state.capture();
      await state.release();
      await state.materialize();
      await setup.configure?.(binding, nodeStatePort());
      await state.restore();

      const t1 = performance.now();
      const again = await AcpAgentClient.start(nodeSpawn, spawnInput, { onUpdate });
      const mode = await again.continueSession(sid, workspace);
      const resumeOpen = performance.now() - t1;
      const firstTokenResumed = await turn(again, sid, "third");
      await again.dispose();
      const carried = JSON.stringify(model.requests.filter((r) => r.kind === "turn").at(-1)?.view?.messages ?? []);
      if (!carried.includes(`bench ${i} first`)) throw new Error(`${name}: the resumed turn did not carry the earlier ones`);
      samples.push({ coldStart, firstTokenCold, firstTokenWarm, resumeOpen, firstTokenResumed, mode });
      console.error(
        `${name} run ${i + 1}/${RUNS}: ${JSON.stringify(samples.at(-1), (_k, v) => (typeof v === "number" ? Math.round(v) : v))}`,
      );
    }
  } finally {
    await model.close();
    await rm(root, { recursive: true, force: true });
  }
  return samples;
}

const ms = (x: number) => `${Math.round(x)} ms`;
const cell = (xs: number[]) => {
  const s = summary(xs);
  return `${ms(s.p50)} / ${ms(s.p95)}`;
};

console.log(
  `ACP agents: cold start, first token, resume vs new: ${RUNS} runs per agent, on the host against the scripted model, ${cpus().length} CPUs (${cpus()[0]?.model ?? "unknown CPU"}), Node ${process.version}, load average ${loadavg()
    .map((x) => x.toFixed(1))
    .join(" ")} at start, ${new Date().toISOString()}\n`,
);
console.log(
  "| Agent (release) | Cold start: spawn -> session/new | First token, 1st turn | First token, 2nd turn | Resume: spawn -> session/resume or load | First token after resume | Resume / new (p50) |",
);
console.log("|---|---|---|---|---|---|---|");
for (const name of agents) {
  const r = agentSetup(name, { origin: "", key: "" }).release;
  const metric = `${name} (${r.package} ${r.version}): resume (spawn -> session/resume or load) / new (spawn -> session/new), p50`;
  let s: Sample[];
  try {
    s = await benchAgent(name);
  } catch (error) {
    console.error(`${name}: the measurement did not complete: ${(error as Error).message}`);
    console.log(`| ${name} (${r.package} ${r.version}) | did not complete | | | | | |`);
    reportTarget({ bench: "acp-agents", metric, target: "measured (no target)", measured: Number.NaN, unit: "x", pass: false });
    continue;
  }
  const ratio = summary(s.map((x) => x.resumeOpen)).p50 / summary(s.map((x) => x.coldStart)).p50;
  console.log(
    `| ${name} (${r.package} ${r.version}), ${s[0]?.mode} | ${cell(s.map((x) => x.coldStart))} | ${cell(s.map((x) => x.firstTokenCold))} | ${cell(s.map((x) => x.firstTokenWarm))} | ${cell(s.map((x) => x.resumeOpen))} | ${cell(s.map((x) => x.firstTokenResumed))} | ${ratio.toFixed(2)}x |`,
  );
  reportTarget({ bench: "acp-agents", metric, target: "measured (no target)", measured: Number(ratio.toFixed(2)), unit: "x", pass: true });
}
