/**
 * The ACP session runner against a real ACP child (official SDK): two turns
 * with per-turn commits, a kill mid-turn 3, a fresh placement that resumes
 * from restored native files, then deleted native state → one semantic
 * recovery with one warning; a checkpoint behind the canonical idle → stale.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AcpChildProcess, AcpSpawn } from "./agent-client.ts";
import { nodeSpawn, nodeStatePort } from "./node.ts";
import type { EventDraft } from "./projection.ts";
import type { CanonicalEvent } from "./recovery-prompt.ts";
import { AcpSessionRunner } from "./session-runner.ts";

const CHILD = fileURLToPath(new URL("./testing/profile-agent.ts", import.meta.url));

let base: string;
beforeAll(async () => {
  base = await mkdtemp(join(tmpdir(), "openma-acp-runner-"));
});
afterAll(async () => {
  await rm(base, { recursive: true, force: true });
});

/** The Session's canonical log as the API would hold it, and what each placement did. */
class FakeSessionLog {
  events: CanonicalEvent[] = [];
  order: string[] = [];
  input(id: string, text: string) {
    this.events.push({ id, type: "user.message", content: [{ type: "text", text }] });
  }
}

function placement(log: FakeSessionLog, workspace: string, ephemeralRoot: string, profile: string) {
  const children: AcpChildProcess[] = [];
  const spawn: AcpSpawn = (input) => {
    const child = nodeSpawn(input);
    children.push(child);
    return child;
  };
  const runner = new AcpSessionRunner({
    sessionId: "sesn_runner",
    agent: {
      id: profile,
      command: process.execPath,
      args: ["--no-warnings", CHILD],
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin", PROFILE_AGENT_ID: profile },
    },
    spawn,
    state: nodeStatePort(),
    history: [...log.events],
    workspaceRoot: workspace,
    ephemeralRoot,
    publish: async (events: EventDraft[]) => {
      log.order.push(`publish:${events.map((e) => e.type).join(",")}`);
      log.events.push(...(events as CanonicalEvent[]));
    },
    commitWorkspace: async (turnId) => {
      log.order.push(`commit:${turnId}`);
    },
  });
  return { runner, kill: () => Promise.all(children.map((c) => c.kill())) };
}

const texts = (events: CanonicalEvent[], type: string) =>
  events.filter((e) => e.type === type).map((e) => ((e.content as { text: string }[] | undefined)?.[0]?.text ?? "") as string);

