/**
 * `/v1/deployments` and `/v1/deployment_runs`: a deployment binds a pinned
 * agent version to an environment, initial events and an optional cron
 * schedule; every run — manual (`POST …/run`) or fired by the scheduler
 * (@openma/scheduler, wired by `openma serve`) — is one immutable record of
 * the session it created or of why it could not. A run is written in one
 * transaction with its session and its webhook events; a scheduled run's
 * insert under the unique (deployment_id, scheduled_at) index is the claim
 * that makes each cron occurrence exactly one run across processes.
 */
import type { FireOutcome } from "@openma/scheduler";
import { upcomingOccurrences } from "@openma/scheduler";
import { type Database, type DeploymentRow, toIso } from "@openma/storage";
import { recordWebhookEvents, type WebhookChange } from "@openma/webhooks";
import { type Context, Hono } from "hono";
import type { Kysely, Transaction } from "kysely";
import { requireCredential } from "../auth.ts";
import type { ApiDeps, AppEnv } from "../context.ts";
import { ApiError, badRequest, notFound } from "../errors.ts";
import { decodeCursor, pageOf, pageQuery } from "../pagination.ts";
import {
  type Deployment,
  type DeploymentAgentParam,
  type DeploymentRun,
  deploymentCreateSchema,
  deploymentListFilters,
  deploymentRunListFilters,
  deploymentUpdateSchema,
  echoResource,
  type StoredSchedule,
} from "../schemas/deployment.ts";
import type { ResourceParam } from "../schemas/session.ts";
import { fromJson, pathId } from "../util.ts";
import { applyMetadataPatch, parseJsonBody, parseQuery } from "../validate.ts";
import { loadAgentIn } from "./agents.ts";
import { announceSession, type InsertedSession, insertSession, prepareSession, type SessionCreateInput } from "./sessions.ts";

type Db = Kysely<Database> | Transaction<Database>;

/** Run errors that pause a schedule: firing again cannot succeed until someone fixes the deployment. */
const PAUSING_ERRORS = new Set([
  "agent_archived_error",
  "environment_archived_error",
  "environment_not_found_error",
  "vault_not_found_error",
  "file_not_found_error",
  "memory_store_archived_error",
]);

/** The SDK's run error type for a session create refusal. */
function runErrorType(err: ApiError): string {
  const code = err.details?.error_code;
  if (code === "agent_archived") return "agent_archived_error";
  if (code === "environment_archived") return "environment_archived_error";
  const m = err.message;
  if (m.startsWith("environment_id:")) return "environment_not_found_error";
  if (m.startsWith("vault_ids:")) return "vault_not_found_error";
  if (/^resources\[\d+\]\.file_id:/.test(m) || /rubric\.file_id:/.test(m)) return "file_not_found_error";
  if (/^resources\[\d+\]\.memory_store_id:/.test(m)) return "memory_store_archived_error";
  if (err.status === 404 && m.startsWith("agent")) return "agent_archived_error";
  if (err.status === 429) return "session_rate_limited_error";
  return "session_creation_rejected_error";
}

function sessionInputOf(d: Deployment): SessionCreateInput {
  return {
    agent: { type: "agent", id: d.agent.id, version: d.agent.version },
    environment_id: d.environment_id,
    initial_events: d.initial_events,
    resources: d.resources as ResourceParam[],
    vault_ids: d.vault_ids,
    ...(d.budget ? { budget: d.budget } : {}),
  };
}

/** The document as served: the schedule's upcoming occurrences are computed now (none once archived). */
export function presentDeployment(d: Deployment, nowMs: number) {
  const schedule = d.schedule
    ? {
        ...d.schedule,
        upcoming_runs_at: d.archived_at ? [] : upcomingOccurrences(d.schedule, nowMs, 5).map(toIso),
      }
    : null;
  return { ...d, schedule };
}

async function loadDeploymentRow(db: Db, id: string): Promise<DeploymentRow> {
  const row = await db.selectFrom("deployments").selectAll().where("id", "=", id).executeTakeFirst();
  if (!row) throw notFound("deployment", id);
  return row;
}

