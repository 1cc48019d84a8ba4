/**
 * The 18-profile matrix: a real ACP child (official SDK, agent side) plays
 * each profile and writes where that agent family keeps its session, found
 * only through the environment the binding gives it. For every profile the
 * binding manifest, capture (allowlist only, sqlite WAL included), release,
 * restore + resume in a fresh placement, and destroy must be right.
 */
import { mkdtemp, readdir, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AcpAgentClient, AcpResumeError } from "./agent-client.ts";
import { type AcpStateBinding, bindAcpState } from "./binding.ts";
import { parseSessionBinding } from "./files.ts";
import { AcpNativeState } from "./native-state.ts";
import { nodeSpawn, nodeStatePort } from "./node.ts";
import { ACP_PROFILES } from "./profiles.ts";
import { prepareResume } from "./watermarks.ts";

const CHILD = fileURLToPath(new URL("./testing/profile-agent.ts", import.meta.url));
const port = nodeStatePort();

let base: string;
beforeAll(async () => {
  base = await mkdtemp(join(tmpdir(), "openma-acp-matrix-"));
});
afterAll(async () => {
  await rm(base, { recursive: true, force: true });
});

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

async function filesUnder(dir: string): Promise<string[]> {
  if (!(await exists(dir))) return [];
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries.filter((e) => e.isFile()).map((e) => relative(dir, join(e.parentPath, e.name)));
}

async function startChild(binding: AcpStateBinding, workspace: string, profileId: string) {
  const updates: string[] = [];
  const client = await AcpAgentClient.start(
    nodeSpawn,
    {
      command: process.execPath,
      args: ["--no-warnings", CHILD],
      cwd: workspace,
      env: { ...binding.env, PATH: process.env.PATH ?? "/usr/bin:/bin", PROFILE_AGENT_ID: profileId },
    },
    {
      onUpdate: (n) => {
        if (n.update.sessionUpdate === "agent_message_chunk" && n.update.content.type === "text") updates.push(n.update.content.text);
      },
    },
  );
  return { client, updates };
}

const CASES = [...ACP_PROFILES.map((p) => [p.matches[0] as string, p.id] as const), ["some-unknown-agent", "opaque"] as const];

