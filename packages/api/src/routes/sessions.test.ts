/**
 * The `onSessionClosed` hook of archive and delete, on both backends: called
 * once the change committed (the hook sees the archived row, or no row), with
 * why; a failing hook is logged and the request still succeeds; a request
 * that changed nothing (unknown session) does not call it.
 */
import { hashSecret, newId, systemClock } from "@openma/storage";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { createApp } from "../app.ts";
import type { ApiDeps, Logger } from "../context.ts";

const KEY = "sk-ant-api03-sessions-route-test-0123456789";
const headers = { "x-api-key": KEY, "content-type": "application/json" };

interface Seen {
  sessionId: string;
  why: string;
  /** The session row as the hook saw it: proves the change had committed. */
  row: { archived_at: string | null } | undefined;
}

describe.each(BACKENDS)("session close hook on %s", (dialect) => {
  let store: TestStorage;
  let seen: Seen[];
  let warnings: Array<{ obj: object; msg: string | undefined }>;
  let failHook: Error | null;
  let app: ReturnType<typeof createApp>;

  const post = async (path: string, body: unknown) => {
    const res = await app.request(path, { method: "POST", headers, body: JSON.stringify(body) });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };

  const newSession = async (): Promise<string> => {
    const agent = await post("/v1/agents", { name: "closer", model: "claude-test-1" });
    const env = await post("/v1/environments", { name: `env-${newId("x")}` });
    const session = await post("/v1/sessions", { agent: agent.body.id, environment_id: env.body.id });
    expect(session.status).toBe(200);
    return session.body.id as string;
  };

  beforeAll(async () => {
    store = await openTestStorage(dialect);
    const logger: Logger = { info() {}, error() {}, warn: (obj, msg) => warnings.push({ obj, msg }) };
    const deps: ApiDeps = {
      storage: store.storage,
      clock: systemClock,
      ids: newId,
      logger,
      configuredApiKeyHashes: new Set([hashSecret(KEY)]),
      workTtlSeconds: 60,
      sse: { keepAliveMs: 15_000 },
      onSessionClosed: async (sessionId, why) => {
        const row = await store.storage.db.selectFrom("sessions").select("archived_at").where("id", "=", sessionId).executeTakeFirst();
        seen.push({ sessionId, why, row });
        if (failHook) throw failHook;
      },
    };
    app = createApp(deps);
  });
  afterAll(async () => {
    await store?.cleanup();
  });
  beforeEach(() => {
    seen = [];
    warnings = [];
    failHook = null;
  });

  it("archive calls the hook after the archive committed, on every archive call", async () => {
    const id = await newSession();
    const archived = await post(`/v1/sessions/${id}/archive`, {});
    expect(archived.status).toBe(200);
    expect(seen).toEqual([{ sessionId: id, why: "archived", row: { archived_at: archived.body.archived_at } }]);
    expect(archived.body.archived_at).toEqual(expect.any(String));
    // Archive is idempotent; telling the hook again is harmless and covers a process that missed the first call.
    expect((await post(`/v1/sessions/${id}/archive`, {})).status).toBe(200);
    expect(seen.map((s) => s.why)).toEqual(["archived", "archived"]);
  });

  it("delete calls the hook once the session is gone", async () => {
    const id = await newSession();
    const res = await app.request(`/v1/sessions/${id}`, { method: "DELETE", headers });
    expect(res.status).toBe(200);
    expect(seen).toEqual([{ sessionId: id, why: "deleted", row: undefined }]);
  });

  it("a failing hook is logged and does not fail the committed request", async () => {
    const id = await newSession();
    failHook = new Error("sandbox engine is gone");
    const archived = await post(`/v1/sessions/${id}/archive`, {});
    expect(archived.status).toBe(200);
    expect(archived.body.archived_at).toEqual(expect.any(String));
    const deleted = await app.request(`/v1/sessions/${id}`, { method: "DELETE", headers });
    expect(deleted.status).toBe(200);
    expect(seen.map((s) => s.why)).toEqual(["archived", "deleted"]);
    expect(warnings).toEqual([
      { obj: { err: "sandbox engine is gone", session_id: id }, msg: "session close hook failed" },
      { obj: { err: "sandbox engine is gone", session_id: id }, msg: "session close hook failed" },
    ]);
  });

  it("an unknown session is a 404 and nothing is closed", async () => {
    expect((await post("/v1/sessions/sesn_missing/archive", {})).status).toBe(404);
    expect((await app.request("/v1/sessions/sesn_missing", { method: "DELETE", headers })).status).toBe(404);
    expect(seen).toEqual([]);
  });
});