/** Pins `ref` to a concrete version of an existing, unarchived agent. */
async function pinAgent(db: Db, ref: DeploymentAgentParam): Promise<Deployment["agent"]> {
  const agentId = typeof ref === "string" ? ref : ref.id;
  const latest = await loadAgentIn(db, agentId).catch((err: unknown) => {
    if (err instanceof ApiError && err.status === 404) throw badRequest(`agent: agent ${JSON.stringify(agentId)} was not found`);
    throw err;
  });
  if (latest.archived_at) throw badRequest(`agent: agent ${JSON.stringify(agentId)} is archived`);
  const version = typeof ref === "string" || ref.version === undefined ? latest.version : ref.version;
  if (version !== latest.version) await loadAgentIn(db, agentId, version);
  return { type: "agent", id: agentId, version };
}

/** What a run would do must be possible now: the same checks as a session create (nothing written). */
async function validateRunnable(deps: ApiDeps, db: Db, d: Deployment): Promise<void> {
  await prepareSession(deps, db, sessionInputOf(d), d.id);
}

function rowOf(d: Deployment, anchorMs: number | null, lastScheduledMs: number | null): DeploymentRow {
  return {
    id: d.id,
    agent_id: d.agent.id,
    status: d.status,
    body: JSON.stringify(d),
    schedule_expression: d.schedule?.expression ?? null,
    schedule_timezone: d.schedule?.timezone ?? null,
    schedule_anchor_ms: anchorMs,
    last_scheduled_ms: lastScheduledMs,
    created_at: d.created_at,
    updated_at: d.updated_at,
    archived_at: d.archived_at,
  };
}

function change(type: string, id: string, orderKey: string, nowMs: number): WebhookChange {
  return { type, id, orderKey, orderSeq: nowMs };
}

export type RunTrigger = { type: "manual" } | { type: "schedule"; scheduledAtMs: number };

export interface RunResult {
  outcome: FireOutcome;
  run: DeploymentRun | null;
}

/**
 * Makes one run of deployment `id`. A scheduled trigger claims its
 * occurrence first (insert under the unique index; a conflict means another
 * process has it: `taken`) and is `skipped` when the deployment stopped being
 * active and scheduled. The session (or the recorded failure), the run, the
 * deployment's schedule state and the webhook events commit together.
 */
