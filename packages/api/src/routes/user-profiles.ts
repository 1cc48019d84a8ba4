/**
 * `/v1/user_profiles` (SDK `beta.userProfiles`, beta `user-profiles-2026-08-18`):
 * profiles of the end users an application acts for. Stored and served
 * whole; the enrollment URL and action URLs point at Anthropic's hosted
 * enrollment pages, which a self-hosted server does not have, so those two
 * methods answer the SDK's BadRequestError saying so (docs/api.md).
 */
import { type Context, Hono } from "hono";
import { z } from "zod";
import { betaGate, notHonoured } from "../beta-gate.ts";
import type { AppEnv } from "../context.ts";
import { notFound } from "../errors.ts";
import { decodeCursor, encodeCursor, pageQuery } from "../pagination.ts";
import { fromJson, newIdFor, nowIso, pathId } from "../util.ts";
import { metadataSchema, parseJsonBody, parseQuery } from "../validate.ts";

export const USER_PROFILES_BETA = "user-profiles-2026-08-18";

const details = z.object({
  account_status: z.enum(["active", "suspended", "blocked"]).nullable().optional(),
  country: z.string().max(2).nullable().optional(),
  email_hash: z.string().max(256).nullable().optional(),
  entity_type: z.enum(["individual", "business", "non_profit", "government"]).nullable().optional(),
  name_hash: z.string().max(256).nullable().optional(),
  onboarded_at: z.iso.datetime({ offset: true }).optional(),
  reference_id: z.string().max(256).nullable().optional(),
});

const fields = {
  external_id: z.string().min(1).max(256).nullable().optional(),
  external_user_details: details.optional(),
  external_user_onboarded_at: z.iso.datetime({ offset: true }).optional(),
  metadata: metadataSchema.optional(),
  name: z.string().max(256).nullable().optional(),
};
export const userProfileCreateSchema = z.object({ ...fields, access_type: z.enum(["application", "passthrough"]).optional() });
export const userProfileUpdateSchema = z.object({ ...fields, access_type: z.enum(["application", "passthrough"]).nullable().optional() });
export const userProfileListQuery = z.object({
  ...pageQuery(100),
  order: z.enum(["asc", "desc"]).optional(),
  order_by: z.enum(["created_at", "name"]).optional(),
});

export const actionUrlCreateSchema = z.object({ action: z.object({ type: z.literal("enroll_end_user") }) });

type Details = z.infer<typeof details>;

export interface UserProfile {
  id: string;
  type: "user_profile";
  created_at: string;
  updated_at: string;
  metadata: Record<string, string>;
  name: string | null;
  trust_grants: Record<string, { status: "active" | "pending" | "rejected" }>;
  access_type: "application" | "passthrough";
  external_id: string | null;
  external_user_details: Record<keyof Details, string | null>;
  external_user_onboarded_at: string | null;
}

const EMPTY_DETAILS: UserProfile["external_user_details"] = {
  account_status: null,
  country: null,
  email_hash: null,
  entity_type: null,
  name_hash: null,
  onboarded_at: null,
  reference_id: null,
};

const iso = (v: string) => new Date(v).toISOString();

/** Applies the fields a create or update names; absent fields keep their value. */
function apply(p: UserProfile, input: z.infer<typeof userProfileUpdateSchema>): UserProfile {
  const next = { ...p, external_user_details: { ...p.external_user_details } };
  if (input.access_type) next.access_type = input.access_type;
  if (input.external_id !== undefined) next.external_id = input.external_id;
  if (input.name !== undefined) next.name = input.name;
  if (input.metadata !== undefined) next.metadata = input.metadata;
  if (input.external_user_onboarded_at !== undefined) next.external_user_onboarded_at = iso(input.external_user_onboarded_at);
  for (const [k, v] of Object.entries(input.external_user_details ?? {})) {
    if (v !== undefined) next.external_user_details[k as keyof Details] = k === "onboarded_at" && v ? iso(v) : v;
  }
  return next;
}

async function load(c: Context<AppEnv>, id: string): Promise<UserProfile> {
  const row = await c.get("deps").storage.db.selectFrom("user_profiles").select("body").where("id", "=", id).executeTakeFirst();
  if (!row) throw notFound("user profile", id);
  return fromJson<UserProfile>(row.body);
}

