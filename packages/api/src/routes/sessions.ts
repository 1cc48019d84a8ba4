/**
 * `/v1/sessions`: create, retrieve, update, list, archive, delete, and the
 * `resources` sub-resource (§4). The row's `body` is the full session
 * response; `status` mirrors `body.status`. Retrieve also accepts an
 * environment key or sessions token scoped to the session; everything else
 * takes an API key.
 */
import type { PinnedAcpRelease } from "@openma/acp";
import { brainRunsOnServer, TURN_BEARING_TYPES } from "@openma/execution/placement";
import { EXECUTION_TOPIC, forgetSession, requestTurn } from "@openma/execution/queue";
import { type Database, type IdFactory, type SessionResourceRow, type SessionRow, toIso } from "@openma/storage";
import { recordWebhookEvents } from "@openma/webhooks";
import type { Context } from "hono";
import { Hono } from "hono";
import { type Kysely, sql, type Transaction } from "kysely";
import type { z } from "zod";
import { pinAcpRelease, refuseSessionAcpSelection } from "../acp-harness.ts";
import { assertSessionScope, requireCredential } from "../auth.ts";
import { type ApiDeps, type AppEnv, SESSIONS_CLOSED_TOPIC } from "../context.ts";
import { badRequest, notFound } from "../errors.ts";
import { appendEvents, lockSession, notifyAppended, notifySession } from "../event-log.ts";
import { decodeCursor, encodeCursor, pageOf, pageOnlyQuery, pageQuery } from "../pagination.ts";
import { agentConfigProblem, normalizeModel, normalizeSkills, normalizeTools } from "../schemas/agent.ts";
import { draftFromParam, type EventDraft, type EventParam } from "../schemas/events.ts";
import {
  type AgentRefParam,
  agentSnapshot,
  defaultFileMountPath,
  defaultRepoMountPath,
  memoryMountPath,
  planUpdate,
  type ResourceParam,
  resourceAddSchema,
  resourceUpdateSchema,
  type Session,
  type SessionAgent,
  sessionCreateSchema,
  sessionListQuery,
  sessionUpdateSchema,
} from "../schemas/session.ts";
import { loadActivities, loadActivity, NEVER_RAN, withActivity } from "../session-activity.ts";
import { ensureSessionWork, stopSessionWork } from "../session-work.ts";
import { threadsTerminated } from "../thread-lifecycle.ts";
import { limitBody, MB } from "../uploads.ts";
import { fromJson, nowIso, pathId } from "../util.ts";
import { parseJsonBody, parseQuery } from "../validate.ts";
import { notifyWork } from "../work-queue.ts";
import { loadAgentIn } from "./agents.ts";
import { loadEnvironment } from "./environments.ts";

type Db = Kysely<Database> | Transaction<Database>;

/** Bodies that carry events (session create, events send) may hold base64 media. */
export const EVENTS_BODY_LIMIT = 32 * MB;

export async function loadSessionRow(db: Db, id: string): Promise<SessionRow> {
  const row = await db.selectFrom("sessions").selectAll().where("id", "=", id).executeTakeFirst();
  if (!row) throw notFound("session", id);
  return row;
}

/**
 * The session a caller may read: API key, or an environment key / sessions
 * token scoped to it (the worker's GET, events list/stream/send).
 */
export async function readableSession(c: Context<AppEnv>, id: string): Promise<SessionRow> {
  const credential = requireCredential(c, "api_key", "environment_key", "sessions_token");
  const row = await loadSessionRow(c.get("deps").storage.db, id);
  assertSessionScope(credential, id, row.environment_id);
  return row;
}

/** Wakes the environment's long-polling workers. Like notifySession, a failure must not fail a committed request. */
export async function notifyWorkers(c: Context<AppEnv>, environmentId: string): Promise<void> {
  const deps = c.get("deps");
  await notifyWork(deps, environmentId).catch((err: Error) => {
    deps.logger.warn({ err: err.message, environment_id: environmentId }, "work notification failed");
  });
}

