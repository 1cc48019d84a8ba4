/**
 * `/v1/skills` and `/v1/skills/{skill_id}/versions` (no anthropic-beta header
 * required). Every version is stored as one zip blob wrapped in a directory
 * named after the skill (see skill-archive.ts). Version retrieve and content
 * download also serve the worker: environment keys, and sessions tokens for
 * the skills listed in their session's agent snapshot (§1.4, §3.7).
 */
import { contentKey, type Database, type SkillRow, type SkillVersionRow, type Storage } from "@openma/storage";
import type { Context } from "hono";
import { Hono } from "hono";
import type { Transaction } from "kysely";
import { requireCredential } from "../auth.ts";
import type { AppEnv } from "../context.ts";
import { badRequest, forbidden, notFound } from "../errors.ts";
import { decodeCursor, pageOf } from "../pagination.ts";
import { SKILL_UPLOAD_LIMIT_BYTES, skillDisplayName, skillListQuery, versionListQuery } from "../schemas/skill.ts";
import { buildSkillBundle, type SkillBundle } from "../skill-archive.ts";
import { sendBlob, transferSettings } from "../transfers.ts";
import { contentDisposition, formFiles, formText, limitBody, putBlob, readMultipart, releaseBlob } from "../uploads.ts";
import { newIdFor, nowIso, pathId } from "../util.ts";
import { parseQuery, parseWith } from "../validate.ts";

export const SKILL_BLOB_NAMESPACE = "skills";

export interface Skill {
  type: "skill";
  id: string;
  display_name: string;
  latest_version_id: string | null;
  source: { type: string };
  created_at: string;
  updated_at: string;
}

export interface SkillVersion {
  type: "skill_version";
  id: string;
  skill_id: string;
  name: string;
  description: string;
  created_at: string;
}

export const renderSkill = (row: SkillRow): Skill => ({
  type: "skill",
  id: row.id,
  display_name: row.display_name,
  latest_version_id: row.latest_version_id,
  source: { type: row.source },
  created_at: row.created_at,
  updated_at: row.updated_at,
});

export const renderSkillVersion = (row: SkillVersionRow): SkillVersion => ({
  type: "skill_version",
  id: row.id,
  skill_id: row.skill_id,
  name: row.name,
  description: row.description,
  created_at: row.created_at,
});

const apiKeyOnly = async (c: Context<AppEnv>, next: () => Promise<void>) => {
  requireCredential(c, "api_key");
  await next();
};

async function loadSkill(c: Context<AppEnv>, id: string): Promise<SkillRow> {
  const row = await c.get("deps").storage.db.selectFrom("skills").selectAll().where("id", "=", id).executeTakeFirst();
  if (!row) throw notFound("skill", id);
  return row;
}

/** `version` is a version id or the alias `latest`. */
async function resolveVersion(c: Context<AppEnv>, skillId: string, version: string): Promise<SkillVersionRow> {
  const skill = await loadSkill(c, skillId);
  const id = version === "latest" ? skill.latest_version_id : version;
  const row = id
    ? await c
        .get("deps")
        .storage.db.selectFrom("skill_versions")
        .selectAll()
        .where("id", "=", id)
        .where("skill_id", "=", skillId)
        .executeTakeFirst()
    : undefined;
  if (!row) throw notFound("skill version", version);
  return row;
}

/**
 * Version retrieve/download: API keys and environment keys reach every skill;
 * a sessions token only the skills of its session's agent snapshot.
 */
async function assertSkillReadable(c: Context<AppEnv>, skillId: string): Promise<void> {
  const credential = requireCredential(c, "api_key", "environment_key", "sessions_token");
  if (credential.kind !== "sessions_token") return;
  const session = await c
    .get("deps")
    .storage.db.selectFrom("sessions")
    .select("body")
    .where("id", "=", credential.sessionId)
    .executeTakeFirst();
  let skills: unknown = [];
  try {
    skills = (JSON.parse(session?.body ?? "{}") as { agent?: { skills?: unknown } }).agent?.skills ?? [];
  } catch {
    skills = [];
  }
  const listed = Array.isArray(skills) && skills.some((s) => (s as { skill_id?: unknown } | null)?.skill_id === skillId);
  if (!listed) throw forbidden("this sessions token is not valid for this skill: it is not in the session's agent");
}