async function save(c: Context<AppEnv>, p: UserProfile): Promise<void> {
  await c
    .get("deps")
    .storage.db.updateTable("user_profiles")
    .set({ body: JSON.stringify(p) })
    .where("id", "=", p.id)
    .execute();
}

/** Sort key of a page: ids are time-ordered, so created_at order is id order; name order breaks ties by id. */
function sortKey(p: UserProfile, by: "created_at" | "name"): string {
  return by === "name" ? `${p.name ?? ""}\u0000${p.id}` : p.id;
}

export function userProfileRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  r.use("*", betaGate(USER_PROFILES_BETA));

  r.post("/", async (c) => {
    const input = await parseJsonBody(c, userProfileCreateSchema, { allowEmpty: true });
    const now = nowIso(c);
    const base: UserProfile = {
      id: newIdFor(c, "uprof"),
      type: "user_profile",
      created_at: now,
      updated_at: now,
      metadata: {},
      name: null,
      trust_grants: {},
      access_type: "application",
      external_id: null,
      external_user_details: { ...EMPTY_DETAILS },
      external_user_onboarded_at: null,
    };
    const profile = apply(base, input);
    await c
      .get("deps")
      .storage.db.insertInto("user_profiles")
      .values({ id: profile.id, body: JSON.stringify(profile), created_at: now, archived_at: null })
      .execute();
    return c.json(profile);
  });

  r.get("/", async (c) => {
    const q = parseQuery(c, userProfileListQuery);
    const by = q.order_by ?? "created_at";
    const desc = (q.order ?? "desc") === "desc";
    const cursor = decodeCursor(q.page);
    // Profiles are few per deployment of this server; the name order is sorted here rather than in dialect-specific SQL.
    const rows = await c.get("deps").storage.db.selectFrom("user_profiles").select("body").execute();
    const sorted = rows
      .map((row) => fromJson<UserProfile>(row.body))
      .map((p) => ({ p, k: sortKey(p, by) }))
      .sort((a, b) => (a.k < b.k ? -1 : a.k > b.k ? 1 : 0));
    if (desc) sorted.reverse();
    const after = cursor ? sorted.filter((e) => (desc ? e.k < cursor.k : e.k > cursor.k)) : sorted;
    const page = after.slice(0, q.limit);
    const last = page[page.length - 1];
    return c.json({ data: page.map((e) => e.p), next_page: after.length > q.limit && last ? encodeCursor({ k: last.k }) : null });
  });

  r.get("/:user_profile_id", async (c) => c.json(await load(c, pathId(c, "user_profile_id"))));

  r.post("/:user_profile_id", async (c) => {
    const input = await parseJsonBody(c, userProfileUpdateSchema, { allowEmpty: true });
    const current = await load(c, pathId(c, "user_profile_id"));
    const next = apply(current, input);
    if (JSON.stringify(next) === JSON.stringify(current)) return c.json(current);
    next.updated_at = nowIso(c);
    await save(c, next);
    return c.json(next);
  });

  r.delete("/:user_profile_id", async (c) => {
    const id = pathId(c, "user_profile_id");
    const res = await c.get("deps").storage.db.deleteFrom("user_profiles").where("id", "=", id).executeTakeFirst();
    if (Number(res.numDeletedRows) !== 1) throw notFound("user profile", id);
    return c.json({ id, type: "user_profile_deleted" as const });
  });

  r.post("/:user_profile_id/enrollment_url", async (c) => {
    await load(c, pathId(c, "user_profile_id"));
    throw notHonoured(
      "enrollment URLs open Anthropic's hosted end-user enrollment page; a self-hosted server has no such page, so it cannot issue one",
    );
  });

  r.post("/:user_profile_id/action_urls", async (c) => {
    await load(c, pathId(c, "user_profile_id"));
    await parseJsonBody(c, actionUrlCreateSchema);
    throw notHonoured(
      "action URLs open Anthropic's hosted end-user pages (enroll_end_user); a self-hosted server has no such pages, so it cannot issue one",
    );
  });
  return r;
}
