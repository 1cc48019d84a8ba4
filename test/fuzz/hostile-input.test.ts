/**
 * Property test: hostile and malformed input at every route.
 *   - never a 5xx;
 *   - every error is the API's error body with a request id;
 *   - a rejected request writes nothing (the whole database is fingerprinted
 *     before and after every non-2xx answer).
 * Runs on both storage backends with committed seeds so failures reproduce.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { BACKENDS } from "@openma/storage/testing";
import fc from "fast-check";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

import { startTestServer, type TestServer } from "../support/server.ts";
import { documentedRoutes, FIELD_NAMES, QUERY_KEYS, ROUTES, type Route, SKIPPED } from "./routes.ts";

/** Routes behind a beta header answer 404 without it; every request carries all of them (other routes ignore it). */
const BETAS = ["webhooks-2026-10-07", "dreaming-2026-04-21", "user-profiles-2026-08-18", "mcp-tunnels-2026-06-22"].join(",");

const RUNS_PER_ROUTE = 20;
const SEED = 20261129;

const hostileString = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: "grapheme", maxLength: 20 }),
  fc.constantFrom(
    "",
    " ",
    "\u0000",
    "\ud800",
    "../../etc/passwd",
    "/abs/path",
    "%2e%2e",
    "a".repeat(70_000),
    "sk-ant-api03-x",
    "null",
    "NO_HEARTBEAT",
  ),
);
const hostileNumber = fc.oneof(
  fc.integer(),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom(0, -1, 2 ** 31, 2 ** 31 - 1, 2 ** 53, -(2 ** 63), 1e308, 0.5),
);
const { value: hostileValue } = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: "small" },
    hostileString,
    hostileNumber,
    fc.boolean(),
    fc.constant(null),
    fc.array(tie("value"), { maxLength: 4 }),
    fc.dictionary(fc.constantFrom(...FIELD_NAMES), tie("value"), { maxKeys: 5 }),
  ),
}));

const EVENT_TYPES = [
  "user.message",
  "user.interrupt",
  "user.tool_confirmation",
  "user.custom_tool_result",
  "user.tool_result",
  "user.define_outcome",
  "system.message",
  "agent.message",
  "bogus",
];

/** Bodies that look almost right reach deeper validation than pure noise. */
const shapedBody = fc.oneof(
  fc.dictionary(fc.constantFrom(...FIELD_NAMES), hostileValue, { maxKeys: 8 }),
  fc.record(
    {
      events: fc.array(
        fc.record(
          {
            type: fc.constantFrom(...EVENT_TYPES),
            content: hostileValue,
            tool_use_id: hostileValue,
            result: hostileValue,
            text: hostileValue,
          },
          { requiredKeys: ["type"] },
        ),
        { maxLength: 3 },
      ),
    },
    { requiredKeys: [] },
  ),
  fc.record(
    {
      name: hostileValue,
      model: hostileValue,
      config: fc.record({ type: fc.constantFrom("cloud", "self_hosted", "x"), networking: hostileValue }, { requiredKeys: [] }),
      agent: hostileValue,
      environment_id: hostileValue,
      path: hostileValue,
      content: hostileValue,
      metadata: fc.dictionary(hostileString, hostileValue, { maxKeys: 20 }),
    },
    { requiredKeys: [] },
  ),
);

const rawBody = fc.oneof(
  shapedBody.map((b) => JSON.stringify(b)),
  fc.jsonValue().map((v) => JSON.stringify(v)),
  fc.constantFrom("", "{", "not json", "[]", "null", "true", `${"[".repeat(5000)}${"]".repeat(5000)}`, '{"name":"\\ud800"}'),
);

const queryString = fc
  .array(fc.tuple(fc.constantFrom(...QUERY_KEYS), fc.oneof(hostileString, hostileNumber.map(String))), { maxLength: 4 })
  .map((pairs) => pairs.map(([k, v]) => `${encodeURIComponent(k)}=${encodeHostile(v)}`).join("&"));

/** Percent-encodes like a client would, but sends lone surrogates as the invalid UTF-8 bytes they would become. */
function encodeHostile(value: string): string {
  return value
    .replace(/[\ud800-\udfff]/g, "\u0000LONE\u0000")
    .split("\u0000LONE\u0000")
    .map(encodeURIComponent)
    .join("%ED%A0%80");
}

const hostileSegment = fc.constantFrom("..", "%2e%2e", "x".repeat(3000), "%00", "ü", "sesn_does_not_exist", "a b");

type Ids = Record<string, string>;

