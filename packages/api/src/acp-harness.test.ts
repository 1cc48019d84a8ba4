/**
 * The ACP harness extension (`metadata["openma.acp_agent"]`) on both
 * backends: selections are checked when an agent or environment is written,
 * the release is pinned once when a session is created (from an agent cache
 * on disk, read by the real catalog), later changes to the agent do not reach
 * a live session, and a session's harness cannot be changed.
 */
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { type AcpAgentRelease, acpReleaseCatalog, KNOWN_AGENT_RELEASES, releaseDir } from "@openma/acp";
import { hashSecret, newId, systemClock } from "@openma/storage";
import { BACKENDS, openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ACP_AGENT_KEY, pinnedAcpRelease, sessionAgentModel } from "./acp-harness.ts";
import { createApp } from "./app.ts";
import type { ApiDeps } from "./context.ts";

const KEY = "sk-ant-api03-acp-harness-test-0123456789";
const headers = { "x-api-key": KEY, "content-type": "application/json" };
const known = (id: string) => KNOWN_AGENT_RELEASES.find((r) => r.id === id) as AcpAgentRelease;
const CODEX = known("codex-acp");
const GEMINI = known("gemini");
const integrityOf = (r: AcpAgentRelease) => `sha512-${r.id}-tarball`;

/** What an install leaves in the cache, as far as the catalog reads it: the entry point and the lockfile. */
async function fakeInstall(cacheRoot: string, r: AcpAgentRelease): Promise<void> {
  const dir = releaseDir(cacheRoot, r);
  await mkdir(dirname(join(dir, r.bin)), { recursive: true });
  await writeFile(join(dir, r.bin), "");
  const lock = { packages: { [`node_modules/${r.package}`]: { version: r.version, integrity: integrityOf(r) } } };
  await writeFile(join(dir, "package-lock.json"), JSON.stringify(lock));
}

