/** Memory stores, memories and memory versions through the official SDK (and its worker's sync), on both backends. */
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import type { BetaManagedAgentsSession } from "@anthropic-ai/sdk/resources/beta/sessions/sessions";
import { SessionMemoryStores } from "@anthropic-ai/sdk/tools/agent-toolset/memories";
import { hashSecret } from "@openma/storage";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

const sha256 = (text: string) => createHash("sha256").update(Buffer.from(text, "utf8")).digest("hex");

async function errorOf(p: Promise<unknown>): Promise<InstanceType<typeof Anthropic.APIError>> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(Anthropic.APIError);
  return err as InstanceType<typeof Anthropic.APIError>;
}

type Attachment = { memory_store_id: string; access: "read_write" | "read_only"; name?: string };

/** Inserts a session with memory_store resources and a live work item; returns its sessions token. */
async function mintSessionsToken(t: TestServer, stores: Attachment[]): Promise<{ token: string; sessionId: string; workId: string }> {
  const db = t.store.storage.db;
  const now = new Date().toISOString();
  const suffix = randomBytes(6).toString("hex");
  const sessionId = `sesn_mem${suffix}`;
  const workId = `work_mem${suffix}`;
  const token = `sk-ant-req-mem-${suffix}`;
  const resources = stores.map((s) => ({ type: "memory_store", ...s }));
  await db
    .insertInto("sessions")
    .values({
      id: sessionId,
      agent_id: "agent_x",
      agent_version: 1,
      environment_id: "env_mem",
      status: "idle",
      body: JSON.stringify({ type: "session", id: sessionId, agent: { skills: [] }, resources }),
      last_seq: 0,
      created_at: now,
      updated_at: now,
      archived_at: null,
    })
    .execute();
  for (const [i, resource] of resources.entries()) {
    await db
      .insertInto("session_resources")
      .values({
        id: `sres_${suffix}${i}`,
        session_id: sessionId,
        type: "memory_store",
        body: JSON.stringify(resource),
        secret: null,
        created_at: now,
        updated_at: now,
      })
      .execute();
  }
  await db
    .insertInto("work_items")
    .values({
      id: workId,
      environment_id: "env_mem",
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
  return { token, sessionId, workId };
}

describe.each(BACKENDS)("memory stores on %s", (dialect) => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer(dialect);
  });
  afterAll(async () => t?.close());

  const newStore = (name = "notes") => t.client.beta.memoryStores.create({ name });

  it("creates, retrieves, updates, lists, archives and deletes stores", async () => {
    const stores = t.client.beta.memoryStores;
    const created = await stores.create({ name: "team", description: "shared notes", metadata: { a: "1" } });
    expect(created).toMatchObject({
      type: "memory_store",
      name: "team",
      description: "shared notes",
      metadata: { a: "1" },
      archived_at: null,
    });
    expect(created.id).toMatch(/^memstore_/);
    expect(await stores.retrieve(created.id)).toEqual(created);
    const updated = await stores.update(created.id, { name: "team-2", description: null, metadata: { a: null, b: "2" } });
    expect(updated).toMatchObject({ name: "team-2", description: "", metadata: { b: "2" } });

    const inWindow = [];
    const from = new Date(Date.parse(created.created_at) - 1000).toISOString();
    for await (const s of stores.list({ "created_at[gte]": from })) inWindow.push(s.id);
    expect(inWindow).toContain(created.id);
    const before = [];
    for await (const s of stores.list({ "created_at[lte]": "2000-01-01T00:00:00Z" })) before.push(s.id);
    expect(before).toEqual([]);

    await t.client.beta.memoryStores.memories.create(created.id, { path: "/x.md", content: "x" });
    const archived = await stores.archive(created.id);
    expect(archived.archived_at).not.toBeNull();
    const live = [];
    for await (const s of stores.list()) live.push(s.id);
    expect(live).not.toContain(created.id);
    const all = [];
    for await (const s of stores.list({ include_archived: true })) all.push(s.id);
    expect(all).toContain(created.id);
    const write = await errorOf(t.client.beta.memoryStores.memories.create(created.id, { path: "/y.md", content: "y" }));
    expect(write.status).toBe(400);
    expect(write.message).toContain("archived");

    expect(await stores.delete(created.id)).toEqual({ id: created.id, type: "memory_store_deleted" });
    expect(await errorOf(stores.retrieve(created.id))).toBeInstanceOf(Anthropic.NotFoundError);
    const orphans = await t.store.storage.db.selectFrom("memories").select("id").where("memory_store_id", "=", created.id).execute();
    expect(orphans).toEqual([]);
  });

  it("creates, retrieves, updates and deletes memories with exact sha256s and preconditions", async () => {
    const store = await newStore();
    const memories = t.client.beta.memoryStores.memories;
    const text = "héllo wörld 🌍\r\n";
    const created = await memories.create(store.id, { path: "/notes/today.md", content: text });
    expect(created).toMatchObject({
      type: "memory",
      memory_store_id: store.id,
      path: "/notes/today.md",
      content_sha256: sha256(text),
      content_size_bytes: Buffer.byteLength(text),
      content: null,
    });
    expect(created.id).toMatch(/^mem_/);
    expect(created.memory_version_id).toMatch(/^memver_/);
    const full = await memories.retrieve(created.id, { memory_store_id: store.id });
    expect(full.content).toBe(text);
    expect((await memories.retrieve(created.id, { memory_store_id: store.id, view: "basic" })).content).toBeNull();
    expect((await memories.create(store.id, { path: "/empty.md", content: null, view: "full" })).content).toBe("");

    const next = "second";
    const updated = await memories.update(created.id, {
      memory_store_id: store.id,
      content: next,
      precondition: { type: "content_sha256", content_sha256: sha256(text) },
      view: "full",
    });
    expect(updated).toMatchObject({ content: next, content_sha256: sha256(next), path: "/notes/today.md" });
    expect(updated.memory_version_id).not.toBe(created.memory_version_id);

    const stale = await errorOf(
      memories.update(created.id, {
        memory_store_id: store.id,
        content: "third",
        precondition: { type: "content_sha256", content_sha256: sha256(text) },
      }),
    );
    expect(stale).toBeInstanceOf(Anthropic.ConflictError);
    expect(stale.error).toMatchObject({ type: "error", error: { type: "memory_precondition_failed_error" } });
    // A retry of the update that already landed succeeds (same content and path) without a new version.
    const retried = await memories.update(created.id, {
      memory_store_id: store.id,
      content: next,
      precondition: { type: "content_sha256", content_sha256: sha256(text) },
    });
    expect(retried.memory_version_id).toBe(updated.memory_version_id);

    const moved = await memories.update(created.id, { memory_store_id: store.id, path: "/archive/today.md" });
    expect(moved).toMatchObject({ id: created.id, path: "/archive/today.md", content_sha256: sha256(next) });

    const wrongSha = await errorOf(memories.delete(created.id, { memory_store_id: store.id, expected_content_sha256: sha256("nope") }));
    expect(wrongSha.error).toMatchObject({ error: { type: "memory_precondition_failed_error" } });
    expect(await memories.delete(created.id, { memory_store_id: store.id, expected_content_sha256: sha256(next) })).toEqual({
      id: created.id,
      type: "memory_deleted",
    });
    expect(await errorOf(memories.retrieve(created.id, { memory_store_id: store.id }))).toBeInstanceOf(Anthropic.NotFoundError);
    expect(await errorOf(memories.update(created.id, { memory_store_id: store.id, content: "x" }))).toBeInstanceOf(Anthropic.NotFoundError);
  });

  it("answers overlapping paths with 409 memory_path_conflict_error naming the blocker", async () => {
    const store = await newStore();
    const memories = t.client.beta.memoryStores.memories;
    const parent = await memories.create(store.id, { path: "/a", content: "" });
    const deep = await memories.create(store.id, { path: "/x/y/z", content: "" });
    const cases: Array<[string, { id: string; path: string }]> = [
      ["/a", parent],
      ["/a/b", parent],
      ["/x/y", deep],
      ["/x", deep],
    ];
    for (const [path, blocker] of cases) {
      const err = await errorOf(memories.create(store.id, { path, content: "c" }));
      expect(err, path).toBeInstanceOf(Anthropic.ConflictError);
      expect(err.error).toMatchObject({
        type: "error",
        error: { type: "memory_path_conflict_error", conflicting_memory_id: blocker.id, conflicting_path: blocker.path },
      });
      expect(err.headers?.get("x-should-retry")).toBe("false");
    }
    // Whole segments only: siblings sharing a name prefix do not overlap.
    await memories.create(store.id, { path: "/ab", content: "" });
    await memories.create(store.id, { path: "/x/y-z", content: "" });
    const rename = await errorOf(memories.update(deep.id, { memory_store_id: store.id, path: "/a/inside" }));
    expect(rename.error).toMatchObject({ error: { type: "memory_path_conflict_error", conflicting_memory_id: parent.id } });
  });

  it("validates paths and content with 400s", async () => {
    const store = await newStore();
    const memories = t.client.beta.memoryStores.memories;
    const badPaths = [
      "relative.md",
      "/a/../b",
      "/a//b",
      "/.anthropic-memory-store",
      "/e\u0301",
      `/${"x".repeat(1100)}`,
      "/dir/",
      "/a\u0000",
    ];
    for (const path of badPaths) {
      const err = await errorOf(memories.create(store.id, { path, content: "x" }));
      expect(err.status, JSON.stringify(path)).toBe(400);
      expect(err.message).toContain("body.path");
    }
    const limit = "é".repeat(51_200); // exactly 102 400 bytes
    expect((await memories.create(store.id, { path: "/big.md", content: limit })).content_size_bytes).toBe(102_400);
    const tooBig = await errorOf(memories.create(store.id, { path: "/bigger.md", content: `${limit}x` }));
    expect(tooBig.status).toBe(400);
    expect(tooBig.message).toContain("body.content");
    expect((await errorOf(memories.create(store.id, { path: "/nul.md", content: "a\u0000b" }))).status).toBe(400);
    const badPrecondition = await errorOf(
      memories.update("mem_x", {
        memory_store_id: store.id,
        content: "x",
        precondition: { type: "content_sha256", content_sha256: "ABC" },
      }),
    );
    expect(badPrecondition.message).toContain("precondition.content_sha256");
    expect((await errorOf(memories.list(store.id, { path_prefix: "/notes" }))).message).toContain("path_prefix");
    expect(await errorOf(memories.list("memstore_missing"))).toBeInstanceOf(Anthropic.NotFoundError);
  });

  it("lists by whole-segment prefix, with depth rollups, views and pagination", async () => {
    const store = await newStore();
    const memories = t.client.beta.memoryStores.memories;
    for (const path of ["/notes/a.md", "/notes/b.md", "/notes/deep/c.md", "/notes/deep/er/d.md", "/notes-archive/old.md", "/top.md"]) {
      await memories.create(store.id, { path, content: `content of ${path}` });
    }
    const paths = async (params: Anthropic.Beta.MemoryStores.MemoryListParams) => {
      const out: string[] = [];
      for await (const item of memories.list(store.id, params))
        out.push(`${item.type === "memory_prefix" ? "prefix" : "memory"}:${item.path}`);
      return out;
    };
    expect(await paths({ path_prefix: "/notes/", limit: 2 })).toEqual([
      "memory:/notes/a.md",
      "memory:/notes/b.md",
      "memory:/notes/deep/c.md",
      "memory:/notes/deep/er/d.md",
    ]);
    expect(await paths({ depth: 1, limit: 1 })).toEqual(["prefix:/notes-archive/", "prefix:/notes/", "memory:/top.md"]);
    expect(await paths({ path_prefix: "/notes/", depth: 1 })).toEqual(["memory:/notes/a.md", "memory:/notes/b.md", "prefix:/notes/deep/"]);
    expect(await paths({ path_prefix: "/notes/deep/", depth: 1 })).toEqual(["memory:/notes/deep/c.md", "prefix:/notes/deep/er/"]);
    expect(await paths({ path_prefix: "/missing/" })).toEqual([]);

    const page = await memories.list(store.id, { path_prefix: "/notes/", view: "full" });
    const first = page.data[0] as Anthropic.Beta.MemoryStores.BetaManagedAgentsMemory;
    expect(first.content).toBe("content of /notes/a.md");
    const basic = await memories.list(store.id, { path_prefix: "/notes/" });
    expect((basic.data[0] as Anthropic.Beta.MemoryStores.BetaManagedAgentsMemory).content).toBeNull();
    expect((basic.data[0] as Anthropic.Beta.MemoryStores.BetaManagedAgentsMemory).content_sha256).toBe(sha256("content of /notes/a.md"));
  });

  it("caps view=full pages at 20 items", async () => {
    const store = await newStore();
    for (let i = 0; i < 23; i++) {
      await t.client.beta.memoryStores.memories.create(store.id, { path: `/m/${String(i).padStart(2, "0")}.md`, content: `${i}` });
    }
    const page = await t.client.beta.memoryStores.memories.list(store.id, { view: "full", limit: 100 });
    expect(page.data).toHaveLength(20);
    expect(page.next_page).toEqual(expect.any(String));
    const all = [];
    for await (const m of t.client.beta.memoryStores.memories.list(store.id, { view: "full", limit: 100 })) all.push(m);
    expect(all).toHaveLength(23);
    expect((await t.client.beta.memoryStores.memories.list(store.id, { limit: 100 })).data).toHaveLength(23);
  });

  it("records versions with actors; filters, views and redaction", async () => {
    const store = await newStore();
    const memories = t.client.beta.memoryStores.memories;
    const versions = t.client.beta.memoryStores.memoryVersions;
    const m = await memories.create(store.id, { path: "/v.md", content: "one" });
    const m2 = await memories.update(m.id, { memory_store_id: store.id, content: "two" });
    await memories.delete(m.id, { memory_store_id: store.id });

    const listed = [];
    for await (const v of versions.list(store.id, { memory_id: m.id, limit: 1 })) listed.push(v);
    expect(listed.map((v) => v.operation)).toEqual(["deleted", "modified", "created"]);
    expect(listed[2]).toMatchObject({
      type: "memory_version",
      id: m.memory_version_id,
      memory_id: m.id,
      memory_store_id: store.id,
      path: "/v.md",
      content: null,
      content_sha256: sha256("one"),
      content_size_bytes: 3,
      created_by: { type: "api_actor", api_key_id: expect.any(String) },
      redacted_at: null,
    });
    expect(listed[0]).toMatchObject({ path: "/v.md", content: null, content_sha256: null, content_size_bytes: null });
    const apiKeyId = (listed[0]!.created_by as { api_key_id: string }).api_key_id;
    const byKey = [];
    for await (const v of versions.list(store.id, { api_key_id: apiKeyId })) byKey.push(v.id);
    expect(byKey).toHaveLength(3);
    const created = [];
    for await (const v of versions.list(store.id, { operation: "created", view: "full" })) created.push(v);
    expect(created.map((v) => v.content)).toEqual(["one"]);
    const none = [];
    for await (const v of versions.list(store.id, { service_account_id: "svac_x" })) none.push(v);
    expect(none).toEqual([]);

    expect((await versions.retrieve(m.memory_version_id, { memory_store_id: store.id })).content).toBe("one");
    expect((await versions.retrieve(m.memory_version_id, { memory_store_id: store.id, view: "basic" })).content).toBeNull();
    const redacted = await versions.redact(m.memory_version_id, { memory_store_id: store.id });
    expect(redacted).toMatchObject({
      id: m.memory_version_id,
      path: null,
      content: null,
      content_sha256: null,
      content_size_bytes: null,
      redacted_at: expect.any(String),
      redacted_by: { type: "api_actor" },
      created_by: { type: "api_actor" },
    });
    expect(await versions.redact(m.memory_version_id, { memory_store_id: store.id })).toEqual(redacted);

    const live = await memories.create(store.id, { path: "/live.md", content: "keep" });
    const refused = await errorOf(versions.redact(live.memory_version_id, { memory_store_id: store.id }));
    expect(refused.status).toBe(400);
    expect(await errorOf(versions.retrieve("memver_missing", { memory_store_id: store.id }))).toBeInstanceOf(Anthropic.NotFoundError);
    expect(m2.memory_version_id).toBe(listed[1]!.id);
  });

  it("never loses a concurrent update: one precondition winner, overlapping creates exclusive", async () => {
    const store = await newStore();
    const memories = t.client.beta.memoryStores.memories;
    const m = await memories.create(store.id, { path: "/race.md", content: "base" });
    const attempts = await Promise.allSettled(
      Array.from({ length: 6 }, (_, i) =>
        memories.update(m.id, {
          memory_store_id: store.id,
          content: `writer ${i}`,
          precondition: { type: "content_sha256", content_sha256: sha256("base") },
        }),
      ),
    );
    const won = attempts.filter((a) => a.status === "fulfilled");
    expect(won).toHaveLength(1);
    for (const a of attempts) {
      if (a.status === "rejected") expect((a.reason as InstanceType<typeof Anthropic.APIError>).status).toBe(409);
    }
    const winner = (won[0] as PromiseFulfilledResult<Anthropic.Beta.MemoryStores.BetaManagedAgentsMemory>).value;
    expect((await memories.retrieve(m.id, { memory_store_id: store.id })).content_sha256).toBe(winner.content_sha256);

    const creates = await Promise.allSettled(
      ["/c", "/c/d", "/c/d/e", "/c/d/e/f"].map((path) => memories.create(store.id, { path, content: path })),
    );
    expect(creates.filter((a) => a.status === "fulfilled")).toHaveLength(1);
    const under = [];
    for await (const x of memories.list(store.id, { path_prefix: "/c/" })) under.push(x);
    const top = await memories.list(store.id, {});
    expect(under.length + top.data.filter((x) => x.path === "/c").length).toBe(1);
  });

  it("scopes sessions tokens to attached stores, enforces read_only and records session actors", async () => {
    const rw = await newStore("rw");
    const ro = await newStore("ro");
    const other = await newStore("other");
    await t.client.beta.memoryStores.memories.create(ro.id, { path: "/readme.md", content: "read me" });
    const { token, sessionId, workId } = await mintSessionsToken(t, [
      { memory_store_id: rw.id, access: "read_write" },
      { memory_store_id: ro.id, access: "read_only" },
    ]);
    const asToken = t.clientWith(token).beta.memoryStores;
    const written = await asToken.memories.create(rw.id, { path: "/from-session.md", content: "hi" });
    const [version] = (await asToken.memoryVersions.list(rw.id, { session_id: sessionId })).data;
    expect(version).toMatchObject({ id: written.memory_version_id, created_by: { type: "session_actor", session_id: sessionId } });

    const listed = await asToken.memories.list(ro.id, { view: "full" });
    expect(listed.data.map((m) => m.path)).toEqual(["/readme.md"]);
    const readOnly = await errorOf(asToken.memories.create(ro.id, { path: "/nope.md", content: "x" }));
    expect(readOnly).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect(readOnly.message).toContain("read-only");
    const roMemory = listed.data[0] as Anthropic.Beta.MemoryStores.BetaManagedAgentsMemory;
    expect(await errorOf(asToken.memories.delete(roMemory.id, { memory_store_id: ro.id }))).toBeInstanceOf(Anthropic.PermissionDeniedError);

    expect(await errorOf(asToken.memories.list(other.id))).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect(await errorOf(asToken.retrieve(rw.id))).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect(await errorOf(asToken.memoryVersions.redact(written.memory_version_id, { memory_store_id: rw.id }))).toBeInstanceOf(
      Anthropic.PermissionDeniedError,
    );

    const envKey = `sk-ant-oat01-mem-${dialect}`;
    await t.store.storage.db
      .insertInto("environment_keys")
      .values({ key_hash: hashSecret(envKey), environment_id: "env_mem", created_at: new Date().toISOString(), revoked_at: null })
      .execute();
    expect(await errorOf(t.clientWith(envKey).beta.memoryStores.memories.list(rw.id))).toBeInstanceOf(Anthropic.PermissionDeniedError);

    await t.store.storage.db.updateTable("work_items").set({ state: "stopped" }).where("id", "=", workId).execute();
    expect(await errorOf(asToken.memories.list(rw.id))).toBeInstanceOf(Anthropic.AuthenticationError);
  });

  it("round-trips the official worker's memory sync", async () => {
    const store = await newStore("synced");
    const memories = t.client.beta.memoryStores.memories;
    await memories.create(store.id, { path: "/projects/a.md", content: "alpha" });
    const gone = await memories.create(store.id, { path: "/projects/b.md", content: "beta" });
    await memories.create(store.id, { path: "/top.md", content: "top" });
    const { token, sessionId } = await mintSessionsToken(t, [{ memory_store_id: store.id, access: "read_write", name: "synced" }]);
    const session = {
      id: sessionId,
      resources: [{ type: "memory_store", memory_store_id: store.id, access: "read_write", name: "synced" }],
    } as unknown as BetaManagedAgentsSession;
    const workdir = await mkdtemp(join(tmpdir(), "openma-memsync-"));
    const sync = new SessionMemoryStores(t.clientWith(token), { workdir });
    try {
      await sync.download(session);
      const root = join(workdir, "memory", "synced");
      expect(await readFile(join(root, "projects", "a.md"), "utf8")).toBe("alpha");
      expect(await readFile(join(root, "top.md"), "utf8")).toBe("top");

      await writeFile(join(root, "projects", "a.md"), "alpha, edited ✓");
      await writeFile(join(root, "new.md"), "brand new");
      await unlink(join(root, "projects", "b.md"));
      await sync.finish();

      const remote = new Map<string, string | null | undefined>();
      for await (const m of memories.list(store.id, { view: "full", limit: 20 })) {
        if (m.type === "memory") remote.set(m.path, m.content);
      }
      expect(Object.fromEntries(remote)).toEqual({ "/projects/a.md": "alpha, edited ✓", "/new.md": "brand new", "/top.md": "top" });
      expect(await errorOf(memories.retrieve(gone.id, { memory_store_id: store.id }))).toBeInstanceOf(Anthropic.NotFoundError);
      const byWorker = await t.client.beta.memoryStores.memoryVersions.list(store.id, { session_id: sessionId });
      expect(byWorker.data.map((v) => v.operation).sort()).toEqual(["created", "deleted", "modified"]);
    } finally {
      await sync.dispose();
      await rm(workdir, { recursive: true, force: true });
    }
  });
});
