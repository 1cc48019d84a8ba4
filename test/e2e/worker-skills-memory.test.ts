/**
 * The unmodified official `EnvironmentWorker` with a skill and a memory
 * store (both backends). The skill is uploaded through
 * `client.beta.skills.create` and attached to the agent; the worker downloads
 * and extracts it, and a `read` tool call reads `skills/<name>/SKILL.md`. The
 * memory store is attached as a session resource; the worker downloads it into
 * the resource's `mount_path`, the model `write`s a new file and `edit`s an
 * existing one there, and the worker syncs them back when the session ends:
 * the new memory exists server-side with the right `content_sha256`; the edit
 * loses a `content_sha256` precondition race against a concurrent writer
 * (409), so the concurrent writer's content stays.
 *
 * The worker creates `mount_path` (`/mnt/memory/<slug>`) itself, so the test
 * needs write access to `/mnt/memory`, as a real worker host does.
 */
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { toFile } from "@anthropic-ai/sdk";
import { type ScriptedModel, startScriptedModel, type TurnInput } from "@openma/scripted-model";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";
import {
  allEvents,
  createSelfHostedEnvironment,
  endTurnIdle,
  isForceStop,
  type LoggedEvent,
  resultText,
  sendAndWait,
  startOfficialWorker,
} from "../support/worker-e2e.ts";

const MODEL_KEY = "sk-scripted-skills-memory";
const SKILL_MD = "---\nname: greeter\ndescription: Greets people politely\n---\n# greeter\nSay hello first.\n";
const NEW_MEMORY = "remember: the user likes tea\n";
const sha256 = (s: string) => createHash("sha256").update(s, "utf8").digest("hex");

/** read the skill, write a new memory, edit an existing one, answer. */
function script(memoryDir: string): TurnInput[] {
  const use = (name: string, input: Record<string, unknown>) => ({ content: [{ type: "tool_use" as const, name, input }] });
  return [
    { match: { last_user_text_contains: "USE_SKILL_AND_MEMORY" }, response: use("read", { file_path: "skills/greeter/SKILL.md" }) },
    { match: { tool_result_for: "read" }, response: use("write", { file_path: `${memoryDir}/new.md`, content: NEW_MEMORY }) },
    {
      match: { tool_result_for: "write" },
      response: use("edit", { file_path: `${memoryDir}/existing.md`, old_string: "v1", new_string: "v1 edited by the worker" }),
    },
    { match: { tool_result_for: "edit" }, response: "skill read, memory written" },
  ];
}

describe.each(BACKENDS)("the official EnvironmentWorker with skills and memory on %s", (dialect) => {
  let model: ScriptedModel;
  let t: TestServer;
  beforeAll(async () => {
    model = await startScriptedModel({ apiKey: MODEL_KEY });
    t = await startTestServer(dialect, { OPENMA_BRAIN: "on", OPENMA_MODEL_BASE_URL: model.url, OPENMA_MODEL_API_KEY: MODEL_KEY });
  });
  afterAll(async () => {
    await t?.close();
    await model?.close();
  });

  it("downloads the agent's skill, syncs a memory back and loses a precondition race to a concurrent writer", async () => {
    const { client } = t;
    const skill = await client.beta.skills.create({ files: [await toFile(Buffer.from(SKILL_MD), "greeter/SKILL.md")] });
    const agent = await client.beta.agents.create({
      name: "skilled",
      model: "claude-test-1",
      tools: [{ type: "agent_toolset_20260401" }],
      skills: [{ type: "custom", skill_id: skill.id }],
    });
    // A unique store name: the worker refuses a mount folder that already exists.
    const store = await client.beta.memoryStores.create({ name: `notes-${randomBytes(4).toString("hex")}` });
    const existing = await client.beta.memoryStores.memories.create(store.id, { path: "/existing.md", content: "v1\n" });
    const env = await createSelfHostedEnvironment(client, "hands");
    const session = await client.beta.sessions.create({
      agent: agent.id,
      environment_id: env.id,
      resources: [{ type: "memory_store", memory_store_id: store.id }],
    });
    const resource = session.resources[0] as { mount_path?: string };
    const memoryDir = resource.mount_path as string;
    expect(memoryDir).toMatch(/^\/mnt\/memory\//);
    model.load(script(memoryDir));

    const worker = startOfficialWorker({
      baseURL: t.baseURL,
      apiKey: t.apiKey,
      environmentId: env.id,
      environmentKey: env.key,
      maxIdleMs: 200,
    });
    // A concurrent writer changes existing.md after the worker listed the store and before its
    // update lands: the worker's `content_sha256` precondition is then stale and must be refused.
    const concurrent = "v2 from a concurrent writer\n";
    worker.wire.before = async (req) => {
      if (req.method === "POST" && req.path === `/v1/memory_stores/${store.id}/memories/${existing.id}`) {
        worker.wire.before = null;
        await client.beta.memoryStores.memories.update(existing.id, { memory_store_id: store.id, content: concurrent });
      }
    };
    try {
      const seen = await sendAndWait(
        client,
        session.id,
        [{ type: "user.message", content: [{ type: "text", text: "USE_SKILL_AND_MEMORY" }] }],
        endTurnIdle,
      );
      expect(seen.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "end_turn" } });
      // The item ends after the worker's final memory sync and teardown flush.
      expect((await worker.wire.next(isForceStop)).status).toBe(200);

      const events = await allEvents(client, session.id);
      const results = events.filter((e) => e.type === "user.tool_result");
      expect(results).toHaveLength(3);
      const [read, write, edit] = results as [LoggedEvent, LoggedEvent, LoggedEvent];
      expect(read.is_error).toBe(false);
      expect(resultText(read)).toBe(SKILL_MD);
      expect(resultText(write)).toBe(`wrote ${Buffer.byteLength(NEW_MEMORY)} bytes to ${memoryDir}/new.md`);
      expect(resultText(edit)).toBe(`edited ${memoryDir}/existing.md (1 replacement(s))`);
      // The skill came from our server: version lookup by the `latest` alias, then the archive.
      const skillCalls = worker.wire.records.filter((r) => r.path.startsWith(`/v1/skills/${skill.id}/versions/`));
      expect(skillCalls.map((r) => [r.path.endsWith("/content"), r.status])).toEqual([
        [false, 200],
        [true, 200],
      ]);

      // The new file was created server-side with the hash of its exact bytes.
      const memories = [];
      for await (const m of client.beta.memoryStores.memories.list(store.id, { view: "full" } as never)) memories.push(m);
      const byPath = new Map(memories.map((m) => [(m as { path: string }).path, m as { content: string; content_sha256: string }]));
      expect(byPath.get("/new.md")).toMatchObject({ content: NEW_MEMORY, content_sha256: sha256(NEW_MEMORY) });
      // The worker's update of existing.md carried the stale precondition and was refused with 409.
      const update = worker.wire.records.find((r) => r.path === `/v1/memory_stores/${store.id}/memories/${existing.id}`);
      expect(update?.status).toBe(409);
      expect(JSON.parse(update?.body ?? "{}")).toMatchObject({
        precondition: { type: "content_sha256", content_sha256: sha256("v1\n") },
      });
      expect(byPath.get("/existing.md")).toMatchObject({ content: concurrent, content_sha256: sha256(concurrent) });
      expect(new Set(memories.map((m) => (m as { path: string }).path))).toEqual(new Set(["/existing.md", "/new.md"]));
    } finally {
      await worker.stop();
    }
    // Teardown removed the worker's local copy of the store.
    expect(existsSync(memoryDir)).toBe(false);
  });
});
