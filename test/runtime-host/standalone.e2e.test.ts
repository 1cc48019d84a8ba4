/**
 * `openma runtime-host` as its own process next to a running server: it
 * shares the server's database (fences) and blob store (checkpoints,
 * manifests), reaches the API over HTTP, and serves the self-hosted
 * environment's session in a bubblewrap sandbox with the official worker.
 * Its published outputs become the session's Files. SIGTERM stops it
 * cleanly and leaves no sandbox behind.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { eventually } from "@openma/driver-suite/eventually";
import { type ScriptedModel, startScriptedModel, type TurnInput } from "@openma/scripted-model";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";
import { allEvents, createSelfHostedEnvironment, endTurnIdle, resultText, sendAndWait } from "../support/worker-e2e.ts";
import { activeOutputs, bwrapLeftovers } from "./support.ts";

const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));
const MODEL_KEY = "sk-scripted-standalone-runtime-host";
const USAGE = { input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 };

const SCRIPT: TurnInput[] = [
  {
    label: "tool",
    match: { last_user_text_contains: "GO" },
    response: {
      content: [
        { type: "tool_use", name: "bash", input: { command: "hostname && echo done > /mnt/session/outputs/result.txt && echo TOOL-OK" } },
      ],
      usage: USAGE,
    },
  },
  {
    label: "answer",
    match: { tool_result_contains: "TOOL-OK" },
    response: { content: [{ type: "text", text: "finished" }], usage: USAGE },
  },
];

describe("openma runtime-host as a separate process", () => {
  let model: ScriptedModel;
  let t: TestServer;
  let child: ChildProcess | null = null;
  let output = "";

  beforeAll(async () => {
    model = await startScriptedModel({ apiKey: MODEL_KEY, script: SCRIPT });
    t = await startTestServer("postgres", { OPENMA_BRAIN: "on", OPENMA_MODEL_BASE_URL: model.url, OPENMA_MODEL_API_KEY: MODEL_KEY });
  });
  afterAll(async () => {
    child?.kill("SIGKILL");
    await t?.close();
    await model?.close();
  });

  it("serves a session in a sandbox from the shared database and blob store, and stops cleanly on SIGTERM", async () => {
    const env = await createSelfHostedEnvironment(t.client, "standalone");
    const { databaseUrl, pgSchema, dataDir } = t.store;
    if (!databaseUrl || !pgSchema) throw new Error("the standalone lane shares a Postgres database");
    const c = spawn(process.execPath, ["--import", "tsx", join(REPO_ROOT, "apps/openma/src/cli.ts"), "runtime-host"], {
      cwd: REPO_ROOT,
      env: {
        ...process.env,
        DATABASE_URL: databaseUrl,
        OPENMA_PG_SCHEMA: pgSchema,
        // The server's data dir: its blob store holds the checkpoints and manifests.
        OPENMA_DATA_DIR: dataDir,
        OPENMA_API_URL: t.baseURL,
        OPENMA_RUNTIME_HOST_ENVIRONMENT_ID: env.id,
        ANTHROPIC_ENVIRONMENT_KEY: env.key,
        OPENMA_RUNTIME_HOST_SANDBOX: "bubblewrap",
        OPENMA_WORKER_MAX_IDLE_MS: "200",
        LOG_LEVEL: "warn",
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child = c;
    c.stdout?.on("data", (chunk: Buffer) => {
      output += chunk.toString("utf8");
    });
    c.stderr?.on("data", (chunk: Buffer) => {
      output += chunk.toString("utf8");
    });
    const exited = new Promise<number | null>((resolve) => c.once("exit", (code) => resolve(code)));
    await eventually(async () => output.includes("runtime host serving"), "the runtime host to start", 60_000);

    const agent = await t.client.beta.agents.create({ name: "hands", model: "claude-test-1", tools: [{ type: "agent_toolset_20260401" }] });
    const session = await t.client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    await sendAndWait(t.client, session.id, [{ type: "user.message", content: [{ type: "text", text: "GO" }] }], endTurnIdle);
    const result = (await allEvents(t.client, session.id)).find((e) => e.type === "user.tool_result");
    expect(resultText(result as never)).toMatch(/^sandbox\nTOOL-OK/);

    const scope = { environmentId: env.id, sessionId: session.id };
    const entries = await eventually(async () => {
      const files = await activeOutputs(t.store.storage, scope).catch(() => null);
      return files?.some((f) => f.path === "result.txt") ? files : null;
    }, "the runtime host's publication of result.txt");
    expect(entries.map((f) => f.path)).toEqual(["result.txt"]);
    // The published outputs are the session's Files, through the official SDK (ADR 0023).
    const [file] = await eventually(async () => {
      const listed = (await t.client.beta.files.list({ scope_id: session.id })).data;
      return listed.length > 0 ? listed : null;
    }, "the published outputs as session files");
    expect(file).toMatchObject({ filename: "result.txt", size_bytes: 5, scope: { type: "session", id: session.id } });
    expect(await (await t.client.beta.files.download(file!.id)).text()).toBe("done\n");

    c.kill("SIGTERM");
    expect(await exited).toBe(0);
    child = null;
    expect(await bwrapLeftovers([join(dataDir, "runtime-host")])).toEqual([]);
  }, 120_000);
});
