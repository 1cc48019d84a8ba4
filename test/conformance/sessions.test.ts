/** Sessions and session resources through the official SDK, on both storage backends. */
import Anthropic, { toFile } from "@anthropic-ai/sdk";
import { BetaEnvironmentArchivedError } from "@anthropic-ai/sdk/resources/beta/environments/index";
import type { BetaManagedAgentsSession } from "@anthropic-ai/sdk/resources/beta/sessions/sessions";
import { newId } from "@openma/storage";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

type Env = { id: string; environment_key?: string };

/** A session without its clock-driven fields (active and elapsed time move between two reads of a live session). */
function timeless(s: BetaManagedAgentsSession) {
  const { active_seconds: _active, ...usage } = s.usage;
  return { ...s, usage, stats: {} };
}

describe.each(BACKENDS)("sessions on %s", (dialect) => {
  let t: TestServer;
  let agentId: string;
  let cloudEnv: string;
  let selfHosted: Env;

  beforeAll(async () => {
    t = await startTestServer(dialect);
    const agent = await t.client.beta.agents.create({ name: "coder", model: "claude-sonnet-4-5", system: "v1" });
    await t.client.beta.agents.update(agent.id, { version: 1, system: "v2" });
    agentId = agent.id;
    cloudEnv = (await t.client.beta.environments.create({ name: "cloud" })).id;
    selfHosted = (await t.client.beta.environments.create({ name: "hosted", config: { type: "self_hosted" } })) as unknown as Env;
  });
  afterAll(async () => t?.close());

  const errorOf = (p: Promise<unknown>) =>
    p.then(
      () => {
        throw new Error("expected the request to fail");
      },
      (err: unknown) => err as InstanceType<typeof Anthropic.APIError>,
    );

  /** Memory stores are another resource's API; the row is all a session needs to attach one. */
  async function memoryStore(name: string, opts: { archived?: boolean } = {}): Promise<string> {
    const id = newId("memstore");
    const now = new Date().toISOString();
    const body = {
      type: "memory_store",
      id,
      name,
      description: `about ${name}`,
      metadata: {},
      created_at: now,
      updated_at: now,
      archived_at: null,
    };
    await t.store.storage.db
      .insertInto("memory_stores")
      .values({ id, body: JSON.stringify(body), created_at: now, updated_at: now, archived_at: opts.archived ? now : null })
      .execute();
    return id;
  }

  async function liveWorkItems(sessionId: string): Promise<number> {
    const rows = await t.store.storage.db
      .selectFrom("work_items")
      .select("id")
      .where("session_id", "=", sessionId)
      .where("state", "!=", "stopped")
      .execute();
    return rows.length;
  }

  it("creates from an agent id (latest), a pinned version and overrides, and retrieves", async () => {
    const sessions = t.client.beta.sessions;
    const latest = await sessions.create({ agent: agentId, environment_id: cloudEnv, title: "first", metadata: { team: "a" } });
    expect(latest).toMatchObject({
      type: "session",
      status: "idle",
      environment_id: cloudEnv,
      title: "first",
      metadata: { team: "a" },
      resources: [],
      vault_ids: [],
      budget: null,
      usage: {},
      stats: {},
      outcome_evaluations: [],
      archived_at: null,
      agent: {
        type: "agent",
        id: agentId,
        version: 2,
        system: "v2",
        skills: [],
        tools: [],
        mcp_servers: [],
        model: { id: "claude-sonnet-4-5" },
      },
    });
    expect(latest.id).toMatch(/^sesn_/);
    expect(latest.agent).not.toHaveProperty("metadata");
    expect(timeless(await sessions.retrieve(latest.id))).toEqual(timeless(latest));

    const pinned = await sessions.create({ agent: { type: "agent", id: agentId, version: 1 }, environment_id: cloudEnv });
    expect(pinned.agent).toMatchObject({ version: 1, system: "v1" });

    const overridden = await sessions.create({
      agent: {
        type: "agent_with_overrides",
        id: agentId,
        model: { id: "claude-haiku-4-5", effort: "low" },
        system: "override",
        tools: [{ type: "agent_toolset_20260401" }],
        skills: [{ type: "anthropic", skill_id: "pdf" }],
        mcp_servers: [{ type: "url", name: "docs", url: "https://mcp.example.test/mcp" }],
      },
      environment_id: cloudEnv,
      budget: { type: "limit", max_list_cost: { amount: "2500", currency: "USD" } },
    });
    expect(overridden.agent).toMatchObject({
      id: agentId,
      version: 2,
      system: "override",
      model: { id: "claude-haiku-4-5", effort: { type: "low" } },
      tools: [{ type: "agent_toolset_20260401", default_config: { enabled: true, permission_policy: { type: "always_allow" } } }],
      skills: [{ type: "anthropic", skill_id: "pdf", version: "latest" }],
      mcp_servers: [{ type: "url", name: "docs", url: "https://mcp.example.test/mcp" }],
    });
    expect(overridden.budget).toEqual({ type: "limit", max_list_cost: { amount: "2500", currency: "USD" } });
  });

  it("rejects bad input with 400 naming the field, unknown ids with 404", async () => {
    const sessions = t.client.beta.sessions;
    const missingEnv = await errorOf(sessions.create({ agent: agentId, environment_id: "env_missing" }));
    expect(missingEnv).toBeInstanceOf(Anthropic.BadRequestError);
    expect(missingEnv.message).toContain("environment_id");

    const archivedEnv = await t.client.beta.environments.create({ name: "old" });
    await t.client.beta.environments.archive(archivedEnv.id);
    expect(await errorOf(sessions.create({ agent: agentId, environment_id: archivedEnv.id }))).toBeInstanceOf(BetaEnvironmentArchivedError);

    expect(await errorOf(sessions.create({ agent: "agent_missing", environment_id: cloudEnv }))).toBeInstanceOf(Anthropic.NotFoundError);
    expect(await errorOf(sessions.create({ agent: { type: "agent", id: agentId, version: 9 }, environment_id: cloudEnv }))).toBeInstanceOf(
      Anthropic.NotFoundError,
    );
    const noEnv = await errorOf(sessions.create({ agent: agentId } as never));
    expect(noEnv.message).toContain("body.environment_id");
    const tooMany = await errorOf(
      sessions.create({
        agent: agentId,
        environment_id: cloudEnv,
        initial_events: Array.from({ length: 51 }, () => ({
          type: "user.message" as const,
          content: [{ type: "text" as const, text: "x" }],
        })),
      }),
    );
    expect(tooMany.message).toContain("body.initial_events");
    const badTool = await errorOf(
      sessions.create({
        agent: { type: "agent_with_overrides", id: agentId, tools: [{ type: "mcp_toolset", mcp_server_name: "nowhere" }] },
        environment_id: cloudEnv,
      }),
    );
    expect(badTool).toBeInstanceOf(Anthropic.BadRequestError);
    expect(badTool.message).toContain("agent.tools");
    const badMount = await errorOf(
      sessions.create({
        agent: agentId,
        environment_id: cloudEnv,
        resources: [{ type: "github_repository", url: "https://github.com/o/r", mount_path: "/a/../etc" }],
      }),
    );
    expect(badMount.message).toContain("body.resources[0].mount_path");
    const badFile = await errorOf(
      sessions.create({ agent: agentId, environment_id: cloudEnv, resources: [{ type: "file", file_id: "file_missing" }] }),
    );
    expect(badFile.message).toContain("resources[0].file_id");
    const badVault = await errorOf(sessions.create({ agent: agentId, environment_id: cloudEnv, vault_ids: ["vlt_missing"] }));
    expect(badVault.message).toContain("vault_ids");
    const badBudget = await errorOf(
      sessions.create({
        agent: agentId,
        environment_id: cloudEnv,
        budget: { type: "limit", max_list_cost: { amount: "1.5", currency: "USD" } },
      }),
    );
    expect(badBudget.message).toContain("body.budget.max_list_cost.amount");
    expect(await errorOf(sessions.retrieve("sesn_missing"))).toBeInstanceOf(Anthropic.NotFoundError);
    expect(await errorOf(sessions.update("sesn_missing", { title: "x" }))).toBeInstanceOf(Anthropic.NotFoundError);
    expect(await errorOf(sessions.archive("sesn_missing"))).toBeInstanceOf(Anthropic.NotFoundError);
    expect(await errorOf(sessions.delete("sesn_missing"))).toBeInstanceOf(Anthropic.NotFoundError);
  });

  it("writes nothing for a rejected create", async () => {
    const { db } = t.store.storage;
    const count = async () => (await db.selectFrom("sessions").select("id").execute()).length;
    const before = await count();
    const rejected = await errorOf(
      t.client.beta.sessions.create({
        agent: agentId,
        environment_id: selfHosted.id,
        initial_events: [
          { type: "user.message", content: [{ type: "text", text: "hi" }] },
          { type: "user.define_outcome", description: "d", rubric: { type: "file", file_id: "file_missing" } },
        ],
      }),
    );
    expect(rejected.message).toContain("initial_events[1].rubric.file_id");
    expect(await count()).toBe(before);
  });

  it("appends initial events in order and opens an outcome evaluation per define_outcome", async () => {
    const session = await t.client.beta.sessions.create({
      agent: agentId,
      environment_id: cloudEnv,
      initial_events: [
        { type: "user.message", content: [{ type: "text", text: "hello" }] },
        { type: "user.define_outcome", description: "a report", rubric: { type: "text", content: "is complete" } },
      ],
    });
    const events = [];
    for await (const e of t.client.beta.sessions.events.list(session.id)) events.push(e);
    expect(events.map((e) => e.type)).toEqual(["user.message", "user.define_outcome"]);
    const outcome = events[1] as { outcome_id: string; max_iterations: number };
    expect(outcome.outcome_id).toMatch(/^outc_/);
    expect(outcome.max_iterations).toBe(3);
    expect(session.outcome_evaluations).toEqual([
      {
        type: "outcome_evaluation",
        outcome_id: outcome.outcome_id,
        description: "a report",
        iteration: 0,
        result: "pending",
        explanation: null,
        completed_at: null,
      },
    ]);
    expect(await liveWorkItems(session.id)).toBe(0); // a cloud session never enqueues self-hosted work
  });

  it("attaches github, file and memory store resources and manages them through the sub-resource", async () => {
    const file = await t.client.beta.files.upload({ file: await toFile(Buffer.from("data"), "notes.txt") });
    const prefs = await memoryStore("User Preferences");
    const twin = await memoryStore("user preferences");
    const session = await t.client.beta.sessions.create({
      agent: agentId,
      environment_id: cloudEnv,
      resources: [
        {
          type: "github_repository",
          url: "https://github.com/acme/widgets.git",
          authorization_token: "ghp_secret",
          checkout: { type: "branch", name: "main" },
        },
        { type: "file", file_id: file.id },
        { type: "memory_store", memory_store_id: prefs, instructions: "keep it short" },
        { type: "memory_store", memory_store_id: twin, access: "read_only" },
      ],
    });
    const [repo, mounted, store, readOnly] = session.resources as unknown as Array<Record<string, unknown>>;
    expect(repo).toMatchObject({ type: "github_repository", url: "https://github.com/acme/widgets.git", mount_path: "/workspace/widgets" });
    expect(repo?.checkout).toEqual({ type: "branch", name: "main" });
    expect(JSON.stringify(session)).not.toContain("ghp_secret");
    expect(mounted).toMatchObject({ type: "file", file_id: file.id, mount_path: `/mnt/session/uploads/${file.id}` });
    expect(store).toEqual({
      type: "memory_store",
      memory_store_id: prefs,
      access: "read_write",
      name: "User Preferences",
      description: "about User Preferences",
      instructions: "keep it short",
      mount_path: "/mnt/memory/user-preferences",
    });
    expect(readOnly).toMatchObject({ access: "read_only", mount_path: "/mnt/memory/user-preferences-2" });
    expect(readOnly).not.toHaveProperty("id");

    const resources = t.client.beta.sessions.resources;
    const listed = [];
    for await (const r of resources.list(session.id, { limit: 1 })) listed.push(r);
    expect(listed).toEqual(session.resources);

    const repoId = String(repo?.id);
    expect(await resources.retrieve(repoId, { session_id: session.id })).toEqual(repo);
    const rotated = await resources.update(repoId, { session_id: session.id, authorization_token: "ghp_rotated" });
    expect(JSON.stringify(rotated)).not.toContain("ghp_rotated");
    const stored = await t.store.storage.db
      .selectFrom("session_resources")
      .select("secret")
      .where("id", "=", repoId)
      .executeTakeFirstOrThrow();
    expect(stored.secret).toBe("ghp_rotated");
    const fileUpdate = await errorOf(resources.update(String(mounted?.id), { session_id: session.id, authorization_token: "x" }));
    expect(fileUpdate).toBeInstanceOf(Anthropic.BadRequestError);

    const other = await t.client.beta.files.upload({ file: await toFile(Buffer.from("more"), "more.txt") });
    const added = await resources.add(session.id, { type: "file", file_id: other.id, mount_path: "/data/more.txt" });
    expect(added).toMatchObject({ type: "file", file_id: other.id, mount_path: "/data/more.txt" });
    const clash = await errorOf(resources.add(session.id, { type: "file", file_id: other.id, mount_path: "/data/more.txt" }));
    expect(clash.message).toContain("mount_path");
    expect((await t.client.beta.sessions.retrieve(session.id)).resources).toContainEqual(added);

    expect(await resources.delete(added.id, { session_id: session.id })).toEqual({ id: added.id, type: "session_resource_deleted" });
    expect(await errorOf(resources.retrieve(added.id, { session_id: session.id }))).toBeInstanceOf(Anthropic.NotFoundError);
    expect((await t.client.beta.sessions.retrieve(session.id)).resources).toHaveLength(4);
    expect(await errorOf(resources.list("sesn_missing"))).toBeInstanceOf(Anthropic.NotFoundError);

    const archivedStore = await memoryStore("gone", { archived: true });
    const refused = await errorOf(
      t.client.beta.sessions.create({
        agent: agentId,
        environment_id: cloudEnv,
        resources: [{ type: "memory_store", memory_store_id: archivedStore }],
      }),
    );
    expect(refused.message).toContain("resources[0].memory_store_id");
  });

  it("updates title, metadata, budget, vaults and tools, appending session.updated with the changed fields only", async () => {
    const vault = await t.client.beta.vaults.create({ display_name: "keys" });
    const session = await t.client.beta.sessions.create({
      agent: agentId,
      environment_id: cloudEnv,
      metadata: { keep: "1", drop: "2" },
      budget: { type: "limit", max_list_cost: { amount: "100", currency: "USD" } },
    });
    const sessions = t.client.beta.sessions;
    const same = await sessions.update(session.id, { title: null, metadata: { keep: "1" } });
    expect(timeless(same)).toEqual(timeless(session));

    const updated = await sessions.update(session.id, {
      title: "renamed",
      metadata: { drop: null, added: "3" },
      budget: { type: "limit", max_list_cost: { amount: "200", currency: "USD" } },
      vault_ids: [vault.id],
      agent: { tools: [{ type: "custom", name: "lookup", description: "look up", input_schema: { type: "object" } }] },
    });
    expect(updated).toMatchObject({
      title: "renamed",
      metadata: { keep: "1", added: "3" },
      budget: { max_list_cost: { amount: "200" } },
      vault_ids: [vault.id],
      agent: { tools: [{ type: "custom", name: "lookup" }] },
    });
    expect(timeless(await sessions.retrieve(session.id))).toEqual(timeless(updated));

    const cleared = await sessions.update(session.id, { budget: null });
    expect(cleared.budget).toBeNull();
    const readd = await errorOf(
      sessions.update(session.id, { budget: { type: "limit", max_list_cost: { amount: "1", currency: "USD" } } }),
    );
    expect(readd).toBeInstanceOf(Anthropic.BadRequestError);
    expect(readd.errorCode).toBe("budget_create_only");

    const events = [];
    for await (const e of sessions.events.list(session.id)) events.push(e as unknown as Record<string, unknown>);
    expect(events.map((e) => e.type)).toEqual(["session.updated", "session.updated"]);
    expect(Object.keys(events[0] ?? {}).sort()).toEqual(["agent", "budget", "id", "metadata", "processed_at", "title", "type"]);
    expect(events[0]).toMatchObject({ title: "renamed", metadata: { keep: "1", added: "3" }, agent: updated.agent });
    expect(events[1]).toMatchObject({ budget: null });
    expect(events[1]).not.toHaveProperty("title");

    const badVault = await errorOf(sessions.update(session.id, { vault_ids: ["vlt_missing"] }));
    expect(badVault.message).toContain("vault_ids");
    const badTools = await errorOf(sessions.update(session.id, { agent: { tools: [{ type: "mcp_toolset", mcp_server_name: "x" }] } }));
    expect(badTools.message).toContain("agent.tools");
  });

  it("lists newest first with filters, bidirectional cursors and auto-pagination", async () => {
    const other = await t.client.beta.agents.create({ name: "lister", model: "claude-haiku-4-5" });
    const store = await memoryStore("shared notes");
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const resources = i === 2 ? [{ type: "memory_store" as const, memory_store_id: store }] : [];
      ids.push((await t.client.beta.sessions.create({ agent: other.id, environment_id: cloudEnv, resources })).id);
    }
    const sessions = t.client.beta.sessions;
    const all: BetaManagedAgentsSession[] = [];
    for await (const s of sessions.list({ agent_id: other.id, limit: 2 })) all.push(s);
    expect(all.map((s) => s.id)).toEqual([...ids].reverse());
    const asc = [];
    for await (const s of sessions.list({ agent_id: other.id, order: "asc", limit: 2 })) asc.push(s.id);
    expect(asc).toEqual(ids);

    const first = await sessions.list({ agent_id: other.id, limit: 2 });
    expect(first.prev_page).toBeNull();
    const second = await first.getNextPage();
    expect(second.data.map((s) => s.id)).toEqual([ids[2], ids[1]]);
    expect(second.prev_page).toBeTruthy();
    const back = await sessions.list({ agent_id: other.id, limit: 2, page: second.prev_page ?? "" });
    expect(back.data.map((s) => s.id)).toEqual(first.data.map((s) => s.id));
    expect(back.prev_page).toBeNull();

    const byStore = await sessions.list({ memory_store_id: store });
    expect(byStore.data.map((s) => s.id)).toEqual([ids[2]]);
    expect((await sessions.list({ agent_id: other.id, agent_version: 2 })).data).toEqual([]);
    expect((await sessions.list({ agent_id: other.id, agent_version: 1, limit: 10 })).data).toHaveLength(5);
    expect((await sessions.list({ agent_id: other.id, statuses: ["running", "terminated"] })).data).toEqual([]);
    expect((await sessions.list({ agent_id: other.id, statuses: ["idle"], limit: 10 })).data).toHaveLength(5);
    expect((await sessions.list({ deployment_id: "depl_x" })).data).toEqual([]);

    const pivot = all[2] as BetaManagedAgentsSession;
    const after = await sessions.list({ agent_id: other.id, "created_at[gt]": pivot.created_at, limit: 10 });
    expect(after.data.every((s) => s.created_at > pivot.created_at)).toBe(true);
    const upTo = await sessions.list({ agent_id: other.id, "created_at[lte]": pivot.created_at, limit: 10 });
    expect(upTo.data.map((s) => s.id)).toContain(pivot.id);
    expect(after.data.length + upTo.data.length).toBe(5);

    await sessions.archive(ids[0] as string);
    const visible = await sessions.list({ agent_id: other.id, limit: 10 });
    expect(visible.data.map((s) => s.id)).not.toContain(ids[0]);
    const withArchived = await sessions.list({ agent_id: other.id, include_archived: true, limit: 10 });
    expect(withArchived.data.map((s) => s.id)).toContain(ids[0]);

    const badOrder = await errorOf(sessions.list({ order: "sideways" as "asc" }));
    expect(badOrder.message).toContain("query.order");
    const badStatus = await errorOf(sessions.list({ statuses: ["sleeping" as "idle"] }));
    expect(badStatus.message).toContain("query.statuses");
    expect(await errorOf(sessions.list({ page: "not-a-cursor" }))).toBeInstanceOf(Anthropic.BadRequestError);
  });

  it("archives (reported terminated, one status_terminated event) and deletes (log and resources removed)", async () => {
    const sessions = t.client.beta.sessions;
    const session = await sessions.create({ agent: agentId, environment_id: cloudEnv });
    const archived = await sessions.archive(session.id);
    expect(archived.status).toBe("terminated");
    expect(archived.archived_at).not.toBeNull();
    expect(await sessions.archive(session.id)).toEqual(archived);
    const events = [];
    for await (const e of sessions.events.list(session.id)) events.push(e.type);
    expect(events).toEqual(["session.status_terminated"]);
    const refused = await errorOf(sessions.update(session.id, { title: "late" }));
    expect(refused).toBeInstanceOf(Anthropic.BadRequestError);

    const doomed = await sessions.create({
      agent: agentId,
      environment_id: cloudEnv,
      resources: [{ type: "github_repository", url: "https://github.com/o/r" }],
      initial_events: [{ type: "user.message", content: [{ type: "text", text: "hi" }] }],
    });
    expect(await sessions.delete(doomed.id)).toEqual({ id: doomed.id, type: "session_deleted" });
    expect(await errorOf(sessions.retrieve(doomed.id))).toBeInstanceOf(Anthropic.NotFoundError);
    expect(await errorOf(sessions.events.list(doomed.id))).toBeInstanceOf(Anthropic.NotFoundError);
    const { db } = t.store.storage;
    expect(await db.selectFrom("session_events").select("id").where("session_id", "=", doomed.id).execute()).toEqual([]);
    expect(await db.selectFrom("session_resources").select("id").where("session_id", "=", doomed.id).execute()).toEqual([]);
  });

  it("enqueues self-hosted work for initial user events and for a user.message when none is live; archive and delete stop it", async () => {
    const sessions = t.client.beta.sessions;
    const quiet = await sessions.create({ agent: agentId, environment_id: selfHosted.id });
    expect(await liveWorkItems(quiet.id)).toBe(0);
    await sessions.events.send(quiet.id, { events: [{ type: "user.interrupt" }] });
    expect(await liveWorkItems(quiet.id)).toBe(0);
    await sessions.events.send(quiet.id, { events: [{ type: "user.message", content: [{ type: "text", text: "go" }] }] });
    expect(await liveWorkItems(quiet.id)).toBe(1);
    await sessions.events.send(quiet.id, { events: [{ type: "user.message", content: [{ type: "text", text: "again" }] }] });
    expect(await liveWorkItems(quiet.id)).toBe(1);

    const busy = await sessions.create({
      agent: agentId,
      environment_id: selfHosted.id,
      initial_events: [{ type: "user.message", content: [{ type: "text", text: "start" }] }],
    });
    expect(await liveWorkItems(busy.id)).toBe(1);
    await sessions.archive(busy.id);
    expect(await liveWorkItems(busy.id)).toBe(0);
    await sessions.delete(quiet.id);
    expect(await liveWorkItems(quiet.id)).toBe(0);
  });

  it("lets an environment key and a sessions token read only their own sessions, and nothing else", async () => {
    const envKey = selfHosted.environment_key ?? "";
    expect(envKey).toMatch(/^sk-ant-oat01-/);
    const mine = await t.client.beta.sessions.create({
      agent: agentId,
      environment_id: selfHosted.id,
      initial_events: [{ type: "user.message", content: [{ type: "text", text: "work" }] }],
    });
    const foreign = await t.client.beta.sessions.create({ agent: agentId, environment_id: cloudEnv });
    const worker = t.clientWith(envKey);
    expect((await worker.beta.sessions.retrieve(mine.id)).id).toBe(mine.id);
    expect(await errorOf(worker.beta.sessions.retrieve(foreign.id))).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect(await errorOf(worker.beta.sessions.list())).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect(await errorOf(worker.beta.sessions.create({ agent: agentId, environment_id: selfHosted.id }))).toBeInstanceOf(
      Anthropic.PermissionDeniedError,
    );
    expect(await errorOf(worker.beta.sessions.resources.list(mine.id))).toBeInstanceOf(Anthropic.PermissionDeniedError);

    let work = await worker.beta.environments.work.poll(selfHosted.id);
    while (work && work.data.id !== mine.id) work = await worker.beta.environments.work.poll(selfHosted.id);
    const secret = JSON.parse(Buffer.from(String(work?.secret), "base64url").toString("utf8")) as { sessions_token: string };
    const runner = t.clientWith(secret.sessions_token);
    expect((await runner.beta.sessions.retrieve(mine.id)).id).toBe(mine.id);
    expect(await errorOf(runner.beta.sessions.retrieve(foreign.id))).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect(await errorOf(runner.beta.sessions.update(mine.id, { title: "x" }))).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect(await errorOf(runner.beta.sessions.archive(mine.id))).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect(await errorOf(t.clientWith("sk-ant-api03-nope").beta.sessions.retrieve(mine.id))).toBeInstanceOf(Anthropic.AuthenticationError);
  });
});