/** Wakes the execution workers of every process after a turn request committed. Best effort, like notifySession. */
export async function notifyExecution(c: Context<AppEnv>): Promise<void> {
  const deps = c.get("deps");
  await deps.storage.bus.publish(EXECUTION_TOPIC).catch((err: Error) => {
    deps.logger.warn({ err: err.message }, "execution notification failed");
  });
}

/** The session's environment type; a removed environment counts as not self-hosted. */
export async function environmentType(db: Db, environmentId: string): Promise<string | undefined> {
  const env = await db.selectFrom("environments").select("config_type").where("id", "=", environmentId).executeTakeFirst();
  return env?.config_type;
}

async function resolveAgent(db: Db, ref: AgentRefParam): Promise<SessionAgent> {
  const id = typeof ref === "string" ? ref : ref.id;
  const latest = await loadAgentIn(db, id);
  if (latest.archived_at) throw badRequest(`agent: agent ${JSON.stringify(id)} is archived`, { error_code: "agent_archived" });
  const version = typeof ref === "string" ? undefined : ref.version;
  const agent = version === undefined || version === latest.version ? latest : await loadAgentIn(db, id, version);
  const snapshot = agentSnapshot(agent);
  if (typeof ref === "string" || ref.type === "agent") return snapshot;
  if (ref.model !== undefined) snapshot.model = normalizeModel(ref.model);
  if (ref.system !== undefined) snapshot.system = ref.system ?? null;
  if (ref.tools !== undefined) snapshot.tools = normalizeTools(ref.tools);
  if (ref.skills !== undefined) snapshot.skills = normalizeSkills(ref.skills);
  if (ref.mcp_servers !== undefined) snapshot.mcp_servers = ref.mcp_servers;
  const problem = agentConfigProblem(snapshot);
  if (problem) throw badRequest(`agent.${problem}`);
  return snapshot;
}

async function usableEnvironment(db: Db, id: string): Promise<{ id: string; config_type: string }> {
  const env = await db.selectFrom("environments").select(["id", "config_type", "archived_at"]).where("id", "=", id).executeTakeFirst();
  if (!env) throw badRequest(`environment_id: environment ${JSON.stringify(id)} was not found`);
  if (env.archived_at) {
    throw badRequest(`environment_id: environment ${JSON.stringify(id)} is archived`, { error_code: "environment_archived" });
  }
  return env;
}

/** Distinct vault ids, each an existing, unarchived vault (400 naming the first that is not). */
async function checkVaults(db: Db, ids: readonly string[]): Promise<string[]> {
  const unique = [...new Set(ids)];
  if (unique.length === 0) return unique;
  const found = await db.selectFrom("vaults").select("id").where("id", "in", unique).where("archived_at", "is", null).execute();
  const known = new Set(found.map((v) => v.id));
  const missing = unique.find((id) => !known.has(id));
  if (missing) throw badRequest(`vault_ids: vault ${JSON.stringify(missing)} was not found`);
  return unique;
}

async function checkFile(db: Db, id: string, field: string): Promise<void> {
  const found = await db.selectFrom("files").select("id").where("id", "=", id).executeTakeFirst();
  if (!found) throw badRequest(`${field}: file ${JSON.stringify(id)} was not found`);
}

/** A `user.define_outcome` with a file rubric must name an existing file. */
export async function checkRubricFiles(
  db: Db,
  events: readonly { type: string; rubric?: { type: string; file_id?: string } }[],
  root: string,
): Promise<void> {
  for (const [i, e] of events.entries()) {
    if (e.rubric?.type === "file" && e.rubric.file_id) await checkFile(db, e.rubric.file_id, `${root}[${i}].rubric.file_id`);
  }
}

/** The stored session with its live activity times (usage.active_seconds, stats). */
async function present(c: Context<AppEnv>, session: Session): Promise<Session> {
  const deps = c.get("deps");
  return withActivity(session, await loadActivity(deps.storage.db, session.id), deps.clock.now());
}