export async function runDeployment(deps: ApiDeps, id: string, trigger: RunTrigger): Promise<RunResult> {
  let created: InsertedSession | null = null;
  const result = await deps.storage.db.transaction().execute(async (trx): Promise<RunResult> => {
    created = null;
    const row = await trx.selectFrom("deployments").selectAll().where("id", "=", id).executeTakeFirst();
    if (trigger.type === "schedule" && (!row || row.archived_at || row.status !== "active" || !row.schedule_expression)) {
      return { outcome: "skipped", run: null };
    }
    if (!row) throw notFound("deployment", id);
    if (row.archived_at) throw badRequest(`deployment ${JSON.stringify(id)} is archived and cannot run`);
    const nowMs = deps.clock.now();
    const now = toIso(nowMs);
    const runId = deps.ids("drun");
    const scheduledAt = trigger.type === "schedule" ? toIso(trigger.scheduledAtMs) : null;
    const claim = await trx
      .insertInto("deployment_runs")
      .values({
        id: runId,
        deployment_id: id,
        trigger_type: trigger.type,
        scheduled_at: scheduledAt,
        has_error: 0,
        body: "{}",
        created_at: now,
      })
      .onConflict((oc) => oc.columns(["deployment_id", "scheduled_at"]).doNothing())
      .executeTakeFirst();
    if (Number(claim.numInsertedOrUpdatedRows ?? 0n) !== 1) return { outcome: "taken", run: null };

    const deployment = fromJson<Deployment>(row.body);
    let error: DeploymentRun["error"] = null;
    try {
      const prepared = await prepareSession(deps, trx, sessionInputOf(deployment), id);
      created = await insertSession(trx, deps, prepared);
    } catch (err) {
      if (!(err instanceof ApiError)) throw err;
      error = { type: runErrorType(err), message: err.message };
    }
    const run: DeploymentRun = {
      type: "deployment_run",
      id: runId,
      deployment_id: id,
      agent: deployment.agent,
      session_id: error ? null : ((created as InsertedSession | null)?.session.id ?? null),
      error,
      trigger_context: scheduledAt ? { type: "schedule", scheduled_at: scheduledAt } : { type: "manual" },
      created_at: now,
    };
    await trx
      .updateTable("deployment_runs")
      .set({ body: JSON.stringify(run), has_error: error ? 1 : 0 })
      .where("id", "=", runId)
      .execute();
    const changes = [
      change("deployment_run.started", runId, id, nowMs),
      change(error ? "deployment_run.failed" : "deployment_run.succeeded", runId, id, nowMs),
    ];
    if (trigger.type === "schedule") {
      const next: Deployment = { ...deployment, schedule: { ...(deployment.schedule as StoredSchedule), last_run_at: now } };
      if (error && PAUSING_ERRORS.has(error.type)) {
        next.status = "paused";
        next.paused_reason = { type: "error", error: { type: error.type } };
        next.updated_at = now;
        changes.push(change("deployment.paused", id, id, nowMs));
      }
      await trx
        .updateTable("deployments")
        .set({
          body: JSON.stringify(next),
          status: next.status,
          updated_at: next.updated_at,
          last_scheduled_ms: Math.max(row.last_scheduled_ms ?? 0, trigger.scheduledAtMs),
        })
        .where("id", "=", id)
        .execute();
    }
    await recordWebhookEvents(trx, deps, changes);
    return { outcome: "fired", run };
  });
  const session = created as InsertedSession | null;
  if (session) await announceSession(deps, session);
  return result;
}

async function updateDeployment(
  c: Context<AppEnv>,
  id: string,
  mutate: (
    d: Deployment,
    row: DeploymentRow,
    trx: Transaction<Database>,
  ) => Promise<{ next: Deployment; anchor?: number; events: string[] } | null>,
) {
  const deps = c.get("deps");
  const result = await deps.storage.db.transaction().execute(async (trx) => {
    // A no-op write first takes the row lock, so concurrent changes and fires serialise on it.
    await trx
      .updateTable("deployments")
      .set((eb) => ({ updated_at: eb.ref("updated_at") }))
      .where("id", "=", id)
      .execute();
    const row = await loadDeploymentRow(trx, id);
    const current = fromJson<Deployment>(row.body);
    const planned = await mutate(current, row, trx);
    if (!planned) return current;
    const nowMs = deps.clock.now();
    await trx
      .updateTable("deployments")
      .set(rowOf(planned.next, planned.anchor ?? row.schedule_anchor_ms, row.last_scheduled_ms))
      .where("id", "=", id)
      .execute();
    await recordWebhookEvents(
      trx,
      deps,
      planned.events.map((type) => change(type, id, id, nowMs)),
    );
    return planned.next;
  });
  return c.json(presentDeployment(result, deps.clock.now()));
}

export const deploymentListQuery = deploymentListFilters.extend(pageQuery(100));
export const deploymentRunListQuery = deploymentRunListFilters.extend(pageQuery(100));