describe("ACP native-state profile matrix", () => {
  it("declares the contract's 18 profiles", () => {
    expect(ACP_PROFILES.map((p) => p.id)).toEqual([
      "claude-code",
      "codex",
      "gemini",
      "opencode",
      "pi",
      "mcode",
      "copilot",
      "cortex-code",
      "goose",
      "junie",
      "kimi",
      "qwen-code",
      "mistral-vibe",
      "dsh",
      "hermes",
      "aider",
      "kimi-code",
      "mimo",
    ]);
  });

  it.each(CASES)("%s → %s: manifest, capture, release, restore + continue, destroy", async (agentId, profileId) => {
    const root = join(base, profileId);
    const workspace = join(root, "workspace");
    const ephemeralRoot = join(root, "tmp", "openma-harness-state");
    await port.exec(["mkdir", "-p", workspace]);
    const binding = bindAcpState({ sessionId: "sesn_matrix", agent: { id: agentId }, workspaceRoot: workspace, ephemeralRoot });
    expect(binding.profile.id).toBe(profileId);
    const state = new AcpNativeState(port, binding);

    // Manifest before launch: exactly the bound artifacts.
    await state.materialize();
    const manifest = parseSessionBinding(await readFile(binding.bindingPath, "utf8"));
    expect(manifest?.adapter_id).toBe(profileId);
    expect(manifest?.session_artifacts).toEqual(
      binding.artifacts.map(({ path, runtimePath, kind, requiredForResume }) => ({ path, runtimePath, kind, requiredForResume })),
    );
    for (const a of binding.artifacts) {
      expect(a.path.startsWith(`${binding.checkpointNativePath}/`)).toBe(true);
      expect(a.runtimePath.startsWith(`${binding.nativePath}/`)).toBe(true);
    }

    // Placement A: two turns, then the per-turn checkpoint.
    const a = await startChild(binding, workspace, profileId);
    const sid = await a.client.newSession(workspace);
    await a.client.prompt(sid, [{ type: "text", text: "turn one" }]);
    const response = await a.client.prompt(sid, [{ type: "text", text: "turn two" }]);
    expect(response.usage?.inputTokens).toBe(20); // the unstable field survives parsing
    expect(a.updates).toEqual([`profile:${profileId} turn=1`, `profile:${profileId} turn=2`]);
    await state.writeCheckpoint({ acpSessionId: sid, lastCompletedTurnId: "evt_turn2" });
    // Captured while the child is idle with its databases still open: rows sit in the WAL.
    await state.capture();
    expect(await exists(`${binding.ephemeralRootPath}/native/started`)).toBe(true);

    // The durable tree holds the two files plus declared artifacts, nothing else (no noise).
    const durable = await filesUnder(binding.rootPath);
    const allowed = (f: string) =>
      f === "acp-session.json" ||
      f === "session-binding.json" ||
      binding.artifacts.some((art) => {
        const rel = relative(binding.rootPath, art.path);
        if (art.kind === "directory") return f.startsWith(`${rel}/`);
        if (art.kind === "sqlite") return f === rel || f === `${rel}-wal` || f === `${rel}-shm`;
        return f === rel;
      });
    expect(durable.filter((f) => !allowed(f))).toEqual([]);
    const liveNoise = (await filesUnder(binding.nativePath)).filter(
      (f) => !binding.artifacts.some((x) => join(binding.nativePath, f).startsWith(x.runtimePath)),
    );
    if (binding.profile.artifacts.length > 0) expect(liveNoise.length).toBeGreaterThan(0); // the noise existed, and stayed behind
    for (const art of binding.artifacts.filter((x) => x.requiredForResume)) expect(await exists(art.path)).toBe(true);
    for (const art of binding.artifacts.filter((x) => x.kind === "sqlite")) expect(await exists(`${art.path}-wal`)).toBe(true);

    // Sandbox loss: the child dies, the live home goes, the durable copy stays.
    await a.client.dispose();
    await state.release();
    expect(await exists(binding.ephemeralSessionPath)).toBe(false);
    expect(await exists(binding.checkpointPath)).toBe(true);

    // Placement B: fresh live home, restore, continue.
    const fresh = new AcpNativeState(
      port,
      bindAcpState({ sessionId: "sesn_matrix", agent: { id: agentId }, workspaceRoot: workspace, ephemeralRoot }),
    );
    await fresh.materialize();
    const { plan } = await prepareResume(fresh, { completedTurnId: "evt_turn2" });
    expect(plan).toEqual({ type: "resume", acpSessionId: sid });
    const b = await startChild(fresh.binding, workspace, profileId);
    if (binding.profile.resume === "native-and-acp") {
      const mode = await b.client.continueSession(sid, workspace);
      expect(["resume", "load"]).toContain(mode);
      await b.client.prompt(sid, [{ type: "text", text: "turn three" }]);
      const dbCount = binding.artifacts.filter((x) => x.kind === "sqlite").length;
      // Every row written in placement A came back, including those only in the WAL.
      expect(b.updates).toEqual([`profile:${profileId} history=2 rows=${2 * dbCount}`]);
    } else {
      // ACP-only: the agent cannot continue; the harness takes canonical recovery.
      await expect(b.client.continueSession(sid, workspace)).rejects.toBeInstanceOf(AcpResumeError);
    }
    await b.client.dispose();

    // Destroy: both copies gone, nothing left under harness-state.
    await fresh.destroy();
    expect(await exists(binding.ephemeralSessionPath)).toBe(false);
    expect(await exists(binding.sessionRootPath)).toBe(false);
    expect(await filesUnder(join(workspace, ".openma"))).toEqual([]);
  });
});