type ResourceInsert = Omit<SessionResourceRow, "session_id">;

/** Validates resource params against the database and builds their rows (body = response shape). */
async function prepareResources(ids: IdFactory, db: Db, params: readonly ResourceParam[], now: string): Promise<ResourceInsert[]> {
  for (const [i, p] of params.entries()) if (p.type === "file") await checkFile(db, p.file_id, `resources[${i}].file_id`);
  const storeIds = params.flatMap((p) => (p.type === "memory_store" ? [p.memory_store_id] : []));
  const stores = storeIds.length
    ? await db.selectFrom("memory_stores").select(["id", "body", "archived_at"]).where("id", "in", storeIds).execute()
    : [];
  const storeById = new Map(stores.map((s) => [s.id, s]));
  const taken = new Set<string>();
  const rows: ResourceInsert[] = [];
  for (const [i, p] of params.entries()) {
    const id = ids("sesrsc");
    const stamp = { created_at: now, updated_at: now };
    if (p.type === "memory_store") {
      const store = storeById.get(p.memory_store_id);
      if (!store || store.archived_at) {
        throw badRequest(`resources[${i}].memory_store_id: memory store ${JSON.stringify(p.memory_store_id)} was not found or is archived`);
      }
      if (rows.some((r) => r.type === "memory_store" && fromJson<{ memory_store_id: string }>(r.body).memory_store_id === store.id)) {
        throw badRequest(`resources[${i}].memory_store_id: memory store ${JSON.stringify(store.id)} is attached twice`);
      }
      const meta = fromJson<{ name?: string; description?: string | null }>(store.body);
      const name = meta.name ?? store.id;
      const mountPath = memoryMountPath(name, taken);
      taken.add(mountPath);
      const body = {
        type: "memory_store",
        memory_store_id: store.id,
        access: p.access ?? "read_write",
        name,
        description: meta.description ?? "",
        instructions: p.instructions ?? null,
        mount_path: mountPath,
      };
      rows.push({ id, type: p.type, body: JSON.stringify(body), secret: null, ...stamp });
      continue;
    }
    const mountPath = p.mount_path ?? (p.type === "file" ? defaultFileMountPath(p.file_id) : defaultRepoMountPath(p.url));
    if (taken.has(mountPath)) throw badRequest(`resources[${i}].mount_path: ${JSON.stringify(mountPath)} is used by another resource`);
    taken.add(mountPath);
    const body =
      p.type === "file"
        ? { type: "file", id, file_id: p.file_id, mount_path: mountPath, ...stamp }
        : { type: "github_repository", id, url: p.url, mount_path: mountPath, checkout: p.checkout ?? null, ...stamp };
    const secret = p.type === "github_repository" ? (p.authorization_token ?? null) : null;
    rows.push({ id, type: p.type, body: JSON.stringify(body), secret, ...stamp });
  }
  return rows;
}

function sessionRowOf(s: Session): Omit<SessionRow, "last_seq"> {
  return {
    id: s.id,
    agent_id: s.agent.id,
    agent_version: s.agent.version,
    environment_id: s.environment_id,
    status: s.status,
    body: JSON.stringify(s),
    created_at: s.created_at,
    updated_at: s.updated_at,
    archived_at: s.archived_at,
  };
}

/** What `POST /v1/sessions` (and a deployment run) creates a session from. */
export type SessionCreateInput = Omit<z.output<typeof sessionCreateSchema>, "initial_events"> & {
  initial_events?: EventParam[] | undefined;
};

/** A validated session, ready to insert. */
export interface PreparedSession {
  session: Session;
  resources: ResourceInsert[];
  drafts: EventDraft[];
  configType: string;
  /** The ACP agent release the session runs (pinned here, once), or null: the default harness. */
  acpRelease: PinnedAcpRelease | null;
}

/**
 * Validates `input` against the database and builds the session. Throws the
 * ApiError a create request answers; writes nothing, so a deployment run can
 * record the failure in the same transaction.
 */
