/**
 * `/v1/dreams` (SDK `beta.dreams`, beta `dreaming-2026-04-21`): create a
 * dream, read it, list, cancel and archive. Creating one writes the dream
 * and its execution-queue request in one transaction; the job runs in
 * whichever server process claims it (dream-job.ts, ADR 0021).
 */
import { EXECUTION_TOPIC, requestTurn } from "@openma/execution/queue";
import { type Context, Hono } from "hono";
import { sql } from "kysely";
import { z } from "zod";
import { requireCredential } from "../auth.ts";
import { betaGate } from "../beta-gate.ts";
import type { AppEnv } from "../context.ts";
import { changeDream, type Dream, FINAL_STATUSES, loadDream, ZERO_USAGE } from "../dreams.ts";
import { badRequest, notFound, permanentConflict } from "../errors.ts";
import { lockStoreForWrite } from "../memory-access.ts";
import { listDocuments, pageQuery } from "../pagination.ts";
import { newIdFor, nowIso, pathId } from "../util.ts";
import { parseJsonBody, parseQuery, queryArray, queryBool } from "../validate.ts";

export const DREAMS_BETA = "dreaming-2026-04-21";

const statusEnum = z.enum(["pending", "running", "completed", "failed", "canceled"]);

export const dreamCreateSchema = z.object({
  inputs: z
    .array(
      z.discriminatedUnion("type", [
        z.object({ type: z.literal("memory_store"), memory_store_id: z.string().min(1).max(256) }),
        z.object({
          type: z.literal("sessions"),
          session_ids: z
            .array(z.string().min(1).max(256))
            .min(1)
            .max(100)
            .refine((ids) => new Set(ids).size === ids.length, "session_ids must not repeat an id"),
        }),
      ]),
    )
    .refine(
      (inputs) => inputs.filter((i) => i.type === "memory_store").length === 1 && inputs.filter((i) => i.type === "sessions").length === 1,
      "inputs must hold exactly one memory_store entry and exactly one sessions entry",
    ),
  model: z.union([
    z.string().min(1).max(256),
    z.object({ id: z.string().min(1).max(256), speed: z.enum(["standard", "fast"]).nullable().optional() }),
  ]),
  instructions: z.string().min(1).max(4096).nullable().optional(),
  output_behavior: z
    .discriminatedUnion("type", [
      z.object({ type: z.literal("create_new") }),
      z.object({ type: z.literal("update_existing"), memory_store_id: z.string().min(1).max(256) }),
    ])
    .optional(),
});

export const dreamListQuery = z.object({
  ...pageQuery(100),
  include_archived: queryBool.optional(),
  "created_at[gt]": z.iso.datetime({ offset: true }).optional(),
  "created_at[lt]": z.iso.datetime({ offset: true }).optional(),
  statuses: queryArray(statusEnum).optional(),
});

