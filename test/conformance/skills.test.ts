/** Skills and skill versions through the official SDK (and its worker's extractor), on both backends. */
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Anthropic, { toFile } from "@anthropic-ai/sdk";
import type { BetaManagedAgentsSession } from "@anthropic-ai/sdk/resources/beta/sessions/sessions";
import { setupSkills } from "@anthropic-ai/sdk/tools/agent-toolset/skills";
import { hashSecret } from "@openma/storage";
import { BACKENDS } from "@openma/storage/testing";
import { unzipSync } from "fflate";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

const skillMd = (name: string, description = "Does things") => `---\nname: ${name}\ndescription: ${description}\n---\n# ${name}\n`;

async function errorOf(p: Promise<unknown>): Promise<InstanceType<typeof Anthropic.APIError>> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(Anthropic.APIError);
  return err as InstanceType<typeof Anthropic.APIError>;
}

/** Inserts a session whose agent snapshot lists `skillIds`, and a live work item whose token is returned. */
async function mintSessionsToken(t: TestServer, skillIds: string[]): Promise<{ token: string; workId: string }> {
  const db = t.store.storage.db;
  const now = new Date().toISOString();
  const suffix = randomBytes(6).toString("hex");
  const sessionId = `sesn_skills${suffix}`;
  const token = `sk-ant-req-skills-${suffix}`;
  const workId = `work_skills${suffix}`;
  const agent = { skills: skillIds.map((skill_id) => ({ type: "custom", skill_id, version: "latest" })) };
  await db
    .insertInto("sessions")
    .values({
      id: sessionId,
      agent_id: "agent_x",
      agent_version: 1,
      environment_id: "env_skills",
      status: "idle",
      body: JSON.stringify({ type: "session", id: sessionId, agent, resources: [] }),
      last_seq: 0,
      created_at: now,
      updated_at: now,
      archived_at: null,
    })
    .execute();
  await db
    .insertInto("work_items")
    .values({
      id: workId,
      environment_id: "env_skills",
      session_id: sessionId,
      data: JSON.stringify({ type: "session", id: sessionId }),
      state: "active",
      metadata: "{}",
      created_at: now,
      acknowledged_at: now,
      started_at: now,
      latest_heartbeat_at: null,
      last_heartbeat: null,
      stop_requested_at: null,
      stopped_at: null,
      polled_at: now,
      polled_by: null,
      lease_expires_at: null,
      ttl_seconds: 60,
      token_hash: hashSecret(token),
    })
    .execute();
  return { token, workId };
}

