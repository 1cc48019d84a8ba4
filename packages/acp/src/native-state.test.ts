import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
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

async function hermes() {
  dir = await mkdtemp(join(tmpdir(), "openma-acp-ns-"));
  const binding = bindAcpState({
    sessionId: "sesn_n",
    agent: { id: "hermes" },
    workspaceRoot: join(dir, "ws"),
    ephemeralRoot: join(dir, "tmp"),
  });
  const state = new AcpNativeState(nodeStatePort(), binding);
  await state.materialize();
  return { state, db: binding.artifacts[0] as { path: string; runtimePath: string } };
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
