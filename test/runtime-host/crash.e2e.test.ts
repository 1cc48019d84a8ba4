/**
 * `test:integration:runtime`'s crash lane, on real dockerd and real bwrap:
 * `openma serve` with its embedded runtime host (ama_worker lane) runs a
 * session whose first turn writes /workspace/notes.txt and the deliverable
 * /mnt/session/outputs/report.md (published at the turn boundary). Mid-way
 * through the second turn's tool call, which has just written
 * /workspace/partial.txt, the server is `kill -9`ed. On restart the work
 * item is reclaimed, the dead owner's fence is waited out, and a FRESH
 * sandbox restores the last PUBLISHED workspace: the re-run tool sees
 * notes.txt but not the unpublished partial.txt. The session completes, the
 * output manifest lists report.md with its sha256, the tool result is
 * recorded once, and no container or process tree of the session is left.
 */
import { createHash } from "node:crypto";
import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { connectDocker } from "@openma/driver-node-docker";
import { eventually } from "@openma/driver-suite/eventually";
import { sqlRuntimePorts } from "@openma/host";
import type { RuntimeHostDriver } from "@openma/runtime-host";
import { type ScriptedModel, startScriptedModel, type TurnInput } from "@openma/scripted-model";
import { systemClock } from "@openma/storage";
import { FsBlobStore } from "@openma/storage/blobs";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { scrape, total } from "../ops/scrape.ts";
import { type CrashableServer, crashableServer } from "../support/crash-server.ts";
import { allEvents, createSelfHostedEnvironment, endTurnIdle, type LoggedEvent, resultText, sendAndWait } from "../support/worker-e2e.ts";
import { activeOutputs, bwrapLeftovers, dockerContainerIds, dockerLeftovers, sandboxedProcesses } from "./support.ts";

const API_KEY = "sk-ant-api03-crash-runtime-host-0123456789";
const MODEL_KEY = "sk-scripted-crash-runtime-host";
const USAGE = { input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 };
const REPORT = "final deliverable\n";

const bash = (label: string, match: TurnInput["match"], command: string): TurnInput => ({
  label,
  match,
  response: { content: [{ type: "tool_use", name: "bash", input: { command } }], usage: USAGE },
});
const say = (label: string, after: string, text: string): TurnInput => ({
  label,
  match: { tool_result_contains: after },
  response: { content: [{ type: "text", text }], usage: USAGE },
});

const SCRIPT: TurnInput[] = [
  bash(
    "write",
    { last_user_text_contains: "FIRST" },
    `echo one > /workspace/notes.txt && printf 'final deliverable\\n' > /mnt/session/outputs/report.md && echo WROTE-OK`,
  ),
  say("first-done", "WROTE-OK", "wrote"),
  // Run twice: killed mid-way the first time, re-run after the restart. Its output tells which workspace it saw.
  bash(
    "crash-me",
    { last_user_text_contains: "SECOND" },
    "if [ -e /workspace/partial.txt ]; then echo SAW-PARTIAL; else echo CLEAN; fi; echo partial > /workspace/partial.txt; cat /workspace/notes.txt; echo HOST=$(hostname); sleep 3; echo SECOND-OK",
  ),
  say("second-done", "SECOND-OK", "done"),
];

/** Files named `name` in any of the runtime host's workspace bindings (host directories bound at /workspace). */
async function inWorkspaces(dataDir: string, name: string): Promise<boolean> {
  const root = join(dataDir, "runtime-host", "workspaces");
  for (const binding of await readdir(root).catch(() => [] as string[])) {
    if (
      await stat(join(root, binding, "workspace", name)).then(
        () => true,
        () => false,
      )
    )
      return true;
  }
  return false;
}

