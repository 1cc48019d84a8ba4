/** `/v1/agents`: create, retrieve (optionally a version), update with version bump, list, archive, versions. */

import type { Database } from "@openma/storage";
import { recordObjectEvent } from "@openma/webhooks";
import type { Context } from "hono";
import { Hono } from "hono";
import type { Kysely, Transaction } from "kysely";
import { z } from "zod";
import { checkAcpSelection } from "../acp-harness.ts";
import { requireCredential } from "../auth.ts";
import type { AppEnv } from "../context.ts";
import { ApiError, badRequest, notFound } from "../errors.ts";
import { decodeCursor, documentQuery, listDocuments, pageOf, pageOnlyQuery } from "../pagination.ts";
import {
  type AgentConfig,
  agentConfigProblem,
  agentCreateSchema,
  agentUpdateSchema,
  normalizeModel,
  normalizeSkills,
  normalizeTools,
} from "../schemas/agent.ts";
import { type Multiagent, type MultiagentParam, MultiagentProblem, resolveMultiagent } from "../schemas/multiagent.ts";
import { fromJson, newIdFor, nowIso, pathId } from "../util.ts";
import { applyMetadataPatch, parseJsonBody, parseQuery, queryInt } from "../validate.ts";

export interface Agent extends AgentConfig {
  type: "agent";
  id: string;
  version: number;
  metadata: Record<string, string>;
  created_at: string;
  updated_at: string;
  archived_at: string | null;
}

export async function loadAgent(c: Context<AppEnv>, id: string, version?: number): Promise<Agent> {
  return loadAgentIn(c.get("deps").storage.db, id, version);
}

/** The agent (or one of its versions) read through `db`, a transaction or not. */
export async function loadAgentIn(db: Kysely<Database> | Transaction<Database>, id: string, version?: number): Promise<Agent> {
  const row = await db.selectFrom("agents").selectAll().where("id", "=", id).executeTakeFirst();
  if (!row) throw notFound("agent", id);
  if (version === undefined || version === row.version) return fromJson<Agent>(row.body);
  const old = await db
    .selectFrom("agent_versions")
    .select("body")
    .where("agent_id", "=", id)
    .where("version", "=", version)
    .executeTakeFirst();
  if (!old) throw notFound("agent version", `${id}@${version}`);
  return fromJson<Agent>(old.body);
}

/**
 * The stored form of a `multiagent` request, its roster read through `db`
 * (the write's transaction, so a roster agent cannot change between the
 * check and the write). `self` names the agent at the version being written.
 */
async function resolveRoster(
  db: Kysely<Database> | Transaction<Database>,
  param: MultiagentParam,
  stored: Multiagent | null,
  self: { id: string; version: number },
): Promise<Multiagent> {
  const find = async (id: string, version: number | undefined) => {
    const agent = await loadAgentIn(db, id, version).catch((err: unknown) => {
      if (err instanceof ApiError && err.status === 404) return null;
      throw err;
    });
    return agent && { id: agent.id, version: agent.version, archived: agent.archived_at !== null, multiagent: agent.multiagent };
  };
  try {
    return await resolveMultiagent(param, stored, { find, self: { type: "agent", id: self.id, version: self.version } });
  } catch (err) {
    if (err instanceof MultiagentProblem) throw badRequest(err.message);
    throw err;
  }
}

function checkConfig(config: Pick<AgentConfig, "tools" | "mcp_servers">): void {
  const problem = agentConfigProblem(config);
  if (problem) throw badRequest(problem);
}

/** `GET /v1/agents/{id}`: an optional pinned version. */
export const agentVersionQuery = z.object({ version: queryInt(1, 2 ** 31 - 1).optional() });

