/**
 * The ama_worker lane on a cloud driver, with a crash: `openma serve`
 * (OPENMA_SANDBOX=<vendor>, the vendor's own variables pointing at its
 * stand-in) embeds the runtime host, which runs each claimed session in a
 * remote sandbox with the unmodified official EnvironmentWorker inside it
 * (the launcher and SDK bundle written in, the control plane reached over
 * the network). Turn 1 writes /workspace/notes.txt and the deliverable
 * report.md, published at its boundary. Mid-way through turn 2's tool call,
 * which has just written /workspace/partial.txt in the remote sandbox, the
 * server is `kill -9`ed. On restart the host reaps the sandbox its
 * predecessor left at the provider (listed by its label), the item is
 * reclaimed, and a FRESH remote sandbox restores the last PUBLISHED
 * workspace: the re-run tool sees notes.txt and not partial.txt. The
 * session completes, the manifest lists report.md with its sha256, the
 * tool result is recorded once, no sandboxed process ever held the
 * environment key, and the stand-in holds no sandbox at the end.
 *
 * Shared by one test file per vendor.
 */
import { createHash } from "node:crypto";
import { join } from "node:path";
import { eventually } from "@openma/driver-suite/eventually";
import { sqlRuntimePorts } from "@openma/host";
import { type ScriptedModel, startScriptedModel, type TurnInput } from "@openma/scripted-model";
import type { CloudStandIn } from "@openma/standin-kit";
import { systemClock } from "@openma/storage";
import { FsBlobStore } from "@openma/storage/blobs";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { activeOutputs, sandboxedProcesses } from "../runtime-host/support.ts";
import { startVendorStandIn, type Vendor } from "../support/cloud.ts";
import { type CrashableServer, crashableServer } from "../support/crash-server.ts";
import { allEvents, createSelfHostedEnvironment, endTurnIdle, type LoggedEvent, resultText, sendAndWait } from "../support/worker-e2e.ts";

const API_KEY = "sk-ant-api03-crash-cloud-runtime-host-0123456789";
const MODEL_KEY = "sk-scripted-crash-cloud";
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
    "if [ -e /workspace/partial.txt ]; then echo SAW-PARTIAL; else echo CLEAN; fi; echo partial > /workspace/partial.txt; cat /workspace/notes.txt; echo BOX=$(hostname); sleep 3; echo SECOND-OK",
  ),
  say("second-done", "SECOND-OK", "done"),
];

/** Whether some sandbox of the stand-in has `path` (asked of its container, never through the driver). */
async function anySandboxHas(standIn: CloudStandIn, path: string): Promise<boolean> {
  for (const box of standIn.boxes.all()) {
    const seen = await box.tools
      .exec({ command: ["test", "-e", path], timeoutMs: 30_000, signal: AbortSignal.timeout(30_000) })
      .catch(() => null);
    if (seen?.type === "exited" && seen.exitCode === 0) return true;
  }
  return false;
}

/**
 * The server's output for a failure message, without the empty work polls: four pollers answered
 * about once a second each fill any tail within seconds and crowd out what the runtime host said.
 */
function outputTail(output: string): string {
  const emptyPoll = /"path":"[^"]*\/work\/poll","status":204/;
  return output
    .split("\n")
    .filter((line) => !emptyPoll.test(line))
    .join("\n")
    .slice(-30_000);
}

