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
 *   resume       a second process on the same native home: spawn ->
 *                `session/resume` (or `session/load`) answered, against the
 *                cold start's spawn -> `session/new`; then the first token
 *                of the resumed session's turn, which carries the history.
 *
 * Restoring the native files into a new sandbox is not in these figures
 * (it is a copy of the declared artifacts, a few files per session here).
 */
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { AcpAgentClient, AcpNativeState, bindAcpState, ensureAgentRelease, nodeSpawn, nodeStatePort } from "@openma/acp";
import { startScriptedModel } from "@openma/scripted-model";
import { AGENT_NAMES, type AgentName, agentLaunch, agentSetup, modernNodeHostDir } from "../test/acp/agents.ts";
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
    ["first", "second", "third"].map((n) => ({ match: { last_user_text_contains: `bench ${i} ${n}` }, response: `ok ${i} ${n}` })),
  ).flat();
  // Side rules do not depend on the endpoint.
  const sideRules = (agentSetup(name, { origin: "", key: "" }).sideRules ?? []) as never[];
  const model = await startScriptedModel({ apiKey: KEY, script: { turns, side_requests: { rules: sideRules } } });
  const setup = agentSetup(name, { origin: model.url, key: KEY });
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
      await new AcpNativeState(nodeStatePort(), binding).materialize();
      await setup.configure?.(binding, nodeStatePort());
      let firstChunk: number | null = null;
      const onUpdate = (u: { update: { sessionUpdate: string } }) => {
        if (firstChunk === null && u.update.sessionUpdate === "agent_message_chunk") firstChunk = performance.now();
      };
      const env = { TMPDIR: root, HOME: join(root, `home${i}`), PATH: launch.path, ...setup.env, ...binding.env };
      const spawnInput = { command: launch.command, args: launch.args, cwd: workspace, env };
      const turn = async (c: AcpAgentClient, sid: string, text: string) => {
        firstChunk = null;
        const sent = performance.now();
        await c.prompt(sid, [{ type: "text", text }]);
        if (firstChunk === null) throw new Error(`${name}: no agent text for "${text}"`);
        return (firstChunk as number) - sent;
      };

      const t0 = performance.now();
      const cold = await AcpAgentClient.start(nodeSpawn, spawnInput, { onUpdate });
      const sid = await cold.newSession(workspace);
      const coldStart = performance.now() - t0;
      const firstTokenCold = await turn(cold, sid, `bench ${i} first`);
      const firstTokenWarm = await turn(cold, sid, `bench ${i} second`);
      await cold.close(sid).catch(() => {});
      await cold.dispose();

      const t1 = performance.now();
      const again = await AcpAgentClient.start(nodeSpawn, spawnInput, { onUpdate });
      const mode = await again.continueSession(sid, workspace);
      const resumeOpen = performance.now() - t1;
      const firstTokenResumed = await turn(again, sid, `bench ${i} third`);
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
  `ACP agents: cold start, first token, resume vs new: ${RUNS} runs per agent, on the host against the scripted model, ${cpus().length} CPUs (${cpus()[0]?.model ?? "unknown CPU"}), Node ${process.version}, ${new Date().toISOString()}\n`,
);
console.log(
  "| Agent (release) | Cold start: spawn -> session/new | First token, 1st turn | First token, 2nd turn | Resume: spawn -> session/resume or load | First token after resume | Resume / new (p50) |",
);
console.log("|---|---|---|---|---|---|---|");
for (const name of agents) {
  const s = await benchAgent(name);
  const r = agentSetup(name, { origin: "", key: "" }).release;
  const ratio = summary(s.map((x) => x.resumeOpen)).p50 / summary(s.map((x) => x.coldStart)).p50;
  console.log(
    `| ${name} (${r.package} ${r.version}), ${s[0]?.mode} | ${cell(s.map((x) => x.coldStart))} | ${cell(s.map((x) => x.firstTokenCold))} | ${cell(s.map((x) => x.firstTokenWarm))} | ${cell(s.map((x) => x.resumeOpen))} | ${cell(s.map((x) => x.firstTokenResumed))} | ${ratio.toFixed(2)}x |`,
  );
}