export function deploymentRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  r.use("*", async (c, next) => {
    requireCredential(c, "api_key");
    await next();
  });

  r.post("/", async (c) => {
    const input = await parseJsonBody(c, deploymentCreateSchema);
    const deps = c.get("deps");
    const nowMs = deps.clock.now();
    const now = toIso(nowMs);
    const d: Deployment = {
      type: "deployment",
      id: deps.ids("depl"),
      name: input.name,
      description: input.description || null,
      agent: await pinAgent(deps.storage.db, input.agent),
      environment_id: input.environment_id,
      initial_events: input.initial_events,
      metadata: input.metadata ?? {},
      resources: (input.resources ?? []).map(echoResource),
      schedule: input.schedule
        ? { type: "cron", expression: input.schedule.expression.trim(), timezone: input.schedule.timezone, last_run_at: null }
        : null,
      status: "active",
      paused_reason: null,
      vault_ids: [...new Set(input.vault_ids ?? [])],
      budget: input.budget ?? null,
      created_at: now,
      updated_at: now,
      archived_at: null,
    };
    await validateRunnable(deps, deps.storage.db, d);
    await deps.storage.db.transaction().execute(async (trx) => {
      await trx
        .insertInto("deployments")
        .values(rowOf(d, nowMs, null))
        .execute();
      await recordWebhookEvents(trx, deps, [change("deployment.created", d.id, d.id, nowMs)]);
    });
    return c.json(presentDeployment(d, nowMs));
  });

  r.get("/", async (c) => {
    const q = parseQuery(c, deploymentListQuery);
    if (q.include_archived && q.status) throw badRequest("query: status and include_archived cannot be combined");
    const cursor = decodeCursor(q.page);
    let query = c
      .get("deps")
      .storage.db.selectFrom("deployments")
      .select(["id", "body"])
      .orderBy("id", "desc")
      .limit(q.limit + 1);
    if (cursor) query = query.where("id", "<", cursor.k);
    if (!q.include_archived) query = query.where("archived_at", "is", null);
    if (q.status) query = query.where("status", "=", q.status);
    if (q.agent_id) query = query.where("agent_id", "=", q.agent_id);
    if (q["created_at[gte]"]) query = query.where("created_at", ">=", new Date(q["created_at[gte]"]).toISOString());
    if (q["created_at[lte]"]) query = query.where("created_at", "<=", new Date(q["created_at[lte]"]).toISOString());
    const rows = await query.execute();
    const nowMs = c.get("deps").clock.now();
    return c.json(
      pageOf(
        rows,
        q.limit,
        (row) => row.id,
        (row) => presentDeployment(fromJson<Deployment>(row.body), nowMs),
      ),
    );
  });

  r.get("/:deployment_id", async (c) => {
    const row = await loadDeploymentRow(c.get("deps").storage.db, pathId(c, "deployment_id"));
    return c.json(presentDeployment(fromJson<Deployment>(row.body), c.get("deps").clock.now()));
  });

  r.post("/:deployment_id", async (c) => {
    const id = pathId(c, "deployment_id");
    const input = await parseJsonBody(c, deploymentUpdateSchema, { allowEmpty: true });
    const deps = c.get("deps");
    // Reads outside the transaction: the agent pin and the run checks only read other resources.
    const agent = input.agent === undefined ? undefined : await pinAgent(deps.storage.db, input.agent);
    return updateDeployment(c, id, async (current, _row, trx) => {
      if (current.archived_at) throw badRequest(`deployment ${JSON.stringify(id)} is archived and cannot be updated`);
      const next: Deployment = { ...current };
      if (agent) next.agent = agent;
      if (input.name !== undefined) next.name = input.name;
      if (input.description !== undefined) next.description = input.description || null;
      if (input.environment_id !== undefined) next.environment_id = input.environment_id;
      if (input.initial_events !== undefined) next.initial_events = input.initial_events;
      if (input.budget !== undefined) next.budget = input.budget;
      if (input.resources !== undefined) next.resources = (input.resources ?? []).map(echoResource);
      if (input.vault_ids !== undefined) next.vault_ids = [...new Set(input.vault_ids ?? [])];
      next.metadata = applyMetadataPatch(current.metadata, input.metadata);
      let scheduleChanged = false;
      if (input.schedule !== undefined) {
        const s = input.schedule;
        next.schedule = s
          ? { type: "cron", expression: s.expression.trim(), timezone: s.timezone, last_run_at: current.schedule?.last_run_at ?? null }
          : null;
        scheduleChanged =
          current.schedule?.expression !== next.schedule?.expression || current.schedule?.timezone !== next.schedule?.timezone;
      }
      if (JSON.stringify(next) === JSON.stringify(current)) return null;
      await validateRunnable(deps, trx, next);
      const nowMs = deps.clock.now();
      next.updated_at = toIso(nowMs);
      // A new schedule counts from now: no occurrence before the change fires.
      return { next, ...(scheduleChanged ? { anchor: nowMs } : {}), events: ["deployment.updated"] };
    });
  });

  r.post("/:deployment_id/archive", async (c) => {
    const deps = c.get("deps");
    return updateDeployment(c, pathId(c, "deployment_id"), async (current) => {
      if (current.archived_at) return null;
      const now = toIso(deps.clock.now());
      // Archived deployments report `active` with `archived_at` set.
      return {
        next: { ...current, status: "active", paused_reason: null, archived_at: now, updated_at: now },
        events: ["deployment.archived"],
      };
    });
  });

  r.post("/:deployment_id/pause", async (c) => {
    const deps = c.get("deps");
    const id = pathId(c, "deployment_id");
    return updateDeployment(c, id, async (current) => {
      if (current.archived_at) throw badRequest(`deployment ${JSON.stringify(id)} is archived and cannot be paused`);
      if (current.status === "paused") return null;
      const now = toIso(deps.clock.now());
      return { next: { ...current, status: "paused", paused_reason: { type: "manual" }, updated_at: now }, events: ["deployment.paused"] };
    });
  });

  r.post("/:deployment_id/unpause", async (c) => {
    const deps = c.get("deps");
    const id = pathId(c, "deployment_id");
    return updateDeployment(c, id, async (current) => {
      if (current.archived_at) throw badRequest(`deployment ${JSON.stringify(id)} is archived and cannot be unpaused`);
      if (current.status === "active") return null;
      const nowMs = deps.clock.now();
      // Occurrences missed while paused never fire: the schedule counts from the unpause.
      return {
        next: { ...current, status: "active", paused_reason: null, updated_at: toIso(nowMs) },
        anchor: nowMs,
        events: ["deployment.unpaused"],
      };
    });
  });

  r.post("/:deployment_id/run", async (c) => {
    const result = await runDeployment(c.get("deps"), pathId(c, "deployment_id"), { type: "manual" });
    return c.json(result.run);
  });
  return r;
}

