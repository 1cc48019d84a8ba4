/**
 * `/v1/organizations/webhooks`: webhook endpoint management as the SDK's
 * `beta.organization.webhooks` speaks it (behind the `webhooks-2026-10-07`
 * beta header, 404 without it, as documented). The signing secret appears
 * in the create and regenerate responses only. `GET …/{id}/deliveries` is
 * this server's addition: the endpoint's outbox, so dead-lettered deliveries
 * are visible (docs/webhooks.md).
 */
import { KNOWN_EVENT_TYPES, newSigningSecret, targetProblem } from "@openma/webhooks";
import { type Context, Hono } from "hono";
import { z } from "zod";
import { betaGate } from "../beta-gate.ts";
import type { AppEnv } from "../context.ts";
import { badRequest, notFound } from "../errors.ts";
import { fromJson, nowIso, pathId } from "../util.ts";
import { parseJsonBody, parseQuery, queryInt } from "../validate.ts";

export const WEBHOOKS_BETA = "webhooks-2026-10-07";
const MAX_ENDPOINTS = 32;

interface Endpoint {
  id: string;
  created_at: string;
  description: string;
  disabled_reason: string;
  enabled_events: string[];
  name: string;
  state: "enabled" | "disabled";
  updated_at: string;
  url: string;
}

const eventType = z.string().refine((t) => KNOWN_EVENT_TYPES.includes(t), "unknown webhook event type");
const urlParam = z.string().min(1).max(2048);

export const webhookCreateSchema = z.object({
  enabled_events: z.array(eventType).min(1).max(64),
  url: urlParam,
  description: z.string().max(2048).optional(),
  name: z.string().max(256).optional(),
});

export const webhookUpdateSchema = z.object({
  description: z.string().max(2048).optional(),
  enabled_events: z.array(eventType).max(64).optional(),
  name: z.string().max(256).optional(),
  state: z.enum(["enabled", "disabled"]).optional(),
  url: urlParam.optional(),
});

export const webhookListQuery = z.object({
  limit: queryInt(1, 100).optional(),
  after_id: z.string().max(256).optional(),
  before_id: z.string().max(256).optional(),
  order: z.enum(["asc", "desc"]).optional(),
});

export const webhookDeliveriesQuery = z.object({
  state: z.enum(["pending", "delivered", "dead"]).optional(),
  limit: queryInt(1, 1000).optional(),
});

function checkUrl(c: Context<AppEnv>, url: string): void {
  const problem = targetProblem(url, c.get("deps").webhooks?.allowPrivateTargets ?? false);
  if (problem) throw badRequest(problem);
}

async function loadEndpoint(c: Context<AppEnv>, id: string): Promise<Endpoint> {
  const row = await c.get("deps").storage.db.selectFrom("webhook_endpoints").select("body").where("id", "=", id).executeTakeFirst();
  if (!row) throw notFound("webhook endpoint", id);
  return fromJson<Endpoint>(row.body);
}