export async function prepareSession(
  deps: ApiDeps,
  db: Db,
  input: SessionCreateInput,
  deploymentId: string | null = null,
): Promise<PreparedSession> {
  refuseSessionAcpSelection(input.metadata, true);
  const agent = await resolveAgent(db, input.agent);
  const env = await usableEnvironment(db, input.environment_id);
  const acpRelease = await pinAcpRelease(
    deps,
    (await loadAgentIn(db, agent.id, agent.version)).metadata,
    (await loadEnvironment(db, env.id)).metadata,
  );
  const vaultIds = await checkVaults(db, input.vault_ids ?? []);
  await checkRubricFiles(db, input.initial_events ?? [], "initial_events");
  const now = toIso(deps.clock.now());
  const resources = await prepareResources(deps.ids, db, input.resources ?? [], now);
  const session: Session = {
    type: "session",
    id: deps.ids("sesn"),
    status: "idle",
    agent,
    environment_id: env.id,
    title: input.title ?? null,
    metadata: input.metadata ?? {},
    resources: resources.map((r) => fromJson<Record<string, unknown>>(r.body)),
    vault_ids: vaultIds,
    budget: input.budget ?? null,
    usage: {},
    stats: {},
    outcome_evaluations: [],
    created_at: now,
    updated_at: now,
    archived_at: null,
    deployment_id: deploymentId,
  };
  const drafts = (input.initial_events ?? []).map((e) => draftFromParam(e, deps.ids));
  return { session, resources, drafts, configType: env.config_type, acpRelease };
}

export interface InsertedSession {
  session: Session;
  body: string;
  /** Initial events were appended (readers need a wake-up). */
  appended: boolean;
  work: { created: boolean } | null;
  turn: boolean;
}

/** Writes a prepared session, its resources and initial events in `trx`; call `announceSession` after commit. */
export async function insertSession(trx: Transaction<Database>, deps: ApiDeps, p: PreparedSession): Promise<InsertedSession> {
  const { session, resources, drafts } = p;
  await trx
    .insertInto("sessions")
    .values({ ...sessionRowOf(session), last_seq: 0, acp_release: p.acpRelease ? JSON.stringify(p.acpRelease) : null })
    .execute();
  if (resources.length)
    await trx
      .insertInto("session_resources")
      .values(resources.map((r) => ({ ...r, session_id: session.id })))
      .execute();
  await recordWebhookEvents(trx, deps, [{ type: "session.created", id: session.id, orderKey: session.id, orderSeq: 0 }]);
  if (drafts.length === 0) return { session, body: JSON.stringify(session), appended: false, work: null, turn: false };
  await appendEvents(deps, session.id, drafts, { trx });
  const work = p.configType === "self_hosted" ? await ensureSessionWork(trx, deps, session.environment_id, session.id) : null;
  const turn = brainRunsOnServer(p.configType, deps.selfHostedBrain) && drafts.some((d) => TURN_BEARING_TYPES.has(d.type));
  if (turn) await requestTurn(trx, session.id, deps.clock.now());
  // Appending may have projected events (outcomes) onto the body: return what is stored.
  return { session, body: (await loadSessionRow(trx, session.id)).body, appended: true, work, turn };
}

/** After commit: wakes the session's readers, the environment's workers and the execution workers. Best effort. */
export async function announceSession(deps: ApiDeps, created: InsertedSession): Promise<void> {
  if (created.appended) await notifyAppended(deps, created.session.id);
  if (created.work?.created) {
    await notifyWork(deps, created.session.environment_id).catch((err: Error) => {
      deps.logger.warn({ err: err.message, environment_id: created.session.environment_id }, "work notification failed");
    });
  }
  if (created.turn) {
    await deps.storage.bus.publish(EXECUTION_TOPIC).catch((err: Error) => {
      deps.logger.warn({ err: err.message }, "execution notification failed");
    });
  }
}

