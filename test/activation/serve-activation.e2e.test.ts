/**
 * Activation wired into `openma serve` (docs/activation.md): a second
 * `openma serve` process on the same Postgres database, configured with
 * OPENMA_ACTIVATION_ENVIRONMENTS for a self-hosted environment, turns each
 * Work of that environment into an activation intent and launches it at the
 * AWS Lambda MicroVMs stand-in through the official client (region,
 * credentials and endpoint from the AWS variables). The official SDK creates
 * the session and sends the message; nobody calls the activation API by
 * hand; the in-VM worker polls, acks and serves the turn's bash tool in the
 * VM. Completion is awaited on the session's stream, never on sleeps.
 */
import { SqlActivationIntentStore, vmWorkerImage } from "@openma/activation";
import type { ScriptedModel } from "@openma/scripted-model";
import { type MicrovmsStandIn, startMicrovmsStandIn } from "@openma/standin-aws-microvms";
import { systemClock } from "@openma/storage";
import { afterEach, describe, expect, it } from "vitest";
import { type ChildServer, startServeProcess } from "../support/child-server.ts";
import { startTestServer, TEST_API_KEY, type TestServer } from "../support/server.ts";
import { allEvents, createSelfHostedEnvironment, endTurnIdle, resultText, sendAndWait } from "../support/worker-e2e.ts";
import { SERVED_IN_THE_VM, startVmTurnModel } from "./vm-turn.ts";

const MODEL_KEY = "sk-scripted-serve-activation";

describe("openma serve with OPENMA_ACTIVATION_ENVIRONMENTS", () => {
  let model: ScriptedModel | undefined;
  let t: TestServer | undefined;
  let activating: ChildServer | undefined;
  let standIn: MicrovmsStandIn | undefined;
  afterEach(async () => {
    await activating?.close();
    await standIn?.close();
    await t?.close();
    await model?.close();
  });

  it("launches a MicroVM for each Work of a session it did not create, and the VM's worker serves the turn", {
    timeout: 180_000,
  }, async () => {
    model = await startVmTurnModel(MODEL_KEY);
    t = await startTestServer("postgres", { OPENMA_BRAIN: "on", OPENMA_MODEL_BASE_URL: model.url, OPENMA_MODEL_API_KEY: MODEL_KEY });
    const env = await createSelfHostedEnvironment(t.client, "serve-activation");
    standIn = await startMicrovmsStandIn({ images: { "openma-vm-worker": await vmWorkerImage(env.key) } });
    activating = await startServeProcess({
      apiKey: TEST_API_KEY,
      postgres: t.store,
      env: {
        ...standIn.env,
        OPENMA_BRAIN: "off",
        OPENMA_SCHEDULER: "off",
        OPENMA_WEBHOOKS: "off",
        OPENMA_AUTO_PROVISION: "off",
        OPENMA_ACTIVATION_ENVIRONMENTS: env.id,
        OPENMA_ACTIVATION_IMAGE: "openma-vm-worker",
        OPENMA_ACTIVATION_API_URL: t.baseURL,
        OPENMA_ACTIVATION_INTERVAL_MS: "200",
        OPENMA_WORKER_MAX_IDLE_MS: "200",
      },
    });

    const { client } = t;
    const agent = await client.beta.agents.create({ name: "vm", model: "claude-test-1", tools: [{ type: "agent_toolset_20260401" }] });
    const session = await client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    const seen = await sendAndWait(
      client,
      session.id,
      [{ type: "user.message", content: [{ type: "text", text: "IN_THE_VM please" }] }],
      endTurnIdle,
    );
    expect(seen.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "end_turn" } });
    const events = await allEvents(client, session.id);
    const result = events.find((e) => e.type === "user.tool_result");
    expect(resultText(result as never)).toMatch(SERVED_IN_THE_VM);

    // Every Work of the session got one intent (event id = Work id); each launched one VM at the stand-in, or was
    // cancelled because its Work stopped first. The served turn's Work is among the launched.
    const store = new SqlActivationIntentStore(t.store.storage.db, { clock: systemClock });
    const work = await t.clientWith(env.key).beta.environments.work.list(env.id);
    const intents = await Promise.all(work.data.map((w) => store.get(w.id)));
    expect(intents.every((i) => i !== undefined && i.sessionId === session.id)).toBe(true);
    const launched = intents.filter((i) => i?.state === "completed");
    expect(launched.length).toBeGreaterThan(0);
    expect(intents.filter((i) => i?.state !== "completed" && i?.state !== "cancelled")).toEqual([]);
    expect(new Set(launched.map((i) => i?.runtimeId)).size).toBe(launched.length);
    expect(standIn.launches()).toBe(launched.length);
    for (const intent of launched) expect(standIn.table.get(intent?.runtimeId as string)?.input.imageIdentifier).toBe("openma-vm-worker");
    await activating.waitForOutput(/activation launched/);
  });
});
