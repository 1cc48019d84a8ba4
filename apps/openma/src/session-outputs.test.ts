/**
 * The serve lane's outputs collector against a real outputs directory and
 * real storage (SQLite): regular files become session-scoped file rows with
 * their bytes in blobs; symlinks (to files and to directories), FIFOs and
 * files over the cap are refused and never read; an unchanged file keeps its
 * row, a refused path keeps the row it had, a removed path loses it, and two
 * collections at once write one row per path.
 */
import { execFileSync } from "node:child_process";
import { mkdir, rm, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { silentLogger } from "@openma/api";
import { newId, systemClock } from "@openma/storage";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../../../test/support/server.ts";
import { outputsDirOf, type SessionOutputs, sessionOutputs } from "./session-outputs.ts";

const CAP = 1024;

describe("session outputs collector", () => {
  let t: TestServer;
  let outputs: SessionOutputs;
  let sessionId: string;
  let dir: string;

  beforeAll(async () => {
    t = await startTestServer("sqlite");
    const agent = await t.client.beta.agents.create({ name: "a", model: "claude-test-1" });
    const env = await t.client.beta.environments.create({ name: "e" });
    sessionId = (await t.client.beta.sessions.create({ agent: agent.id, environment_id: env.id })).id;
    outputs = sessionOutputs({
      storage: t.store.storage,
      dataDir: t.store.dataDir,
      ids: newId,
      clock: systemClock,
      logger: silentLogger,
      limits: { maxFileBytes: CAP },
      bufferBytes: 16 * 1024,
    });
    dir = outputsDirOf(t.store.dataDir, sessionId);
  });
  afterAll(async () => t?.close());

  const rows = async () =>
    (await t.store.storage.db.selectFrom("files").selectAll().where("scope", "=", sessionId).orderBy("filename").execute()).map((r) => ({
      id: r.id,
      filename: r.filename,
      blob: r.blob_key,
    }));
  const bytes = async (key: string) => (await t.store.storage.blobs.get(key))?.toString("utf8");

  it("collects nothing for a session that never had an outputs directory", async () => {
    expect(await outputs.collect(sessionId)).toEqual({ recorded: 0, unchanged: 0, removed: 0, refused: [] });
  });

  it("records regular files only and refuses links, FIFOs and files over the cap", async () => {
    await mkdir(join(dir, "sub"), { recursive: true });
    await writeFile(join(dir, "a.txt"), "alpha");
    await writeFile(join(dir, "sub", "b.txt"), "beta");
    await writeFile(join(dir, "big.bin"), Buffer.alloc(CAP + 1));
    await symlink("/etc/passwd", join(dir, "passwd"));
    await symlink("/etc", join(dir, "etc"));
    execFileSync("mkfifo", [join(dir, "pipe")]);

    const report = await outputs.collect(sessionId);
    expect(report.recorded).toBe(2);
    expect(report.refused.map((r) => `${r.code} ${r.path}`).sort()).toEqual([
      "file_too_large big.bin",
      "special_file pipe",
      "symlink etc",
      "symlink passwd",
    ]);
    const [a, b] = await rows();
    expect([a?.filename, b?.filename]).toEqual(["a.txt", "sub/b.txt"]);
    expect(await bytes(a!.blob)).toBe("alpha");
    expect(await bytes(b!.blob)).toBe("beta");
  });

  it("keeps unchanged files' rows, keeps a refused path's row, drops removed paths", async () => {
    const before = await rows();
    const again = await outputs.collect(sessionId);
    expect(again).toMatchObject({ recorded: 0, unchanged: 2, removed: 0 });
    expect(await rows()).toEqual(before);

    // a.txt becomes a link to a host file: refused, and the content collected before stays.
    await rm(join(dir, "a.txt"));
    await symlink("/etc/shadow", join(dir, "a.txt"));
    await rm(join(dir, "sub"), { recursive: true });
    const after = await outputs.collect(sessionId);
    expect(after.removed).toBe(1);
    expect(after.refused.map((r) => r.path)).toContain("a.txt");
    const left = await rows();
    expect(left).toEqual([before[0]]);
    expect(await bytes(left[0]!.blob)).toBe("alpha");
  });

  it("writes one row per path when two collections run at once", async () => {
    await writeFile(join(dir, "c.txt"), "gamma");
    await Promise.all([outputs.collect(sessionId), outputs.collect(sessionId), outputs.collect(sessionId)]);
    expect((await rows()).filter((r) => r.filename === "c.txt")).toHaveLength(1);
  });
});