async function createSession(c: Context<AppEnv>): Promise<Session> {
  const input = await parseJsonBody(c, sessionCreateSchema);
  const deps = c.get("deps");
  const prepared = await prepareSession(deps, deps.storage.db, input);
  const created = await deps.storage.db.transaction().execute((trx) => insertSession(trx, deps, prepared));
  await announceSession(deps, created);
  return present(c, fromJson<Session>(created.body));
}

async function updateSession(c: Context<AppEnv>, id: string): Promise<Session> {
  const input = await parseJsonBody(c, sessionUpdateSchema, { allowEmpty: true });
  refuseSessionAcpSelection(input.metadata, false);
  const deps = c.get("deps");
  const { db } = deps.storage;
  const vaultIds = input.vault_ids === undefined ? undefined : await checkVaults(db, input.vault_ids);
  const result = await db.transaction().execute(async (trx) => {
    const current = fromJson<Session>((await lockSession(trx, id)).body);
    if (current.archived_at) throw badRequest(`session ${JSON.stringify(id)} is archived and cannot be updated`);
    const plan = planUpdate(current, input, vaultIds);
    if (!plan.modified) return { session: current, appended: false };
    plan.next.updated_at = nowIso(c);
    await trx
      .updateTable("sessions")
      .set({ body: JSON.stringify(plan.next), updated_at: plan.next.updated_at })
      .where("id", "=", id)
      .execute();
    const changed = Object.keys(plan.changed).length > 0;
    if (changed) await appendEvents(deps, id, [{ type: "session.updated", fields: plan.changed, dedupeKey: null }], { trx });
    return { session: plan.next, appended: changed };
  });
  if (result.appended) await notifyAppended(deps, id);
  return present(c, result.session);
}

/** `GET /v1/sessions`: the filters plus paging. */
export const sessionListPageQuery = sessionListQuery.extend(pageQuery(100));

const LIKE_SPECIAL = /[\\%_]/g;

async function listSessions(c: Context<AppEnv>) {
  const q = parseQuery(c, sessionListPageQuery);
  const cursor = decodeCursor(q.page);
  const at = cursor ? parseSessionKey(cursor.k) : undefined;
  const backwards = cursor?.d === "prev";
  const order = q.order ?? "desc";
  const scan = (order === "asc") !== backwards ? "asc" : "desc";
  let query = c
    .get("deps")
    .storage.db.selectFrom("sessions")
    .select(["id", "created_at", "body"])
    .orderBy("created_at", scan)
    .orderBy("id", scan)
    .limit(q.limit + 1);
  if (at) {
    const cmp = scan === "asc" ? ">" : "<";
    query = query.where((eb) =>
      eb.or([eb("created_at", cmp, at.createdAt), eb.and([eb("created_at", "=", at.createdAt), eb("id", cmp, at.id)])]),
    );
  }
  if (q.agent_id) query = query.where("agent_id", "=", q.agent_id);
  if (q.agent_id && q.agent_version !== undefined) query = query.where("agent_version", "=", q.agent_version);
  if (!q.include_archived) query = query.where("archived_at", "is", null);
  if (q.statuses?.length) query = query.where("status", "in", q.statuses);
  for (const [op, key] of [
    [">", "created_at[gt]"],
    [">=", "created_at[gte]"],
    ["<", "created_at[lt]"],
    ["<=", "created_at[lte]"],
  ] as const) {
    const value = q[key];
    if (value) query = query.where("created_at", op, new Date(value).toISOString());
  }
  if (q.deployment_id) {
    // The body is written by JSON.stringify, so the member appears verbatim (a deployment run sets it).
    const needle = `"deployment_id":${JSON.stringify(q.deployment_id)}`.replace(LIKE_SPECIAL, (ch) => `\\${ch}`);
    query = query.where(sql<boolean>`sessions.body like ${`%${needle}%`} escape '\\'`);
  }
  if (q.memory_store_id) {
    // Resource bodies are written by JSON.stringify, so the member appears verbatim.
    const needle = `"memory_store_id":${JSON.stringify(q.memory_store_id)}`.replace(LIKE_SPECIAL, (ch) => `\\${ch}`);
    query = query.where((eb) =>
      eb.exists(
        eb
          .selectFrom("session_resources")
          .select("session_resources.id")
          .whereRef("session_resources.session_id", "=", "sessions.id")
          .where("session_resources.type", "=", "memory_store")
          .where(sql<boolean>`session_resources.body like ${`%${needle}%`} escape '\\'`),
      ),
    );
  }
  const rows = await query.execute();
  const activities = await loadActivities(
    c.get("deps").storage.db,
    rows.map((r) => r.id),
  );
  const now = c.get("deps").clock.now();
  const page = pageOf(rows, q.limit, sessionKey, (row) => {
    const session = fromJson<Session>(row.body);
    return withActivity(session, activities.get(session.id) ?? NEVER_RAN, now);
  });
  const served = rows.slice(0, q.limit);
  const first = served[0];
  const last = served[served.length - 1];
  if (!backwards) {
    return { ...page, prev_page: cursor && first ? encodeCursor({ k: sessionKey(first), d: "prev" }) : null };
  }
  // Scanned backwards: restore the requested order and swap the roles of the cursors.
  return {
    data: page.data.reverse(),
    next_page: first ? encodeCursor({ k: sessionKey(first), d: "next" }) : null,
    prev_page: rows.length > q.limit && last ? encodeCursor({ k: sessionKey(last), d: "prev" }) : null,
  };
}