export function webhookEndpointRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  r.use("*", betaGate(WEBHOOKS_BETA));

  r.post("/", async (c) => {
    const input = await parseJsonBody(c, webhookCreateSchema);
    checkUrl(c, input.url);
    const deps = c.get("deps");
    const now = nowIso(c);
    const endpoint: Endpoint = {
      id: deps.ids("whep"),
      created_at: now,
      description: input.description ?? "",
      disabled_reason: "",
      enabled_events: [...new Set(input.enabled_events)],
      name: input.name ?? "",
      state: "enabled",
      updated_at: now,
      url: input.url,
    };
    const secret = newSigningSecret();
    await deps.storage.db.transaction().execute(async (trx) => {
      const count = await trx
        .selectFrom("webhook_endpoints")
        .select((eb) => eb.fn.countAll<number>().as("n"))
        .executeTakeFirstOrThrow();
      if (Number(count.n) >= MAX_ENDPOINTS) throw badRequest(`at most ${MAX_ENDPOINTS} webhook endpoints`);
      await trx
        .insertInto("webhook_endpoints")
        .values({ id: endpoint.id, body: JSON.stringify(endpoint), secret, state: endpoint.state, created_at: now })
        .execute();
    });
    return c.json({ ...endpoint, signing_secret: secret });
  });

  r.get("/", async (c) => {
    const q = parseQuery(c, webhookListQuery);
    const limit = q.limit ?? 20;
    const desc = (q.order ?? "desc") === "desc";
    let query = c.get("deps").storage.db.selectFrom("webhook_endpoints").select(["id", "body"]);
    // after_id continues in the listing order; before_id pages back towards its start.
    if (q.after_id) query = query.where("id", desc ? "<" : ">", q.after_id);
    if (q.before_id) query = query.where("id", desc ? ">" : "<", q.before_id);
    const backwards = !!q.before_id && !q.after_id;
    const rows = await query
      .orderBy("id", desc !== backwards ? "desc" : "asc")
      .limit(limit + 1)
      .execute();
    const page = rows.slice(0, limit);
    if (backwards) page.reverse();
    const data = page.map((row) => fromJson<Endpoint>(row.body));
    return c.json({ data, has_more: rows.length > limit, first_id: data[0]?.id ?? null, last_id: data[data.length - 1]?.id ?? null });
  });

  r.get("/:endpoint_id", async (c) => c.json(await loadEndpoint(c, pathId(c, "endpoint_id"))));

  r.post("/:endpoint_id", async (c) => {
    const id = pathId(c, "endpoint_id");
    const input = await parseJsonBody(c, webhookUpdateSchema, { allowEmpty: true });
    if (input.url !== undefined) checkUrl(c, input.url);
    const current = await loadEndpoint(c, id);
    const next: Endpoint = { ...current };
    if (input.description !== undefined) next.description = input.description;
    if (input.name !== undefined) next.name = input.name;
    if (input.url !== undefined) next.url = input.url;
    // An empty list leaves the set unchanged, as documented.
    if (input.enabled_events?.length) next.enabled_events = [...new Set(input.enabled_events)];
    if (input.state !== undefined) {
      next.state = input.state;
      next.disabled_reason = "";
    }
    if (JSON.stringify(next) === JSON.stringify(current)) return c.json(current);
    next.updated_at = nowIso(c);
    await c
      .get("deps")
      .storage.db.updateTable("webhook_endpoints")
      .set({ body: JSON.stringify(next), state: next.state })
      .where("id", "=", id)
      .execute();
    return c.json(next);
  });

  r.delete("/:endpoint_id", async (c) => {
    const id = pathId(c, "endpoint_id");
    await c
      .get("deps")
      .storage.db.transaction()
      .execute(async (trx) => {
        const gone = await trx.deleteFrom("webhook_endpoints").where("id", "=", id).executeTakeFirst();
        if (Number(gone.numDeletedRows) !== 1) throw notFound("webhook endpoint", id);
        await trx.deleteFrom("webhook_deliveries").where("endpoint_id", "=", id).execute();
      });
    return c.json({ id, type: "webhook_endpoint_deleted" });
  });

  r.post("/:endpoint_id/regenerate_signing_secret", async (c) => {
    const id = pathId(c, "endpoint_id");
    await loadEndpoint(c, id);
    const secret = newSigningSecret();
    // The old secret stops working at once: attempts read the secret when they sign.
    await c.get("deps").storage.db.updateTable("webhook_endpoints").set({ secret }).where("id", "=", id).execute();
    return c.json({ signing_secret: secret });
  });

  r.get("/:endpoint_id/deliveries", async (c) => {
    const id = pathId(c, "endpoint_id");
    const q = parseQuery(c, webhookDeliveriesQuery);
    await loadEndpoint(c, id);
    let query = c
      .get("deps")
      .storage.db.selectFrom("webhook_deliveries")
      .select(["id", "event_id", "event_type", "state", "attempts", "last_error", "next_attempt_at_ms", "finished_at_ms"])
      .where("endpoint_id", "=", id)
      .orderBy("id", "desc")
      .limit(q.limit ?? 100);
    if (q.state) query = query.where("state", "=", q.state);
    const rows = await query.execute();
    return c.json({
      data: rows.map((d) => ({
        type: "webhook_delivery",
        id: d.id,
        event_id: d.event_id,
        event_type: d.event_type,
        state: d.state,
        attempts: d.attempts,
        last_error: d.last_error,
        next_attempt_at: d.state === "pending" ? new Date(d.next_attempt_at_ms).toISOString() : null,
        finished_at: d.finished_at_ms === null ? null : new Date(d.finished_at_ms).toISOString(),
      })),
    });
  });
  return r;
}
