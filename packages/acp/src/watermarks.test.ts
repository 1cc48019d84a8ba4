import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { bindAcpState } from "./binding.ts";
import { AcpNativeState, type AcpStatePort } from "./native-state.ts";
import { nodeStatePort } from "./node.ts";
import { canonicalWatermark, decideResume, prepareResume } from "./watermarks.ts";

const ok = { ok: true, missing: [] };

describe("decideResume", () => {
  const cp = { adapterId: "codex", acpSessionId: "acp_1", lastCompletedTurnId: "evt_2" };
  it("resumes only when both watermarks match and the artifacts are there", () => {
    expect(decideResume({ checkpoint: cp, canonical: { completedTurnId: "evt_2" }, resume: "native-and-acp", probe: ok })).toEqual({
      type: "resume",
      acpSessionId: "acp_1",
    });
  });
  it("classifies a checkpoint behind (or ahead of) the canonical idle as stale", () => {
    for (const completedTurnId of ["evt_3", "evt_1", undefined]) {
      expect(decideResume({ checkpoint: cp, canonical: { completedTurnId }, resume: "native-and-acp", probe: ok })).toEqual({
        type: "new",
        recovery: "native-state-stale",
      });
    }
  });
  it("classifies an absent checkpoint as stale once the log has a completed turn, and as a first start otherwise", () => {
    expect(decideResume({ checkpoint: null, canonical: { completedTurnId: "evt_1" }, resume: "native-and-acp", probe: ok })).toEqual({
      type: "new",
      recovery: "native-state-stale",
    });
    expect(decideResume({ checkpoint: null, canonical: { completedTurnId: undefined }, resume: "native-and-acp", probe: ok })).toEqual({
      type: "new",
      recovery: null,
    });
  });
  it("classifies a missing required artifact as missing; acp-only profiles keep the id", () => {
    const probe = { ok: false, missing: ["/x"] };
    expect(decideResume({ checkpoint: cp, canonical: { completedTurnId: "evt_2" }, resume: "native-and-acp", probe })).toEqual({
      type: "new",
      recovery: "native-state-missing",
    });
    expect(decideResume({ checkpoint: cp, canonical: { completedTurnId: "evt_2" }, resume: "acp-only", probe })).toEqual({
      type: "resume",
      acpSessionId: "acp_1",
    });
  });
});

describe("canonicalWatermark", () => {
  it("is the latest input before the latest idle", () => {
    const events = [
      { id: "e1", type: "user.message" },
      { id: "e2", type: "agent.message" },
      { id: "e3", type: "session.status_idle" },
      { id: "e4", type: "user.message" },
      { id: "e5", type: "agent.tool_use" },
      { id: "e6", type: "user.tool_confirmation" },
      { id: "e7", type: "session.status_idle" },
      { id: "e8", type: "user.message" },
      { id: "e9", type: "session.status_running" },
    ];
    expect(canonicalWatermark(events)).toEqual({ completedTurnId: "e6" });
    expect(canonicalWatermark(events.slice(0, 2))).toEqual({ completedTurnId: undefined });
  });
});

describe("prepareResume over a real port", () => {
  let dir: string;
  afterEach(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  async function placed(agent: string) {
    dir = await mkdtemp(join(tmpdir(), "openma-acp-wm-"));
    const binding = bindAcpState({
      sessionId: "sesn_w",
      agent: { id: agent },
      workspaceRoot: join(dir, "ws"),
      ephemeralRoot: join(dir, "tmp"),
    });
    const state = new AcpNativeState(nodeStatePort(), binding);
    await state.materialize();
    return state;
  }

  it("a stale checkpoint and a missing artifact each take recovery, and neither restores", async () => {
    const state = await placed("claude-acp");
    const transcript = `${state.binding.artifacts[0]?.runtimePath}/p/s.jsonl`;
    await nodeStatePort().exec(["mkdir", "-p", `${state.binding.artifacts[0]?.runtimePath}/p`]);
    await writeFile(transcript, "{}\n");
    await state.writeCheckpoint({ acpSessionId: "acp_x", lastCompletedTurnId: "evt_1" });
    await state.capture();
    await state.release();

    const stale = await prepareResume(state, { completedTurnId: "evt_2" });
    expect(stale.plan).toEqual({ type: "new", recovery: "native-state-stale" });
    await expect(nodeStatePort().exec(["test", "-e", transcript])).resolves.toMatchObject({ exitCode: 1 });

    await nodeStatePort().exec(["rm", "-rf", state.binding.artifacts[0]?.path as string]);
    const missing = await prepareResume(state, { completedTurnId: "evt_1" });
    expect(missing.plan).toEqual({ type: "new", recovery: "native-state-missing" });
    expect(missing.probe.missing).toEqual([state.binding.artifacts[0]?.path]);
  });

  it("a failing port counts as missing, never as resumable", async () => {
    const state = await placed("codex");
    await state.writeCheckpoint({ acpSessionId: "acp_y", lastCompletedTurnId: "evt_1" });
    const real = nodeStatePort();
    const broken: AcpStatePort = {
      writeFile: real.writeFile,
      exec: async (argv) =>
        argv.includes("probe") || String(argv[2]).includes("while") ? { exitCode: 1, stdout: "", stderr: "boom" } : real.exec(argv),
    };
    const plan = await prepareResume(new AcpNativeState(broken, state.binding), { completedTurnId: "evt_1" });
    expect(plan.plan).toEqual({ type: "new", recovery: "native-state-missing" });
  });
});