export function describeCloudCrash(vendor: Vendor): void {
  describe(`kill -9 of openma serve mid-turn with ${vendor} sandboxes`, () => {
    let model: ScriptedModel;
    let store: TestStorage;
    let standIn: CloudStandIn;
    let srv: CrashableServer;
    /** The session under test, once created (for a failure's diagnosis). */
    let sessionId: string | undefined;

    beforeAll(async () => {
      standIn = await startVendorStandIn(vendor);
      model = await startScriptedModel({ apiKey: MODEL_KEY, script: SCRIPT });
      store = await openTestStorage("postgres");
      srv = await crashableServer(store, API_KEY, {
        OPENMA_BRAIN: "on",
        OPENMA_MODEL_BASE_URL: model.url,
        OPENMA_MODEL_API_KEY: MODEL_KEY,
        OPENMA_SANDBOX: vendor,
        ...standIn.env,
        // Short leases so the restart reclaims within seconds.
        OPENMA_WORK_TTL_SECONDS: "4",
        OPENMA_RUNTIME_FENCE_TTL_MS: "4000",
        OPENMA_WORKER_MAX_IDLE_MS: "300",
        LOG_LEVEL: "info",
      });
    });
    afterAll(async () => {
      await srv?.close();
      await store?.cleanup();
      await model?.close();
      await standIn?.close();
    });

    it("restores the last published workspace in a fresh remote sandbox, completes, and leaves nothing at the provider", async () => {
      try {
        await crashAndRecover();
      } catch (err) {
        throw new Error(
          `${err instanceof Error ? err.stack : String(err)}\n--- work items and fence of the session ---\n${await queueState()}` +
            `\n--- openma serve output (tail, empty work polls left out) ---\n${outputTail(srv.logs())}`,
        );
      }
    }, 300_000);

    /** Which Work the session had and who held its fence: tells a run that never started from one that hung. */
    async function queueState(): Promise<string> {
      if (sessionId === undefined) return "(no session yet)";
      const { db } = store.storage;
      const work = await db
        .selectFrom("work_items")
        .select(["id", "state", "created_at", "acknowledged_at", "latest_heartbeat_at", "stopped_at", "polled_by", "lease_expires_at"])
        .where("session_id", "=", sessionId)
        .orderBy("created_at")
        .execute();
      const fence = await db
        .selectFrom("runtime_fences")
        .select(["generation", "owner_id", "acquired_at_ms", "expires_at_ms", "released_at_ms", "revision"])
        .where("session_id", "=", sessionId)
        .execute();
      return JSON.stringify({ now: new Date().toISOString(), work, fence }, null, 1);
    }

    async function crashAndRecover(): Promise<void> {
      await srv.start();
      const { client } = srv;
      const env = await createSelfHostedEnvironment(client, `crash-${vendor}`);
      const agent = await client.beta.agents.create({ name: "hands", model: "claude-test-1", tools: [{ type: "agent_toolset_20260401" }] });
      const session = await client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
      sessionId = session.id;
      const scope = { environmentId: env.id, sessionId: session.id };
      const { fences } = sqlRuntimePorts(store.storage.db, systemClock);
      const active = () => fences.active({ scope, signal: AbortSignal.timeout(10_000) });
      await srv.stop();
      const runtimeHostEnv = { OPENMA_RUNTIME_HOST_ENVIRONMENT_ID: env.id, ANTHROPIC_ENVIRONMENT_KEY: env.key };
      await srv.start(runtimeHostEnv);

      await sendAndWait(client, session.id, [{ type: "user.message", content: [{ type: "text", text: "FIRST" }] }], endTurnIdle);
      const firstPublished = await eventually(async () => {
        const a = await active();
        return a?.outputs ? a : null;
      }, "the first turn's publication");

      await client.beta.sessions.events.send(session.id, {
        events: [{ type: "user.message", content: [{ type: "text", text: "SECOND" }] }],
      });
      await eventually(
        () => anySandboxHas(standIn, "/workspace/partial.txt"),
        "the second tool call to be running in the remote sandbox",
        120_000,
      );
      const sandboxed = await sandboxedProcesses();
      expect(sandboxed.length).toBeGreaterThan(0);
      expect(sandboxed.filter((p) => p.argv.includes(env.key) || p.environ.includes(env.key)).map((p) => p.argv)).toEqual([]);
      const before = standIn.boxes.all().map((b) => b.id);
      expect(before).toHaveLength(1);
      await srv.kill9();
      // The remote sandbox outlives its host: it is still at the provider until the restart reaps it.
      expect(standIn.boxes.all().map((b) => b.id)).toEqual(before);

      await srv.start(runtimeHostEnv);
      const events = await eventually(
        async () => {
          const all = await allEvents(client, session.id);
          const last = all.at(-1);
          return last && endTurnIdle(last) && all.some((e) => e.type === "agent.message" && resultText(e) === "done") ? all : null;
        },
        "the session to complete after the restart",
        180_000,
      );
      // The predecessor's sandbox was reaped at the provider, not left to run.
      expect(standIn.boxes.get(before[0] as string)).toBeUndefined();

      const secondUse = events.find((e) => e.type === "agent.tool_use" && JSON.stringify(e.input).includes("SECOND-OK")) as LoggedEvent;
      const results = events.filter((e) => e.type === "user.tool_result" && e.tool_use_id === secondUse.id);
      expect(results).toHaveLength(1);
      const text = resultText(results[0] as LoggedEvent);
      expect(text).toContain("CLEAN");
      expect(text).toContain("one");
      expect(text).toContain("SECOND-OK");

      const final = await eventually(async () => {
        const a = await active();
        return a && a.generation > firstPublished.generation && a.revision > firstPublished.revision ? a : null;
      }, "the restarted run's publication");
      expect(final.generation).toBeGreaterThan(firstPublished.generation);
      const blobs = new FsBlobStore(join(srv.dataDir, "blobs"));
      const report = (await activeOutputs({ db: store.storage.db, blobs }, scope)).find((f) => f.path === "report.md");
      expect(report).toMatchObject({ size: REPORT.length, sha256: createHash("sha256").update(REPORT).digest("hex") });

      await eventually(async () => standIn.live() === 0, "no sandbox of the session left at the provider", 60_000);
      await eventually(
        async () => (await standIn.boxes.containers()).length === 0,
        "no container of the stand-in left on the engine",
        30_000,
      ).catch(async (err: unknown) => {
        throw new Error(`${String(err)}: ${JSON.stringify(await standIn.boxes.containers())}`);
      });
    }
  });
}