async function api(t: TestServer, method: string, path: string, body?: unknown, token?: string) {
  const res = await fetch(`${t.baseURL}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token ?? t.apiKey}`,
      "anthropic-beta": BETAS,
      ...(body !== undefined ? { "content-type": "application/json" } : {}),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`fixture ${method} ${path} failed: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

async function fixtures(t: TestServer): Promise<{ ids: Ids; creds: Record<"api" | "env" | "token", string> }> {
  const agent = await api(t, "POST", "/v1/agents", { name: "fx", model: "claude-sonnet-4-5" });
  const env = await api(t, "POST", "/v1/environments", { name: "cloud" });
  const shenv = await api(t, "POST", "/v1/environments", { name: "hosted", config: { type: "self_hosted" } });
  const session = await api(t, "POST", "/v1/sessions", { agent: agent.id, environment_id: env.id });
  const shsession = await api(t, "POST", "/v1/sessions", {
    agent: agent.id,
    environment_id: shenv.id,
    initial_events: [{ type: "user.message", content: [{ type: "text", text: "hi" }] }],
  });
  const work = await api(t, "GET", `/v1/environments/${shenv.id}/work/poll`, undefined, shenv.environment_key);
  const secret = JSON.parse(Buffer.from(work.secret, "base64url").toString("utf8"));
  const vault = await api(t, "POST", "/v1/vaults", { display_name: "v" });
  const credential = await api(t, "POST", `/v1/vaults/${vault.id}/credentials`, {
    auth: { type: "static_bearer", mcp_server_url: "https://mcp.example.test", token: "s3cret" },
  });
  const store = await api(t, "POST", "/v1/memory_stores", { name: "mem" });
  const memory = await api(t, "POST", `/v1/memory_stores/${store.id}/memories`, { path: "/a.md", content: "x" });
  const form = new FormData();
  form.append("file", new Blob(["hello"]), "a.txt");
  const file = await (
    await fetch(`${t.baseURL}/v1/files`, { method: "POST", headers: { authorization: `Bearer ${t.apiKey}` }, body: form })
  ).json();
  const skillForm = new FormData();
  skillForm.append("files[]", new Blob(["---\nname: fx-skill\ndescription: a skill\n---\nbody"]), "fx-skill/SKILL.md");
  const skill = await (
    await fetch(`${t.baseURL}/v1/skills`, { method: "POST", headers: { authorization: `Bearer ${t.apiKey}` }, body: skillForm })
  ).json();
  const resource = await api(t, "POST", `/v1/sessions/${session.id}/resources`, { type: "file", file_id: file.id });
  const deployment = await api(t, "POST", "/v1/deployments", {
    agent: agent.id,
    environment_id: env.id,
    name: "fx",
    initial_events: [{ type: "user.message", content: [{ type: "text", text: "hi" }] }],
  });
  const deploymentRun = await api(t, "POST", `/v1/deployments/${deployment.id}/run`);
  // Subscribed to an event this server never emits: no delivery attempt may write while a request is checked.
  const webhook = await api(t, "POST", "/v1/organizations/webhooks", {
    url: "https://hooks.example.com/fx",
    enabled_events: ["external_key.failed"],
  });
  // Pending for good: the fuzz server runs no brain, so the dream is never claimed.
  const dream = await api(t, "POST", "/v1/dreams", {
    inputs: [
      { type: "memory_store", memory_store_id: store.id },
      { type: "sessions", session_ids: [session.id] },
    ],
    model: "claude-dream-1",
  });
  const userProfile = await api(t, "POST", "/v1/user_profiles", { name: "fx" });
  const tunnel = await api(t, "POST", "/v1/tunnels", { display_name: "fx" });
  const tunnelCert = await api(t, "POST", `/v1/tunnels/${tunnel.id}/certificates`, {
    ca_certificate_pem: readFileSync(new URL("../conformance/fixtures/tunnel-ca.pem", import.meta.url), "utf8"),
  });
  // The fuzz server runs no brain, so no coordinator starts a thread: the row is what its send_thread_message tool writes.
  const thread = { id: "sthr_fuzzfixture", parent: "sthr_fuzzprimary" };
  for (const [id, parent] of [
    [thread.parent, null],
    [thread.id, thread.parent],
  ] as const)
    await t.store.storage.db
      .insertInto("session_threads")
      .values({
        id,
        session_id: session.id,
        parent_thread_id: parent,
        agent_name: "fx",
        body: JSON.stringify({ agent: { type: "agent", id: agent.id, version: 1, name: "fx" } }),
        created_at: new Date().toISOString(),
        archived_at: null,
      })
      .execute();
  return {
    ids: {
      thread: thread.id,
      dream: dream.id,
      userprofile: userProfile.id,
      tunnel: tunnel.id,
      tunnelcert: tunnelCert.id,
      agent: agent.id,
      env: env.id,
      shenv: shenv.id,
      session: session.id,
      shsession: shsession.id,
      work: work.id,
      vault: vault.id,
      credential: credential.id,
      store: store.id,
      memory: memory.id,
      memversion: memory.memory_version_id,
      file: file.id,
      skill: skill.id,
      skillversion: skill.latest_version_id,
      resource: resource.id,
      deployment: deployment.id,
      deploymentrun: deploymentRun.id,
      webhook: webhook.id,
    },
    creds: { api: t.apiKey, env: shenv.environment_key, token: secret.sessions_token },
  };
}

/** A digest of every row of every table: equal digests mean nothing was written. */
async function fingerprint(t: TestServer): Promise<string> {
  const { db, dialect } = t.store.storage;
  const tables =
    dialect === "sqlite"
      ? await sql<{ name: string }>`select name from sqlite_master where type = 'table' order by name`.execute(db)
      : await sql<{ name: string }>`select tablename as name from pg_tables where schemaname = current_schema() order by tablename`.execute(
          db,
        );
  const hash = createHash("sha256");
  for (const { name } of tables.rows) {
    if (name === "openma_migrations") continue;
    const rows = await sql<Record<string, unknown>>`select * from ${sql.table(name)}`.execute(db);
    hash.update(name);
    for (const line of rows.rows.map((row) => JSON.stringify(row)).sort()) hash.update(line);
  }
  return hash.digest("hex");
}

function multipartBody(): fc.Arbitrary<FormData> {
  return fc
    .array(fc.tuple(fc.constantFrom("file", "files[]", "display_name", "expires_in_seconds", "junk"), hostileString, fc.boolean()), {
      maxLength: 3,
    })
    .map((parts) => {
      const form = new FormData();
      for (const [field, text, asFile] of parts) {
        if (asFile) form.append(field, new Blob([text]), text.slice(0, 200) || "f");
        else form.append(field, text);
      }
      return form;
    });
}

describe("the fuzz route table", () => {
  it("is the OpenAPI document's operations, each fuzzed or skipped for a stated reason", () => {
    const documented = documentedRoutes();
    for (const id of Object.keys(SKIPPED)) expect(documented.map((o) => o.operationId)).toContain(id);
    const fuzzed = new Set(ROUTES.map((r) => `${r.method} ${r.path}`));
    for (const o of documented) {
      if (SKIPPED[o.operationId]) continue;
      for (const r of o.routes) expect(fuzzed, o.operationId).toContain(`${r.method} ${r.path}`);
    }
    expect(ROUTES.length).toBeGreaterThanOrEqual(documented.length - Object.keys(SKIPPED).length);
  });
});

describe.each(BACKENDS)("hostile input on %s", (dialect) => {
  let t: TestServer;
  let ids: Ids;
  let creds: Record<"api" | "env" | "token", string>;
  beforeAll(async () => {
    t = await startTestServer(dialect);
    ({ ids, creds } = await fixtures(t));
  }, 120_000);
  afterAll(async () => t?.close());

  it.each(ROUTES.map((route) => [`${route.method} ${route.path}`, route] as const))(
    "%s: no 5xx, error bodies well-formed, rejected requests write nothing",
    async (_name, route: Route) => {
      const request = fc.record({
        query: queryString,
        body: route.body === "multipart" ? multipartBody() : rawBody,
        hostilePath: fc.option(hostileSegment, { freq: 4 }),
        sendBody: fc.boolean(),
      });
      await fc.assert(
        fc.asyncProperty(request, async ({ query, body, hostilePath, sendBody }) => {
          let path = route.path.replace(/\{(\w+)\}/g, (_m, key: string) => ids[key] ?? key);
          if (hostilePath !== null) path = path.replace(/\/[a-z]+_[0-9a-z]+(?=\/|$)/, `/${hostilePath}`);
          const url = `${t.baseURL}${path}${query ? `?${query}` : ""}`;
          const headers: Record<string, string> = { authorization: `Bearer ${creds[route.cred]}`, "anthropic-beta": BETAS };
          let payload: string | FormData | undefined;
          if (route.method !== "GET" && (route.body !== "none" || sendBody)) {
            payload = body;
            if (typeof body === "string") headers["content-type"] = "application/json";
          }
          const before = await fingerprint(t);
          const res = await fetch(url, { method: route.method, headers, body: payload });
          const text = await res.text();
          expect(res.status, `${route.method} ${url} → ${res.status} ${text.slice(0, 300)}`).toBeLessThan(500);
          if (res.status >= 400) {
            const parsed = JSON.parse(text);
            expect(parsed).toMatchObject({ type: "error", error: { type: expect.any(String), message: expect.any(String) } });
            expect(parsed.request_id).toMatch(/^req_/);
            expect(await fingerprint(t), `${route.method} ${url} → ${res.status} wrote to the database`).toBe(before);
          }
        }),
        { numRuns: RUNS_PER_ROUTE, seed: SEED, endOnFailure: true },
      );
    },
    120_000,
  );
});