async function readBundle(c: Context<AppEnv>, form: FormData): Promise<SkillBundle> {
  const parts = formFiles(form, "files[]", "files");
  const files = await Promise.all(parts.map(async (f) => ({ path: f.name, data: new Uint8Array(await f.arrayBuffer()) })));
  return buildSkillBundle(files, new Date(c.get("deps").clock.now()));
}

/** Locks the skill row for the rest of the transaction (Postgres; SQLite transactions are serial). */
async function lockSkill(trx: Transaction<Database>, storage: Storage, id: string): Promise<SkillRow> {
  let query = trx.selectFrom("skills").selectAll().where("id", "=", id);
  if (storage.dialect === "postgres") query = query.forUpdate();
  const row = await query.executeTakeFirst();
  if (!row) throw notFound("skill", id);
  return row;
}

/** Re-points `latest_version_id` at the newest remaining version. */
async function refreshLatest(trx: Transaction<Database>, skillId: string, now: string): Promise<SkillRow> {
  const newest = await trx
    .selectFrom("skill_versions")
    .select("id")
    .where("skill_id", "=", skillId)
    .orderBy("id", "desc")
    .limit(1)
    .executeTakeFirst();
  return await trx
    .updateTable("skills")
    .set({ latest_version_id: newest?.id ?? null, updated_at: now })
    .where("id", "=", skillId)
    .returningAll()
    .executeTakeFirstOrThrow();
}

async function releaseSkillBlob(storage: Storage, key: string): Promise<void> {
  await releaseBlob(storage, key, async () => {
    const other = await storage.db.selectFrom("skill_versions").select("id").where("blob_key", "=", key).limit(1).executeTakeFirst();
    return !!other;
  });
}

export function skillRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();

  r.post("/", apiKeyOnly, limitBody(SKILL_UPLOAD_LIMIT_BYTES, "skill upload"), async (c) => {
    const form = await readMultipart(c);
    const displayText = formText(form, "display_name");
    const displayName = displayText === undefined ? undefined : parseWith(skillDisplayName, displayText, "display_name");
    const bundle = await readBundle(c, form);
    const { storage } = c.get("deps");
    const { key } = contentKey(SKILL_BLOB_NAMESPACE, bundle.archive);
    await putBlob(storage, key, bundle.archive);
    const now = nowIso(c);
    const skill: SkillRow = {
      id: newIdFor(c, "skill"),
      display_name: displayName ?? bundle.name,
      source: "custom",
      latest_version_id: newIdFor(c, "skillver"),
      created_at: now,
      updated_at: now,
    };
    const version: SkillVersionRow = {
      id: skill.latest_version_id!,
      skill_id: skill.id,
      name: bundle.name,
      description: bundle.description,
      blob_key: key,
      created_at: now,
    };
    await storage.db.transaction().execute(async (trx) => {
      await trx.insertInto("skills").values(skill).execute();
      await trx.insertInto("skill_versions").values(version).execute();
    });
    await putBlob(storage, key, bundle.archive);
    return c.json(renderSkill(skill));
  });

  r.get("/", apiKeyOnly, async (c) => {
    const q = parseQuery(c, skillListQuery);
    const cursor = decodeCursor(q.page);
    let query = c
      .get("deps")
      .storage.db.selectFrom("skills")
      .selectAll()
      .orderBy("id", "desc")
      .limit(q.limit + 1);
    if (cursor) query = query.where("id", "<", cursor.k);
    if (q.source) query = query.where("source", "=", q.source);
    const rows = await query.execute();
    return c.json(pageOf(rows, q.limit, (row) => row.id, renderSkill));
  });

  r.get("/:skill_id", apiKeyOnly, async (c) => c.json(renderSkill(await loadSkill(c, pathId(c, "skill_id")))));

  r.delete("/:skill_id", apiKeyOnly, async (c) => {
    const id = pathId(c, "skill_id");
    const { storage } = c.get("deps");
    const keys = await storage.db.transaction().execute(async (trx) => {
      await lockSkill(trx, storage, id);
      const versions = await trx.deleteFrom("skill_versions").where("skill_id", "=", id).returning(["blob_key"]).execute();
      await trx.deleteFrom("skills").where("id", "=", id).execute();
      return [...new Set(versions.map((v) => v.blob_key))];
    });
    for (const key of keys) await releaseSkillBlob(storage, key);
    return c.json({ id, type: "skill_deleted" as const });
  });

  versionRoutes(r);
  return r;
}