describe.each<RuntimeHostDriver>(["bubblewrap", "docker"])("kill -9 of openma serve mid-turn with a %s sandbox", (driver) => {
  let model: ScriptedModel;
  let store: TestStorage;
  let srv: CrashableServer;

  beforeAll(async () => {
    model = await startScriptedModel({ apiKey: MODEL_KEY, script: SCRIPT });
    store = await openTestStorage("postgres");
    srv = await crashableServer(store, API_KEY, {
      OPENMA_BRAIN: "on",
      OPENMA_MODEL_BASE_URL: model.url,
      OPENMA_MODEL_API_KEY: MODEL_KEY,
      OPENMA_RUNTIME_HOST_SANDBOX: driver,
      // Short leases so the restart reclaims within seconds.
      OPENMA_WORK_TTL_SECONDS: "4",
      OPENMA_RUNTIME_FENCE_TTL_MS: "4000",
      OPENMA_WORKER_MAX_IDLE_MS: "300",
      // Kept in memory for a failure's message (the test never prints them otherwise).
      LOG_LEVEL: "info",
    });
  });
  afterAll(async () => {
    await srv?.close();
    await store?.cleanup();
    await model?.close();
  });

  it("restores the last published workspace in a fresh sandbox, completes, and leaves nothing behind", async () => {
    try {
      await crashAndRecover();
    } catch (err) {
      // The server's own account of what happened, only when the test fails.
      throw new Error(
        `${err instanceof Error ? err.stack : String(err)}\n--- openma serve output (tail) ---\n${srv.logs().slice(-30_000)}`,
      );
    }
  }, 300_000);

  async function crashAndRecover(): Promise<void> {
    await srv.start();
    const { client } = srv;
    const env = await createSelfHostedEnvironment(client, `crash-${driver}`);
    const agent = await client.beta.agents.create({ name: "hands", model: "claude-test-1", tools: [{ type: "agent_toolset_20260401" }] });
    const session = await client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    const scope = { environmentId: env.id, sessionId: session.id };
    const { fences } = sqlRuntimePorts(store.storage.db, systemClock);
    const active = () => fences.active({ scope, signal: AbortSignal.timeout(10_000) });
    // The environment key exists only now: restart with the runtime host embedded.
    await srv.stop();
    const runtimeHostEnv = { OPENMA_RUNTIME_HOST_ENVIRONMENT_ID: env.id, ANTHROPIC_ENVIRONMENT_KEY: env.key };
    await srv.start(runtimeHostEnv);

    await sendAndWait(client, session.id, [{ type: "user.message", content: [{ type: "text", text: "FIRST" }] }], endTurnIdle);
    const firstPublished = await eventually(async () => {
      const a = await active();
      return a?.outputs ? a : null;
    }, "the first turn's publication");
    // The embedded runtime host's metrics: the first turn's workspace was checkpointed, its bytes uploaded.
    const firstScrape = await eventually(async () => {
      const body = await scrape(srv.baseURL, API_KEY);
      return total(body, "openma_workspace_persistence_duration_seconds_count", { operation: "checkpoint", outcome: "created" }) > 0
        ? body
        : null;
    }, "the first checkpoint in /metrics");
    expect(total(firstScrape, "openma_runtime_blob_bytes_total", { direction: "upload" })).toBeGreaterThan(0);

    // Second turn: wait until its tool has written partial.txt inside the sandbox, then crash.
    await client.beta.sessions.events.send(session.id, { events: [{ type: "user.message", content: [{ type: "text", text: "SECOND" }] }] });
    await eventually(() => inWorkspaces(srv.dataDir, "partial.txt"), "the second tool call to be running");
    // While the worker runs: no sandboxed process holds the environment key (only the server's configuration does).
    const sandboxed = await sandboxedProcesses();
    expect(sandboxed.length).toBeGreaterThan(0);
    expect(sandboxed.filter((p) => p.argv.includes(env.key) || p.environ.includes(env.key)).map((p) => p.argv)).toEqual([]);
    if (driver === "docker") {
      for (const id of await dockerContainerIds(session.id)) {
        const info = await connectDocker().getContainer(id).inspect();
        expect(JSON.stringify([info.Config.Env, info.Config.Cmd, info.Args])).not.toContain(env.key);
      }
    }
    await srv.kill9();
    // A container outlives its host (the restart must sweep it); a bwrap sandbox dies with it.
    const killedContainers = driver === "docker" ? await dockerContainerIds(session.id) : [];
    if (driver === "docker") expect(killedContainers).not.toEqual([]);
    else await eventually(async () => (await bwrapLeftovers([srv.dataDir])).length === 0, "the bwrap sandbox to die with its host");

    await srv.start(runtimeHostEnv);
    const events = await eventually(
      async () => {
        const all = await allEvents(client, session.id);
        const last = all.at(-1);
        return last && endTurnIdle(last) && all.some((e) => e.type === "agent.message" && resultText(e) === "done") ? all : null;
      },
      "the session to complete after the restart",
      150_000,
    );

    const secondUse = events.find((e) => e.type === "agent.tool_use" && JSON.stringify(e.input).includes("SECOND-OK")) as LoggedEvent;
    const results = events.filter((e) => e.type === "user.tool_result" && e.tool_use_id === secondUse.id);
    expect(results).toHaveLength(1); // applied once, though the tool started twice
    const text = resultText(results[0] as LoggedEvent);
    // The fresh sandbox held the published notes.txt and not the unpublished partial.txt.
    expect(text).toContain("CLEAN");
    expect(text).toContain("one");
    expect(text).toContain("SECOND-OK");
    // ...and it is the re-run in the new sandbox, not the killed container finishing late (its hostname is its id).
    for (const id of killedContainers) expect(text).not.toContain(`HOST=${id}`);

    const final = await eventually(async () => {
      const a = await active();
      return a && a.generation > firstPublished.generation && a.revision > firstPublished.revision ? a : null;
    }, "the restarted run's publication");
    expect(final.generation).toBeGreaterThan(firstPublished.generation);
    // The restarted server restored the published workspace: its metrics show the restore and the bytes read.
    const restarted = await scrape(srv.baseURL, API_KEY);
    expect(
      total(restarted, "openma_workspace_persistence_duration_seconds_count", { operation: "restore", outcome: "materialized" }),
    ).toBeGreaterThan(0);
    expect(total(restarted, "openma_runtime_blob_bytes_total", { direction: "download" })).toBeGreaterThan(0);
    // The server keeps its blobs under its own data dir.
    const blobs = new FsBlobStore(join(srv.dataDir, "blobs"));
    const report = (await activeOutputs({ db: store.storage.db, blobs }, scope)).find((f) => f.path === "report.md");
    expect(report).toMatchObject({ size: REPORT.length, sha256: createHash("sha256").update(REPORT).digest("hex") });

    if (driver === "docker") await eventually(async () => (await dockerLeftovers(session.id)).length === 0, "no container of the session");
    // Every bwrap sandbox of this server binds a directory under its data dir: none may be left.
    else await eventually(async () => (await bwrapLeftovers([srv.dataDir])).length === 0, "no bwrap process of the session");
  }
});