function sessionKey(row: { created_at: string; id: string }): string {
  return `${row.created_at}|${row.id}`;
}

function parseSessionKey(k: string): { createdAt: string; id: string } {
  const bar = k.indexOf("|");
  const createdAt = k.slice(0, bar);
  const id = k.slice(bar + 1);
  if (bar < 0 || Number.isNaN(Date.parse(createdAt)) || id === "" || id.length > 256) throw badRequest("page: invalid page cursor");
  return { createdAt, id };
}

async function archiveSession(c: Context<AppEnv>, id: string): Promise<Session> {
  const deps = c.get("deps");
  const result = await deps.storage.db.transaction().execute(async (trx) => {
    const current = fromJson<Session>((await lockSession(trx, id)).body);
    if (current.archived_at) return { session: current, appended: false };
    const now = nowIso(c);
    const archived: Session = { ...current, status: "terminated", archived_at: now, updated_at: now };
    await trx
      .updateTable("sessions")
      .set({ body: JSON.stringify(archived), status: "terminated", archived_at: now, updated_at: now })
      .where("id", "=", id)
      .where("archived_at", "is", null)
      .execute();
    const terminate: EventDraft = { type: "session.status_terminated", fields: {}, dedupeKey: null };
    const appended = current.status !== "terminated";
    // Its live threads end first, then the session (the primary thread) itself.
    if (appended) await appendEvents(deps, id, [...(await threadsTerminated(trx, id)), terminate], { trx });
    // Ordered after the log's last event (its terminated status), like the log's own webhook events.
    const { last_seq } = await lockSession(trx, id);
    await recordWebhookEvents(trx, deps, [{ type: "session.archived", id, orderKey: id, orderSeq: last_seq }]);
    await stopSessionWork(trx, deps, id, { force: false });
    return { session: archived, appended };
  });
  if (result.appended) await notifyAppended(deps, id);
  await notifyWorkers(c, result.session.environment_id);
  await sessionClosed(c, id, "archived");
  return present(c, result.session);
}

/**
 * Tells this process (the `onSessionClosed` hook) and every other process sharing the database (the
 * `SESSIONS_CLOSED_TOPIC` wake-up) that a session is gone. Like the notifications, a failure must not
 * fail a committed request.
 */
async function sessionClosed(c: Context<AppEnv>, sessionId: string, why: "archived" | "deleted"): Promise<void> {
  const deps = c.get("deps");
  await deps.storage.bus.publish(SESSIONS_CLOSED_TOPIC).catch((err: unknown) => {
    deps.logger.warn({ err: err instanceof Error ? err.message : String(err), session_id: sessionId }, "session close notification failed");
  });
  if (!deps.onSessionClosed) return;
  try {
    await deps.onSessionClosed(sessionId, why);
  } catch (err) {
    deps.logger.warn({ err: err instanceof Error ? err.message : String(err), session_id: sessionId }, "session close hook failed");
  }
}