export function agentRoutes(): Hono<AppEnv> {
  const r = new Hono<AppEnv>();
  r.use("*", async (c, next) => {
    requireCredential(c, "api_key");
    await next();
  });

  r.post("/", async (c) => {
    const input = await parseJsonBody(c, agentCreateSchema);
    const now = nowIso(c);
    const agent: Agent = {
      type: "agent",
      id: newIdFor(c, "agent"),
      version: 1,
      name: input.name,
      description: input.description ?? null,
      system: input.system ?? null,
      model: normalizeModel(input.model),
      tools: normalizeTools(input.tools ?? []),
      skills: normalizeSkills(input.skills ?? []),
      mcp_servers: input.mcp_servers ?? [],
      metadata: input.metadata ?? {},
      multiagent: null,
      execution_identity: input.execution_identity ?? { type: "service_account" },
      created_at: now,
      updated_at: now,
      archived_at: null,
    };
    checkConfig(agent);
    checkAcpSelection(c.get("deps"), agent.metadata, "metadata");
    await c
      .get("deps")
      .storage.db.transaction()
      .execute(async (trx) => {
        if (input.multiagent) agent.multiagent = await resolveRoster(trx, input.multiagent, null, agent);
        const body = JSON.stringify(agent);
        await trx
          .insertInto("agents")
          .values({ id: agent.id, version: 1, name: agent.name, body, created_at: now, updated_at: now, archived_at: null })
          .execute();
        await trx.insertInto("agent_versions").values({ agent_id: agent.id, version: 1, body, created_at: now }).execute();
        await recordObjectEvent(trx, c.get("deps"), "agent.created", agent.id);
      });
    return c.json(agent);
  });

  r.get("/", async (c) => {
    const q = parseQuery(c, documentQuery);
    return c.json(await listDocuments<Agent>(c.get("deps").storage.db, "agents", q));
  });

  r.get("/:agent_id", async (c) => {
    const q = parseQuery(c, agentVersionQuery);
    return c.json(await loadAgent(c, pathId(c, "agent_id"), q.version));
  });

  r.post("/:agent_id", async (c) => {
    const id = pathId(c, "agent_id");
    const input = await parseJsonBody(c, agentUpdateSchema, { allowEmpty: true });
    const { db } = c.get("deps").storage;
    const result = await db.transaction().execute(async (trx) => {
      const row = await trx.selectFrom("agents").selectAll().where("id", "=", id).executeTakeFirst();
      if (!row) throw notFound("agent", id);
      const current = fromJson<Agent>(row.body);
      if (current.archived_at) throw badRequest("agent is archived and cannot be updated");
      if (input.version !== undefined && input.version !== current.version) {
        throw new ApiError(409, "conflict_error", `agent version is ${current.version}, not ${input.version}`, undefined, undefined, {
          "x-should-retry": "false",
        });
      }
      const next: Agent = { ...current };
      if (input.name !== undefined) next.name = input.name;
      if (input.model !== undefined) next.model = normalizeModel(input.model);
      if (input.system !== undefined) next.system = input.system;
      if (input.description !== undefined) next.description = input.description;
      if (input.tools !== undefined) next.tools = normalizeTools(input.tools ?? []);
      if (input.skills !== undefined) next.skills = normalizeSkills(input.skills ?? []);
      if (input.mcp_servers !== undefined) next.mcp_servers = input.mcp_servers ?? [];
      if (input.multiagent !== undefined)
        next.multiagent =
          input.multiagent && (await resolveRoster(trx, input.multiagent, current.multiagent, { id, version: current.version + 1 }));
      if (input.execution_identity !== undefined) next.execution_identity = input.execution_identity ?? { type: "service_account" };
      next.metadata = applyMetadataPatch(current.metadata, input.metadata);
      checkConfig(next);
      checkAcpSelection(c.get("deps"), next.metadata, "metadata");
      const strip = (a: Agent) => JSON.stringify({ ...a, version: 0, updated_at: "" });
      if (strip(next) === strip(current)) return current; // no modification, no new version
      next.version = current.version + 1;
      next.updated_at = nowIso(c);
      const body = JSON.stringify(next);
      // Conditional on the version we read: a concurrent update cannot be lost.
      const updated = await trx
        .updateTable("agents")
        .set({ version: next.version, name: next.name, body, updated_at: next.updated_at })
        .where("id", "=", id)
        .where("version", "=", current.version)
        .executeTakeFirst();
      if (Number(updated.numUpdatedRows) !== 1) throw new ApiError(409, "conflict_error", "agent was modified concurrently; retry");
      await trx.insertInto("agent_versions").values({ agent_id: id, version: next.version, body, created_at: next.updated_at }).execute();
      await recordObjectEvent(trx, c.get("deps"), "agent.updated", id);
      return next;
    });
    return c.json(result);
  });

  r.post("/:agent_id/archive", async (c) => {
    const id = pathId(c, "agent_id");
    const agent = await loadAgent(c, id);
    if (agent.archived_at) return c.json(agent);
    const archived: Agent = { ...agent, archived_at: nowIso(c), updated_at: nowIso(c) };
    const body = JSON.stringify(archived);
    const { db } = c.get("deps").storage;
    await db.transaction().execute(async (trx) => {
      await trx
        .updateTable("agents")
        .set({ body, archived_at: archived.archived_at, updated_at: archived.updated_at })
        .where("id", "=", id)
        .execute();
      await trx.updateTable("agent_versions").set({ body }).where("agent_id", "=", id).where("version", "=", archived.version).execute();
      await recordObjectEvent(trx, c.get("deps"), "agent.archived", id);
    });
    return c.json(archived);
  });

  r.get("/:agent_id/versions", async (c) => {
    const id = pathId(c, "agent_id");
    const q = parseQuery(c, pageOnlyQuery);
    await loadAgent(c, id);
    const cursor = decodeCursor(q.page);
    // Versions are int4 on Postgres: keep the bound inside that range.
    const after = cursor ? Number(cursor.k) : 2 ** 31 - 1;
    if (!Number.isInteger(after) || after < 1 || after > 2 ** 31 - 1) throw badRequest("page: invalid page cursor");
    const rows = await c
      .get("deps")
      .storage.db.selectFrom("agent_versions")
      .select(["version", "body"])
      .where("agent_id", "=", id)
      .where("version", "<", after)
      .orderBy("version", "desc")
      .limit(q.limit + 1)
      .execute();
    return c.json(
      pageOf(
        rows,
        q.limit,
        (row) => String(row.version),
        (row) => fromJson<Agent>(row.body),
      ),
    );
  });

  return r;
}