describe("AcpSessionRunner", () => {
  it("two turns, kill mid-turn 3, resume from restored native files, then one semantic recovery", async () => {
    const workspace = join(base, "ws");
    const eph = join(base, "tmp");
    await nodeStatePort().exec(["mkdir", "-p", workspace]);
    const log = new FakeSessionLog();

    // Placement 1: a fresh session, two turns.
    const p1 = placement(log, workspace, eph, "codex");
    expect(await p1.runner.start()).toMatchObject({ mode: "new", recovery: null });
    log.input("evt_u1", "one");
    const r1 = await p1.runner.runTurn("evt_u1", "one");
    expect(r1.stopReason).toBe("end_turn");
    log.input("evt_u2", "two");
    await p1.runner.runTurn("evt_u2", "two");
    expect(texts(log.events, "agent.message")).toEqual(["profile:codex turn=1", "profile:codex turn=2"]);
    // Usage became paired spans with Managed Agents model_usage.
    const ends = log.events.filter((e) => e.type === "span.model_request_end");
    const starts = log.events.filter((e) => e.type === "span.model_request_start");
    expect(ends.map((e) => e.model_request_start_id)).toEqual(starts.map((e) => e.id));
    expect(ends.map((e) => (e.model_usage as { input_tokens: number }).input_tokens)).toEqual([10, 20]);
    // The idle is published before the workspace commit, once per turn.
    expect(log.order.filter((o) => o.startsWith("commit"))).toEqual(["commit:evt_u1", "commit:evt_u2"]);
    expect(log.order.at(-2)).toMatch(/session\.status_idle$/);
    const checkpoint = JSON.parse(await readFile(p1.runner.binding.checkpointPath, "utf8"));
    expect(checkpoint.last_completed_turn_id).toBe("evt_u2");

    // Turn 3 hangs; the sandbox dies under it.
    log.input("evt_u3", "hang");
    const hung = p1.runner.runTurn("evt_u3", "hang").then(
      () => null,
      (error: unknown) => error,
    );
    await new Promise<void>((resolve) => {
      const check = () => (log.order.at(-1)?.includes("span.model_request_start") ? resolve() : setImmediate(check));
      check();
    });
    await p1.kill();
    expect(await hung).toBeInstanceOf(Error);
    await nodeStatePort().exec(["rm", "-rf", eph]); // the sandbox's /tmp is gone with it

    // Placement 2: fresh live home, restored files, session/resume.
    const p2 = placement(log, workspace, eph, "codex");
    const started = await p2.runner.start();
    expect(started).toMatchObject({ mode: "resume", recovery: null, acpSessionId: checkpoint.acp_session_id });
    log.input("evt_u4", "four");
    await p2.runner.runTurn("evt_u4", "four");
    expect(texts(log.events, "agent.message").at(-1)).toBe("profile:codex history=2 rows=0");
    await p2.runner.shutdown();

    // Native state deleted: the next placement recovers semantically, once.
    await nodeStatePort().exec(["rm", "-rf", `${p2.runner.binding.checkpointNativePath}`]);
    const p3 = placement(log, workspace, eph, "codex");
    const recovered = await p3.runner.start();
    expect(recovered).toMatchObject({ mode: "new", recovery: "native-state-missing" });
    log.input("evt_u5", "five");
    await p3.runner.runTurn("evt_u5", "five");
    log.input("evt_u6", "six");
    await p3.runner.runTurn("evt_u6", "six");
    const warnings = log.events.filter((e) => e.type === "session.warning");
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatchObject({ source: "acp_semantic_recovery", details: { reason: "native-state-missing" } });
    // The new ACP session's first prompt was the bounded recovery prompt with the earlier turns, the second plain.
    const rollout = `${p3.runner.binding.nativePath}/sessions/2026/12/01/rollout-${recovered.acpSessionId}.jsonl`;
    const prompts = (await readFile(rollout, "utf8"))
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l).text as string);
    expect(prompts).toHaveLength(2);
    expect(prompts[0]).toContain('<openma-recovery version="1" reason="native-state-missing">');
    expect(prompts[0]).toContain("User: two");
    expect(prompts[0]).toContain("Assistant: profile:codex turn=2");
    expect(prompts[0]).toContain("Current request:\nfive\n");
    expect(prompts[1]).toBe("six");
    await p3.runner.destroy();
  });

  it("a checkpoint behind the canonical idle is stale and recovers once", async () => {
    const workspace = join(base, "ws-stale");
    const eph = join(base, "tmp-stale");
    await nodeStatePort().exec(["mkdir", "-p", workspace]);
    const log = new FakeSessionLog();
    const p1 = placement(log, workspace, eph, "gemini");
    await p1.runner.start();
    log.input("evt_a", "a");
    await p1.runner.runTurn("evt_a", "a");
    await p1.runner.shutdown();
    // Another turn reached the canonical log (its idle published) but its candidate never committed.
    log.input("evt_b", "b");
    log.events.push(
      { id: "x1", type: "agent.message", content: [{ type: "text", text: "b done" }] },
      { id: "x2", type: "session.status_idle" },
    );
    const p2 = placement(log, workspace, eph, "gemini");
    expect(await p2.runner.start()).toMatchObject({ mode: "new", recovery: "native-state-stale" });
    log.input("evt_c", "c");
    await p2.runner.runTurn("evt_c", "c");
    expect(log.events.filter((e) => e.type === "session.warning")).toHaveLength(1);
    await p2.runner.destroy();
  });
});