/** Deletes the session and its log; live streams notice the session is gone and send `session.deleted`. */
async function deleteSession(c: Context<AppEnv>, id: string): Promise<void> {
  const deps = c.get("deps");
  const environmentId = await deps.storage.db.transaction().execute(async (trx) => {
    const row = await lockSession(trx, id);
    await stopSessionWork(trx, deps, id, { force: true });
    // A running turn loses its execution lease at its next renewal (its watcher sees the deletion sooner).
    await forgetSession(trx, id);
    await trx.deleteFrom("session_events").where("session_id", "=", id).execute();
    await trx.deleteFrom("session_resources").where("session_id", "=", id).execute();
    await trx.deleteFrom("session_activity").where("session_id", "=", id).execute();
    await trx.deleteFrom("session_compactions").where("session_id", "=", id).execute();
    await trx.deleteFrom("session_threads").where("session_id", "=", id).execute();
    await trx.deleteFrom("sessions").where("id", "=", id).execute();
    await recordWebhookEvents(trx, deps, [{ type: "session.deleted", id, orderKey: id, orderSeq: row.last_seq + 1 }]);
    return row.environment_id;
  });
  await notifySession(deps, id);
  await notifyWorkers(c, environmentId);
  await sessionClosed(c, id, "deleted");
}

export function sessionRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();

  // Initial events may carry base64 images and documents, like a Messages API request.
  r.post("/", limitBody(EVENTS_BODY_LIMIT, "request body"), async (c) => {
    requireCredential(c, "api_key");
    return c.json(await createSession(c));
  });

  r.get("/", async (c) => {
    requireCredential(c, "api_key");
    return c.json(await listSessions(c));
  });

  r.get("/:session_id", async (c) => {
    const row = await readableSession(c, pathId(c, "session_id"));
    return c.json(await present(c, fromJson<Session>(row.body)));
  });

  r.post("/:session_id", limitBody(MB, "request body"), async (c) => {
    requireCredential(c, "api_key");
    return c.json(await updateSession(c, pathId(c, "session_id")));
  });

  r.delete("/:session_id", async (c) => {
    requireCredential(c, "api_key");
    const id = pathId(c, "session_id");
    await deleteSession(c, id);
    return c.json({ id, type: "session_deleted" as const });
  });

  r.post("/:session_id/archive", async (c) => {
    requireCredential(c, "api_key");
    return c.json(await archiveSession(c, pathId(c, "session_id")));
  });

  r.route("/:session_id/resources", resourceRoutes());
  return r;
}

/** Rewrites `body.resources` from the resource rows (call with the session locked). */
async function syncResources(trx: Transaction<Database>, session: SessionRow, now: string): Promise<void> {
  const rows = await trx.selectFrom("session_resources").select("body").where("session_id", "=", session.id).orderBy("id").execute();
  const body = fromJson<Session>(session.body);
  body.resources = rows.map((r) => fromJson<Record<string, unknown>>(r.body));
  body.updated_at = now;
  await trx
    .updateTable("sessions")
    .set({ body: JSON.stringify(body), updated_at: now })
    .where("id", "=", session.id)
    .execute();
}

/** Runs a resource change with the session locked and not archived, then re-syncs `body.resources`. */
async function changeResources<T>(
  c: Context<AppEnv>,
  sessionId: string,
  change: (trx: Transaction<Database>, session: SessionRow, now: string) => Promise<T>,
): Promise<T> {
  return c
    .get("deps")
    .storage.db.transaction()
    .execute(async (trx) => {
      const session = await lockSession(trx, sessionId);
      if (session.archived_at) throw badRequest(`session ${JSON.stringify(sessionId)} is archived and its resources cannot be changed`);
      const now = nowIso(c);
      const result = await change(trx, session, now);
      await syncResources(trx, session, now);
      return result;
    });
}

