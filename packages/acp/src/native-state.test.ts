import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { bindAcpState } from "./binding.ts";
import { AcpNativeState, type AcpStatePort } from "./native-state.ts";
import { nodeStatePort } from "./node.ts";

let dir: string;
afterEach(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

const exists = (p: string) =>
  stat(p).then(
    () => true,
    () => false,
  );

/** A materialized binding of `agentId` in a fresh directory; its first artifact. */
async function bound(agentId: string) {
  dir = await mkdtemp(join(tmpdir(), "openma-acp-ns-"));
  const binding = bindAcpState({
    sessionId: "sesn_n",
    agent: { id: agentId },
    workspaceRoot: join(dir, "ws"),
    ephemeralRoot: join(dir, "tmp"),
  });
  const state = new AcpNativeState(nodeStatePort(), binding);
  await state.materialize();
  return { state, first: binding.artifacts[0] as { path: string; runtimePath: string } };
}

async function hermes() {
  const { state, first } = await bound("hermes");
  return { state, db: first };
}

describe("sqlite artifacts move as one unit", () => {
  it("drops a durable -wal the live database no longer has", async () => {
    const { state, db } = await hermes();
    await writeFile(db.runtimePath, "db-v1");
    await writeFile(`${db.runtimePath}-wal`, "wal-v1");
    await writeFile(`${db.runtimePath}-shm`, "shm-v1");
    await state.capture();
    expect(await readFile(`${db.path}-wal`, "utf8")).toBe("wal-v1");
    // The agent checkpointed and closed: only the base file remains.
    await rm(`${db.runtimePath}-wal`);
    await rm(`${db.runtimePath}-shm`);
    await writeFile(db.runtimePath, "db-v2");
    await state.capture();
    expect(await readFile(db.path, "utf8")).toBe("db-v2");
    expect(await exists(`${db.path}-wal`)).toBe(false);
    expect(await exists(`${db.path}-shm`)).toBe(false);
    expect(await exists(`${db.path}.openma-partial`)).toBe(false);
  });

  it("capturing an absent artifact removes its durable copy (the copy mirrors the agent)", async () => {
    const { state, db } = await hermes();
    await writeFile(db.runtimePath, "db");
    await state.capture();
    await rm(db.runtimePath);
    await state.capture();
    expect(await exists(db.path)).toBe(false);
  });
});

describe("hostile paths stay arguments", () => {
  it("a path with shell metacharacters is copied, not executed", async () => {
    dir = await mkdtemp(join(tmpdir(), "openma-acp-ns-"));
    const ws = join(dir, "w$(touch pwned)`touch pwned2`; rm -rf x");
    const binding = bindAcpState({ sessionId: "sesn_h", agent: { id: "codex" }, workspaceRoot: ws, ephemeralRoot: join(dir, "t") });
    const state = new AcpNativeState(nodeStatePort(), binding);
    await state.materialize();
    await nodeStatePort().exec(["mkdir", "-p", binding.artifacts[0]?.runtimePath as string]);
    await writeFile(`${binding.artifacts[0]?.runtimePath}/rollout.jsonl`, "x");
    await state.capture();
    expect(await readFile(`${binding.artifacts[0]?.path}/rollout.jsonl`, "utf8")).toBe("x");
    expect(await exists(join(process.cwd(), "pwned"))).toBe(false);
    expect(await exists(join(process.cwd(), "pwned2"))).toBe(false);
  });
});

describe("port failures surface", () => {
  it("a failing copy throws with the step named", async () => {
    const { state } = await hermes();
    const failing: AcpStatePort = { writeFile: async () => {}, exec: async () => ({ exitCode: 1, stdout: "", stderr: "disk full" }) };
    await expect(new AcpNativeState(failing, state.binding).capture()).rejects.toThrow(/capture sqlite .*disk full/);
    expect(await new AcpNativeState(failing, state.binding).readCheckpoint()).toBeNull();
  });
});

describe("restore renames (Gemini CLI's minute-stamped chat files)", () => {
  async function gemini() {
    const { state, first } = await bound("gemini");
    return { state, chats: join(first.runtimePath, "workspace", "chats"), tmp: first.runtimePath };
  }

  it("renames a restored chat out of the name Gemini would give it on load, once, and leaves other files alone", async () => {
    const { state, chats, tmp } = await gemini();
    await mkdir(chats, { recursive: true });
    const stamped = "session-2026-12-02T11-45-249d99aa.jsonl";
    await writeFile(join(chats, stamped), '{"sessionId":"249d99aa-1"}\n');
    await writeFile(join(tmp, "workspace", ".project_root"), "/workspace");
    await writeFile(join(chats, "notes.txt"), "not a chat");
    await state.capture();
    await state.release();

    await state.restore();
    expect(await readFile(join(chats, `session-restored-2026-12-02T11-45-249d99aa.jsonl`), "utf8")).toContain("249d99aa-1");
    expect(await exists(join(chats, stamped))).toBe(false);
    expect(await readFile(join(tmp, "workspace", ".project_root"), "utf8")).toBe("/workspace");
    expect(await exists(join(chats, "notes.txt"))).toBe(true);

    // The next placement restores the renamed copy as is (the rule does not match its own output).
    await state.capture();
    await state.release();
    await state.restore();
    expect((await readdir(chats)).sort()).toEqual(["notes.txt", "session-restored-2026-12-02T11-45-249d99aa.jsonl"]);
  });

  it("never overwrites a file already under the new name", async () => {
    const { state, chats } = await gemini();
    await mkdir(chats, { recursive: true });
    await writeFile(join(chats, "session-2026-12-02T11-45-aaaaaaaa.jsonl"), "stamped");
    await writeFile(join(chats, "session-restored-2026-12-02T11-45-aaaaaaaa.jsonl"), "kept");
    await state.capture();
    await state.release();
    await state.restore();
    expect(await readFile(join(chats, "session-restored-2026-12-02T11-45-aaaaaaaa.jsonl"), "utf8")).toBe("kept");
    expect(await readFile(join(chats, "session-2026-12-02T11-45-aaaaaaaa.jsonl"), "utf8")).toBe("stamped");
  });
});