export function deploymentRunRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  r.use("*", async (c, next) => {
    requireCredential(c, "api_key");
    await next();
  });

  r.get("/", async (c) => {
    const q = parseQuery(c, deploymentRunListQuery);
    const cursor = decodeCursor(q.page);
    let query = c
      .get("deps")
      .storage.db.selectFrom("deployment_runs")
      .select(["id", "body"])
      .orderBy("id", "desc")
      .limit(q.limit + 1);
    if (cursor) query = query.where("id", "<", cursor.k);
    if (q.deployment_id) query = query.where("deployment_id", "=", q.deployment_id);
    if (q.trigger_type) query = query.where("trigger_type", "=", q.trigger_type);
    if (q.has_error !== undefined) query = query.where("has_error", "=", q.has_error ? 1 : 0);
    for (const [op, key] of [
      [">", "created_at[gt]"],
      [">=", "created_at[gte]"],
      ["<", "created_at[lt]"],
      ["<=", "created_at[lte]"],
    ] as const) {
      const value = q[key];
      if (value) query = query.where("created_at", op, new Date(value).toISOString());
    }
    const rows = await query.execute();
    return c.json(
      pageOf(
        rows,
        q.limit,
        (row) => row.id,
        (row) => fromJson<DeploymentRun>(row.body),
      ),
    );
  });

  r.get("/:deployment_run_id", async (c) => {
    const id = pathId(c, "deployment_run_id");
    const row = await c.get("deps").storage.db.selectFrom("deployment_runs").select("body").where("id", "=", id).executeTakeFirst();
    if (!row) throw notFound("deployment run", id);
    return c.json(fromJson<DeploymentRun>(row.body));
  });
  return r;
}