async function createDream(c: Context<AppEnv>): Promise<Dream> {
  const credential = requireCredential(c, "api_key");
  const input = await parseJsonBody(c, dreamCreateSchema);
  const model = typeof input.model === "string" ? { id: input.model, speed: null } : input.model;
  if (model.speed === "fast") throw badRequest("model.speed: dreams accept only `standard`");
  const storeId = input.inputs.flatMap((i) => (i.type === "memory_store" ? [i.memory_store_id] : []))[0] as string;
  const sessionIds = input.inputs.flatMap((i) => (i.type === "sessions" ? i.session_ids : [])).sort();
  const behavior = input.output_behavior ?? { type: "create_new" as const };
  if (behavior.type === "update_existing" && behavior.memory_store_id !== storeId) {
    throw badRequest("output_behavior.memory_store_id: must be the memory store in the memory_store entry of inputs");
  }
  const deps = c.get("deps");
  const now = nowIso(c);
  const dream: Dream = {
    id: newIdFor(c, "drm"),
    type: "dream",
    archived_at: null,
    created_at: now,
    ended_at: null,
    error: null,
    inputs: [
      { type: "memory_store", memory_store_id: storeId },
      { type: "sessions", session_ids: sessionIds },
    ],
    instructions: input.instructions ?? null,
    model: { id: model.id, speed: "standard" },
    output_behavior: behavior,
    outputs: [],
    session_id: null,
    status: "pending",
    usage: { ...ZERO_USAGE },
  };
  await deps.storage.db.transaction().execute(async (trx) => {
    // The store row lock also serialises concurrent update_existing creates on one store (the 409 below).
    const store = await lockStoreForWrite(trx, deps.storage, storeId).catch((err: unknown) => {
      throw err instanceof Error && /archived/.test(err.message) ? badRequest(`inputs: memory store ${storeId} is archived`) : err;
    });
    const found = await trx.selectFrom("sessions").select("id").where("id", "in", sessionIds).execute();
    const missing = sessionIds.find((id) => !found.some((f) => f.id === id));
    if (missing) throw notFound("session", missing);
    if (behavior.type === "update_existing") {
      const holder = await trx
        .selectFrom("dreams")
        .select("id")
        .where("output_store_id", "=", store.id)
        .where("status", "in", ["pending", "running"])
        .executeTakeFirst();
      if (holder)
        throw permanentConflict(`memory store ${store.id} is being written by dream ${holder.id}; wait for it to end or cancel it`);
    }
    await trx
      .insertInto("dreams")
      .values({
        id: dream.id,
        body: JSON.stringify(dream),
        status: dream.status,
        output_store_id: behavior.type === "update_existing" ? store.id : null,
        owner_key_id: credential.keyId,
        created_at: now,
        archived_at: null,
      })
      .execute();
    await requestTurn(trx, dream.id, deps.clock.now());
  });
  await deps.storage.bus.publish(EXECUTION_TOPIC).catch((err: Error) => {
    deps.logger.warn({ err: err.message, dream_id: dream.id }, "execution wake-up failed; workers find the dream on their next poll");
  });
  return dream;
}

async function listDreams(c: Context<AppEnv>) {
  const q = parseQuery(c, dreamListQuery);
  const where = [];
  if (q["created_at[gt]"]) where.push(sql<boolean>`created_at > ${new Date(q["created_at[gt]"]).toISOString()}`);
  if (q["created_at[lt]"]) where.push(sql<boolean>`created_at < ${new Date(q["created_at[lt]"]).toISOString()}`);
  if (q.statuses?.length) where.push(sql<boolean>`status in (${sql.join(q.statuses)})`);
  return listDocuments<Dream>(c.get("deps").storage.db, "dreams", {
    limit: q.limit,
    page: q.page,
    include_archived: q.include_archived,
    where,
  });
}

export function dreamRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  r.use("*", betaGate(DREAMS_BETA));

  r.post("/", async (c) => c.json(await createDream(c)));
  r.get("/", async (c) => c.json(await listDreams(c)));
  r.get("/:dream_id", async (c) => c.json(await loadDream(c.get("deps").storage.db, pathId(c, "dream_id"))));

  r.post("/:dream_id/cancel", async (c) => {
    const now = nowIso(c);
    const { before, after } = await changeDream(c.get("deps").storage, pathId(c, "dream_id"), (d) => {
      if (d.status === "canceled") return null;
      if (FINAL_STATUSES.has(d.status)) throw badRequest(`dream is ${d.status}; only a pending or running dream can be canceled`);
      return { ...d, status: "canceled" as const, ended_at: now };
    });
    return c.json(after ?? before);
  });

  r.post("/:dream_id/archive", async (c) => {
    const now = nowIso(c);
    const { before, after } = await changeDream(c.get("deps").storage, pathId(c, "dream_id"), (d) => {
      if (d.archived_at) return null;
      if (!FINAL_STATUSES.has(d.status)) throw badRequest(`dream is ${d.status}; cancel it before archiving`);
      return { ...d, archived_at: now };
    });
    return c.json(after ?? before);
  });
  return r;
}