describe.each(BACKENDS)("skills on %s", (dialect) => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer(dialect);
  });
  afterAll(async () => t?.close());

  const createSkill = async (name: string, extra: Record<string, string> = {}, displayName?: string) =>
    t.client.beta.skills.create({
      files: [
        await toFile(Buffer.from(skillMd(name)), `${name}/SKILL.md`),
        ...(await Promise.all(Object.entries(extra).map(([p, text]) => toFile(Buffer.from(text), `${name}/${p}`)))),
      ],
      ...(displayName ? { display_name: displayName } : {}),
    });

  it("creates a skill from relative-path parts and serves a zip wrapped in <name>/", async () => {
    const skill = await createSkill("pdf-tools", { "scripts/run.sh": "#!/bin/sh\necho hi\n" }, "PDF tools");
    expect(skill).toMatchObject({ type: "skill", display_name: "PDF tools", source: { type: "custom" } });
    expect(skill.id).toMatch(/^skill_/);
    expect(await t.client.beta.skills.retrieve(skill.id)).toEqual(skill);

    const latest = await t.client.beta.skills.versions.retrieve("latest", { skill_id: skill.id });
    expect(latest).toEqual({
      type: "skill_version",
      id: skill.latest_version_id,
      skill_id: skill.id,
      name: "pdf-tools",
      description: "Does things",
      created_at: expect.any(String),
    });
    expect(await t.client.beta.skills.versions.retrieve(latest.id, { skill_id: skill.id })).toEqual(latest);

    const res = await t.client.beta.skills.versions.download(latest.id, { skill_id: skill.id });
    expect(res.headers.get("content-type")).toBe("application/zip");
    const files = unzipSync(new Uint8Array(await res.arrayBuffer()));
    expect(Object.keys(files).sort()).toEqual(["pdf-tools/SKILL.md", "pdf-tools/scripts/run.sh"]);
    expect(new TextDecoder().decode(files["pdf-tools/SKILL.md"])).toBe(skillMd("pdf-tools"));
  });

  it("is extracted by the official worker's skill setup into skills/<name>/", async () => {
    const skill = await createSkill("worker-skill", { "ref/notes.md": "notes", "bin/tool": "#!/bin/sh\n" });
    const workdir = await mkdtemp(join(tmpdir(), "openma-skills-"));
    try {
      const session = {
        agent: { skills: [{ type: "custom", skill_id: skill.id, version: "latest" }] },
      } as unknown as BetaManagedAgentsSession;
      const cleanup = await setupSkills({ client: t.client, session, workdir });
      const root = join(workdir, "skills", "worker-skill");
      expect(await readFile(join(root, "SKILL.md"), "utf8")).toBe(skillMd("worker-skill"));
      expect(await readFile(join(root, "ref", "notes.md"), "utf8")).toBe("notes");
      expect((await stat(join(root, "bin", "tool"))).mode & 0o111).not.toBe(0);
      await cleanup();
      await expect(stat(root)).rejects.toThrow();
    } finally {
      await rm(workdir, { recursive: true, force: true });
    }
  });

  it("manages versions: latest alias, immutable name, list, delete", async () => {
    const skill = await createSkill("versioned");
    const v2 = await t.client.beta.skills.versions.create(skill.id, {
      files: [await toFile(Buffer.from(skillMd("versioned", "Second take")), "versioned/SKILL.md")],
    });
    expect(v2).toMatchObject({ type: "skill_version", skill_id: skill.id, name: "versioned", description: "Second take" });
    expect((await t.client.beta.skills.retrieve(skill.id)).latest_version_id).toBe(v2.id);
    expect((await t.client.beta.skills.versions.retrieve("latest", { skill_id: skill.id })).id).toBe(v2.id);

    const renamed = await errorOf(
      t.client.beta.skills.versions.create(skill.id, { files: [await toFile(Buffer.from(skillMd("other-name")), "other-name/SKILL.md")] }),
    );
    expect(renamed.status).toBe(400);
    expect(renamed.message).toContain("versioned");

    const versions = [];
    for await (const v of t.client.beta.skills.versions.list(skill.id, { limit: 1 })) versions.push(v.id);
    expect(versions).toEqual([v2.id, skill.latest_version_id]);

    expect(await t.client.beta.skills.versions.delete("latest", { skill_id: skill.id })).toEqual({
      id: v2.id,
      type: "skill_version_deleted",
    });
    expect((await t.client.beta.skills.retrieve(skill.id)).latest_version_id).toBe(skill.latest_version_id);
    const onlyOne = await errorOf(t.client.beta.skills.versions.delete(skill.latest_version_id!, { skill_id: skill.id }));
    expect(onlyOne.status).toBe(400);
    expect(await errorOf(t.client.beta.skills.versions.retrieve(v2.id, { skill_id: skill.id }))).toBeInstanceOf(Anthropic.NotFoundError);

    expect(await t.client.beta.skills.delete(skill.id)).toEqual({ id: skill.id, type: "skill_deleted" });
    expect(await errorOf(t.client.beta.skills.retrieve(skill.id))).toBeInstanceOf(Anthropic.NotFoundError);
    expect(await errorOf(t.client.beta.skills.versions.retrieve("latest", { skill_id: skill.id }))).toBeInstanceOf(Anthropic.NotFoundError);
    const left = await t.store.storage.db.selectFrom("skill_versions").select("id").where("skill_id", "=", skill.id).execute();
    expect(left).toEqual([]);
  });

  it("lists skills with a source filter and auto-pagination", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push((await createSkill(`listed-${i}`)).id);
    const seen: string[] = [];
    for await (const s of t.client.beta.skills.list({ limit: 2, source: "custom" })) seen.push(s.id);
    for (const id of ids) expect(seen).toContain(id);
    expect(new Set(seen).size).toBe(seen.length);
    const none = [];
    for await (const s of t.client.beta.skills.list({ source: "anthropic" })) none.push(s);
    expect(none).toEqual([]);
  });

  it("refuses hostile paths and malformed skills with 400s, storing nothing", async () => {
    const before = await t.store.storage.db.selectFrom("skills").select("id").execute();
    const hostile = ["../escape/SKILL.md", "/abs/SKILL.md", "dir\\sub/SKILL.md", "dir/./SKILL.md", "dir//SKILL.md", "C:/x/SKILL.md"];
    for (const name of hostile) {
      const err = await errorOf(t.client.beta.skills.create({ files: [await toFile(Buffer.from(skillMd("x")), name)] }));
      expect(err.status, name).toBe(400);
      expect(err.message, name).toContain("files[0]: filename");
    }
    const nul = new FormData();
    nul.append("files[]", new Blob([skillMd("x")]), "dir\u0000/SKILL.md");
    const res = await fetch(`${t.baseURL}/v1/skills`, { method: "POST", headers: { authorization: `Bearer ${t.apiKey}` }, body: nul });
    expect(res.status).toBe(400);
    expect((await res.json()).error.message).toContain("files[0]: filename");

    const cases: Array<[Array<[string, string]>, RegExp]> = [
      [[["s/README.md", "x"]], /SKILL\.md/],
      [[["s/SKILL.md", "no frontmatter"]], /frontmatter/],
      [[["s/SKILL.md", "---\nname: Bad Name\ndescription: d\n---\n"]], /kebab-case/],
      [[["s/SKILL.md", "---\nname: ok\n---\n"]], /description/],
      [
        [
          ["a/SKILL.md", skillMd("ok")],
          ["b/x.md", "x"],
        ],
        /one top-level directory/,
      ],
    ];
    for (const [parts, reason] of cases) {
      const files = await Promise.all(parts.map(([name, text]) => toFile(Buffer.from(text), name)));
      const err = await errorOf(t.client.beta.skills.create({ files }));
      expect(err.status).toBe(400);
      expect(err.message).toMatch(reason);
    }
    expect((await errorOf(t.client.beta.skills.create({ files: [] }))).status).toBe(400);
    const badName = await errorOf(
      t.client.beta.skills.create({ files: [await toFile(Buffer.from(skillMd("dn")), "dn/SKILL.md")], display_name: "two\nlines" }),
    );
    expect(badName.message).toContain("display_name");
    expect(await t.store.storage.db.selectFrom("skills").select("id").execute()).toEqual(before);
  });

  it("lets sessions tokens read only their agent's skills, and environment keys read versions", async () => {
    const mine = await createSkill("token-skill");
    const other = await createSkill("other-skill");
    const { token, workId } = await mintSessionsToken(t, [mine.id]);
    const asToken = t.clientWith(token).beta.skills;
    expect((await asToken.versions.retrieve("latest", { skill_id: mine.id })).name).toBe("token-skill");
    const zip = await asToken.versions.download(mine.latest_version_id!, { skill_id: mine.id });
    expect(Object.keys(unzipSync(new Uint8Array(await zip.arrayBuffer())))).toEqual(["token-skill/SKILL.md"]);
    expect(await errorOf(asToken.versions.retrieve("latest", { skill_id: other.id }))).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect(await errorOf(asToken.versions.download(other.latest_version_id!, { skill_id: other.id }))).toBeInstanceOf(
      Anthropic.PermissionDeniedError,
    );
    expect(await errorOf(asToken.list())).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect(await errorOf(asToken.retrieve(mine.id))).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect(await errorOf(asToken.versions.list(mine.id))).toBeInstanceOf(Anthropic.PermissionDeniedError);

    // A stopped work item's token is dead everywhere.
    await t.store.storage.db.updateTable("work_items").set({ state: "stopped" }).where("id", "=", workId).execute();
    expect(await errorOf(asToken.versions.retrieve("latest", { skill_id: mine.id }))).toBeInstanceOf(Anthropic.AuthenticationError);

    const envKey = `sk-ant-oat01-skills-${dialect}`;
    await t.store.storage.db
      .insertInto("environment_keys")
      .values({ key_hash: hashSecret(envKey), environment_id: "env_skills", created_at: new Date().toISOString(), revoked_at: null })
      .execute();
    const asEnv = t.clientWith(envKey).beta.skills;
    expect((await asEnv.versions.retrieve("latest", { skill_id: other.id })).name).toBe("other-skill");
    expect(await errorOf(asEnv.create({ files: [await toFile(Buffer.from(skillMd("e")), "e/SKILL.md")] }))).toBeInstanceOf(
      Anthropic.PermissionDeniedError,
    );
  });

  it("404s unknown skills and versions", async () => {
    expect(await errorOf(t.client.beta.skills.retrieve("skill_missing"))).toBeInstanceOf(Anthropic.NotFoundError);
    expect(await errorOf(t.client.beta.skills.delete("skill_missing"))).toBeInstanceOf(Anthropic.NotFoundError);
    const skill = await createSkill("known");
    expect(await errorOf(t.client.beta.skills.versions.retrieve("skillver_missing", { skill_id: skill.id }))).toBeInstanceOf(
      Anthropic.NotFoundError,
    );
    expect(await errorOf(t.client.beta.skills.versions.download("skillver_missing", { skill_id: skill.id }))).toBeInstanceOf(
      Anthropic.NotFoundError,
    );
  });
});