describe.each(BACKENDS)("ACP harness selection on %s", (dialect) => {
  let store: TestStorage;
  let cache: string;
  let app: ReturnType<typeof createApp>;
  let bare: ReturnType<typeof createApp>;

  const call = async (target: ReturnType<typeof createApp>, path: string, body: unknown) => {
    const res = await target.request(path, { method: "POST", headers, body: JSON.stringify(body) });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> & { error?: Record<string, unknown> } };
  };
  const post = (path: string, body: unknown) => call(app, path, body);
  const agentWith = async (metadata: Record<string, string>) => {
    const agent = await post("/v1/agents", { name: "coder", model: "claude-test-1", metadata });
    expect(agent.status).toBe(200);
    return agent.body.id as string;
  };
  const envWith = async (metadata: Record<string, string> = {}) => {
    const env = await post("/v1/environments", { name: `env-${newId("x")}`, metadata });
    expect(env.status).toBe(200);
    return env.body.id as string;
  };
  const expectRefusal = (r: Awaited<ReturnType<typeof post>>, message: RegExp) => {
    expect(r.status).toBe(400);
    expect(r.body).toMatchObject({ type: "error", error: { type: "invalid_request_error", details: { error_code: "invalid_acp_agent" } } });
    expect(r.body.error?.message).toMatch(message);
  };
  const pinned = (r: AcpAgentRelease) => ({ id: r.id, package: r.package, version: r.version, integrity: integrityOf(r) });

  beforeAll(async () => {
    store = await openTestStorage(dialect);
    cache = await mkdtemp(join(tmpdir(), "openma-acp-cache-"));
    await fakeInstall(cache, CODEX);
    const deps: ApiDeps = {
      storage: store.storage,
      clock: systemClock,
      ids: newId,
      logger: { info() {}, warn() {}, error() {} },
      configuredApiKeyHashes: new Set([hashSecret(KEY)]),
      workTtlSeconds: 60,
      sse: { keepAliveMs: 15_000 },
    };
    app = createApp({ ...deps, acpReleases: acpReleaseCatalog(cache) });
    bare = createApp(deps);
  });
  afterAll(async () => {
    await store?.cleanup();
    if (cache) await rm(cache, { recursive: true, force: true });
  });

  it("pins the agent's release on the session once; a later change to the agent reaches only new sessions", async () => {
    const agent = await agentWith({ [ACP_AGENT_KEY]: "codex-acp" });
    const env = await envWith();
    const session = await post("/v1/sessions", { agent, environment_id: env });
    expect(session.status).toBe(200);
    const id = session.body.id as string;
    expect(await pinnedAcpRelease(store.storage.db, id)).toEqual(pinned(CODEX));

    // The agent now selects Gemini CLI, which is not installed: new sessions are refused, the live one keeps Codex.
    // It also names another model: the live session keeps its agent version's model too.
    expect(await sessionAgentModel(store.storage.db, id)).toBe("claude-test-1");
    const updated = await post(`/v1/agents/${agent}`, {
      version: 1,
      model: "claude-test-2",
      metadata: { [ACP_AGENT_KEY]: `gemini@${GEMINI.version}` },
    });
    expect(updated.status).toBe(200);
    expect(await pinnedAcpRelease(store.storage.db, id)).toEqual(pinned(CODEX));
    expect(await sessionAgentModel(store.storage.db, id)).toBe("claude-test-1");
    expectRefusal(await post("/v1/sessions", { agent, environment_id: env }), /gemini-cli@.* is not installed in the agent cache/);
    await fakeInstall(cache, GEMINI);
    const next = await post("/v1/sessions", { agent, environment_id: env });
    expect(next.status).toBe(200);
    expect(await pinnedAcpRelease(store.storage.db, next.body.id as string)).toEqual(pinned(GEMINI));
    expect(await pinnedAcpRelease(store.storage.db, id)).toEqual(pinned(CODEX));
    expect(await sessionAgentModel(store.storage.db, next.body.id as string)).toBe("claude-test-2");
  });

  it("takes the environment's selection when the agent has none, and the agent's over the environment's", async () => {
    const env = await envWith({ [ACP_AGENT_KEY]: `codex-acp@${CODEX.version}` });
    const plain = await post("/v1/sessions", { agent: await agentWith({}), environment_id: env });
    expect(await pinnedAcpRelease(store.storage.db, plain.body.id as string)).toEqual(pinned(CODEX));
    await fakeInstall(cache, GEMINI);
    const own = await post("/v1/sessions", { agent: await agentWith({ [ACP_AGENT_KEY]: "gemini" }), environment_id: env });
    expect(await pinnedAcpRelease(store.storage.db, own.body.id as string)).toEqual(pinned(GEMINI));
    const none = await post("/v1/sessions", { agent: await agentWith({}), environment_id: await envWith() });
    expect(none.status).toBe(200);
    expect(await pinnedAcpRelease(store.storage.db, none.body.id as string)).toBeNull();
  });

  it("refuses unknown agents and releases when an agent or environment is written", async () => {
    expectRefusal(
      await post("/v1/agents", { name: "x", model: "claude-test-1", metadata: { [ACP_AGENT_KEY]: "no-such-agent" } }),
      /metadata\.openma\.acp_agent: unknown ACP agent "no-such-agent"; known releases: codex-acp@/,
    );
    expectRefusal(
      await post("/v1/environments", { name: `env-${newId("x")}`, metadata: { [ACP_AGENT_KEY]: "codex-acp@0.0.1" } }),
      /unknown release "codex-acp@0.0.1" of ACP agent "codex-acp"/,
    );
    const agent = await agentWith({});
    expectRefusal(await post(`/v1/agents/${agent}`, { version: 1, metadata: { [ACP_AGENT_KEY]: "nope" } }), /unknown ACP agent/);
    const env = await envWith();
    expectRefusal(await post(`/v1/environments/${env}`, { metadata: { [ACP_AGENT_KEY]: "nope" } }), /unknown ACP agent/);
    // A server that runs no ACP agents says so.
    expectRefusal(
      await call(bare, "/v1/agents", { name: "x", model: "claude-test-1", metadata: { [ACP_AGENT_KEY]: "codex-acp" } }),
      /this server runs no ACP agents/,
    );
  });

  it("refuses a session's own selection, at creation and as a change of a live session", async () => {
    const agent = await agentWith({ [ACP_AGENT_KEY]: "codex-acp" });
    const env = await envWith();
    expectRefusal(
      await post("/v1/sessions", { agent, environment_id: env, metadata: { [ACP_AGENT_KEY]: "gemini" } }),
      /chosen by its agent or environment/,
    );
    const session = await post("/v1/sessions", { agent, environment_id: env });
    const id = session.body.id as string;
    expectRefusal(await post(`/v1/sessions/${id}`, { metadata: { [ACP_AGENT_KEY]: "gemini" } }), /pinned when the session is created/);
    expectRefusal(await post(`/v1/sessions/${id}`, { metadata: { [ACP_AGENT_KEY]: null } }), /cannot be changed/);
    expect(await pinnedAcpRelease(store.storage.db, id)).toEqual(pinned(CODEX));
    // Other metadata still updates.
    expect((await post(`/v1/sessions/${id}`, { metadata: { team: "a" } })).status).toBe(200);
  });
});