function versionRoutes(r: Hono<AppEnv>): void {
  r.post("/:skill_id/versions", apiKeyOnly, limitBody(SKILL_UPLOAD_LIMIT_BYTES, "skill upload"), async (c) => {
    const skillId = pathId(c, "skill_id");
    await loadSkill(c, skillId);
    const bundle = await readBundle(c, await readMultipart(c));
    const { storage } = c.get("deps");
    const { key } = contentKey(SKILL_BLOB_NAMESPACE, bundle.archive);
    await putBlob(storage, key, bundle.archive);
    const version = await storage.db.transaction().execute(async (trx) => {
      const skill = await lockSkill(trx, storage, skillId);
      const current = skill.latest_version_id
        ? await trx.selectFrom("skill_versions").select("name").where("id", "=", skill.latest_version_id).executeTakeFirst()
        : undefined;
      // The name is the skill's immutable slug (and its directory in the archive).
      if (current && current.name !== bundle.name) {
        throw badRequest(`SKILL.md: frontmatter name must stay ${JSON.stringify(current.name)} for this skill`);
      }
      const now = nowIso(c);
      const row: SkillVersionRow = {
        id: newIdFor(c, "skillver"),
        skill_id: skillId,
        name: bundle.name,
        description: bundle.description,
        blob_key: key,
        created_at: now,
      };
      await trx.insertInto("skill_versions").values(row).execute();
      await refreshLatest(trx, skillId, now);
      return row;
    });
    await putBlob(storage, key, bundle.archive);
    return c.json(renderSkillVersion(version));
  });

  r.get("/:skill_id/versions", apiKeyOnly, async (c) => {
    const skillId = pathId(c, "skill_id");
    const q = parseQuery(c, versionListQuery);
    await loadSkill(c, skillId);
    const cursor = decodeCursor(q.page);
    let query = c
      .get("deps")
      .storage.db.selectFrom("skill_versions")
      .selectAll()
      .where("skill_id", "=", skillId)
      .orderBy("id", "desc")
      .limit(q.limit + 1);
    if (cursor) query = query.where("id", "<", cursor.k);
    const rows = await query.execute();
    return c.json(pageOf(rows, q.limit, (row) => row.id, renderSkillVersion));
  });

  r.get("/:skill_id/versions/:version", async (c) => {
    const skillId = pathId(c, "skill_id");
    await assertSkillReadable(c, skillId);
    return c.json(renderSkillVersion(await resolveVersion(c, skillId, pathId(c, "version"))));
  });

  r.get("/:skill_id/versions/:version/content", async (c) => {
    const skillId = pathId(c, "skill_id");
    await assertSkillReadable(c, skillId);
    const version = await resolveVersion(c, skillId, pathId(c, "version"));
    return sendBlob(
      c,
      version.blob_key,
      {
        contentType: "application/zip",
        headers: { "content-disposition": contentDisposition(`${version.name}.zip`) },
        onMissing: () => notFound("skill version content", version.id),
      },
      transferSettings(c),
    );
  });

  r.delete("/:skill_id/versions/:version", apiKeyOnly, async (c) => {
    const skillId = pathId(c, "skill_id");
    const requested = pathId(c, "version");
    const { storage } = c.get("deps");
    const deleted = await storage.db.transaction().execute(async (trx) => {
      const skill = await lockSkill(trx, storage, skillId);
      const id = requested === "latest" ? skill.latest_version_id : requested;
      const row = id
        ? await trx.selectFrom("skill_versions").selectAll().where("id", "=", id).where("skill_id", "=", skillId).executeTakeFirst()
        : undefined;
      if (!row) throw notFound("skill version", requested);
      const others = await trx
        .selectFrom("skill_versions")
        .select("id")
        .where("skill_id", "=", skillId)
        .where("id", "!=", row.id)
        .limit(1)
        .executeTakeFirst();
      // A skill always has a version (latest_version_id is never null): delete the skill instead.
      if (!others) throw badRequest("this is the skill's only version; delete the skill instead");
      await trx.deleteFrom("skill_versions").where("id", "=", row.id).execute();
      await refreshLatest(trx, skillId, nowIso(c));
      return row;
    });
    await releaseSkillBlob(storage, deleted.blob_key);
    return c.json({ id: deleted.id, type: "skill_version_deleted" as const });
  });
}