/** A resource addressable by id (memory store attachments have no public id). */
async function loadResource(db: Db, sessionId: string, resourceId: string) {
  const row = await db
    .selectFrom("session_resources")
    .select(["id", "type", "body"])
    .where("id", "=", resourceId)
    .where("session_id", "=", sessionId)
    .executeTakeFirst();
  if (!row || row.type === "memory_store") throw notFound("session resource", resourceId);
  return row;
}

function resourceRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  r.use("*", async (c, next) => {
    requireCredential(c, "api_key");
    await next();
  });
  r.use("*", limitBody(MB, "request body"));

  r.get("/", async (c) => {
    const sessionId = pathId(c, "session_id");
    const q = parseQuery(c, pageOnlyQuery);
    const { db } = c.get("deps").storage;
    await loadSessionRow(db, sessionId);
    const cursor = decodeCursor(q.page);
    let query = db
      .selectFrom("session_resources")
      .select(["id", "body"])
      .where("session_id", "=", sessionId)
      .orderBy("id")
      .limit(q.limit + 1);
    if (cursor) query = query.where("id", ">", cursor.k);
    const rows = await query.execute();
    return c.json(
      pageOf(
        rows,
        q.limit,
        (row) => row.id,
        (row) => fromJson<Record<string, unknown>>(row.body),
      ),
    );
  });

  r.post("/", async (c) => {
    const sessionId = pathId(c, "session_id");
    const input = await parseJsonBody(c, resourceAddSchema);
    const { db } = c.get("deps").storage;
    await loadSessionRow(db, sessionId);
    const [prepared] = await prepareResources(c.get("deps").ids, db, [input], nowIso(c));
    if (!prepared) throw new Error("unreachable: one resource param yields one row");
    const resource = fromJson<Record<string, unknown>>(prepared.body);
    await changeResources(c, sessionId, async (trx, session) => {
      const attached = fromJson<Session>(session.body).resources;
      if (attached.some((res) => res.mount_path === resource.mount_path)) {
        throw badRequest(`mount_path: ${JSON.stringify(resource.mount_path)} is used by another resource of this session`);
      }
      await trx
        .insertInto("session_resources")
        .values({ ...prepared, session_id: sessionId })
        .execute();
    });
    return c.json(resource);
  });

  r.get("/:resource_id", async (c) => {
    const sessionId = pathId(c, "session_id");
    const { db } = c.get("deps").storage;
    await loadSessionRow(db, sessionId);
    const row = await loadResource(db, sessionId, pathId(c, "resource_id"));
    return c.json(fromJson<Record<string, unknown>>(row.body));
  });

  r.post("/:resource_id", async (c) => {
    const sessionId = pathId(c, "session_id");
    const resourceId = pathId(c, "resource_id");
    const input = await parseJsonBody(c, resourceUpdateSchema);
    const body = await changeResources(c, sessionId, async (trx, _session, now) => {
      const row = await loadResource(trx, sessionId, resourceId);
      if (row.type !== "github_repository") throw badRequest("authorization_token: only github_repository resources have a token");
      const next = JSON.stringify({ ...fromJson<Record<string, unknown>>(row.body), updated_at: now });
      await trx
        .updateTable("session_resources")
        .set({ body: next, secret: input.authorization_token, updated_at: now })
        .where("id", "=", resourceId)
        .execute();
      return next;
    });
    return c.json(fromJson<Record<string, unknown>>(body));
  });

  r.delete("/:resource_id", async (c) => {
    const sessionId = pathId(c, "session_id");
    const resourceId = pathId(c, "resource_id");
    await changeResources(c, sessionId, async (trx) => {
      await loadResource(trx, sessionId, resourceId);
      await trx.deleteFrom("session_resources").where("id", "=", resourceId).execute();
    });
    return c.json({ id: resourceId, type: "session_resource_deleted" as const });
  });

  return r;
}
