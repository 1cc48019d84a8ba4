/**
 * A session served by a launched MicroVM, end to end (both backends): the
 * official SDK creates a session on a self-hosted environment; the activation
 * worker launches a VM for it through the official AWS client and the
 * stand-in; inside the VM (a real local sandbox) the in-VM worker polls the
 * environment's Work with the key its image carries, claims only its
 * session's item, and the official EnvironmentWorker runs the turn's bash
 * tool, heartbeats and force-stops the item. The VM ends when its worker
 * exits. Completion is awaited on the session's stream, never on sleeps.
 */
import { ActivationWorker, AwsMicrovmLauncherPort, SqlActivationIntentStore, vmWorkerImage } from "@openma/activation";
import type { ScriptedModel } from "@openma/scripted-model";
import { type MicrovmsStandIn, startMicrovmsStandIn } from "@openma/standin-aws-microvms";
import { systemClock } from "@openma/storage";
import { BACKENDS } from "@openma/storage/testing";
import { afterEach, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";
import { until } from "../support/until.ts";
import { allEvents, createSelfHostedEnvironment, endTurnIdle, resultText, sendAndWait } from "../support/worker-e2e.ts";
import { SERVED_IN_THE_VM, startVmTurnModel } from "./vm-turn.ts";

const MODEL_KEY = "sk-scripted-microvm";

describe.each(BACKENDS)("a session served by a launched MicroVM on %s", (dialect) => {
  let model: ScriptedModel | undefined;
  let t: TestServer | undefined;
  let standIn: MicrovmsStandIn | undefined;
  afterEach(async () => {
    await standIn?.close();
    await t?.close();
    await model?.close();
  });

  it("launches one VM whose worker claims, serves and stops the session's Work", async () => {
    model = await startVmTurnModel(MODEL_KEY);
    t = await startTestServer(dialect, { OPENMA_BRAIN: "on", OPENMA_MODEL_BASE_URL: model.url, OPENMA_MODEL_API_KEY: MODEL_KEY });
    const { client } = t;
    const env = await createSelfHostedEnvironment(client, "microvms");
    standIn = await startMicrovmsStandIn({ images: { "openma-vm-worker": await vmWorkerImage(env.key) } });
    const agent = await client.beta.agents.create({ name: "vm", model: "claude-test-1", tools: [{ type: "agent_toolset_20260401" }] });
    const session = await client.beta.sessions.create({ agent: agent.id, environment_id: env.id });

    const launcher = new AwsMicrovmLauncherPort({
      imageIdentifier: "openma-vm-worker",
      apiUrl: t.baseURL,
      workerMaxIdleMs: 200,
      client: { region: standIn.region, endpoint: standIn.url, credentials: standIn.credentials },
    });
    const activation = new ActivationWorker({
      store: new SqlActivationIntentStore(t.store.storage.db, { clock: systemClock }),
      launcher,
      ownerId: "activation-test",
    });
    try {
      const launched = activation.activate({
        eventId: `run_${session.id}`,
        environmentId: env.id,
        workspaceId: "default",
        sessionId: session.id,
      });
      const seen = await sendAndWait(
        client,
        session.id,
        [{ type: "user.message", content: [{ type: "text", text: "IN_THE_VM please" }] }],
        endTurnIdle,
      );
      expect(seen.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "end_turn" } });
      const outcome = await launched;
      expect(outcome.type).toBe("launched");
      const runtimeId = (outcome as { runtimeId: string }).runtimeId;

      const events = await allEvents(client, session.id);
      const result = events.find((e) => e.type === "user.tool_result");
      expect(resultText(result as never)).toMatch(SERVED_IN_THE_VM);
      expect(standIn.launches()).toBe(1);
      // The worker stops its item and exits; the VM ends with it and its sandbox is gone.
      await until(async () => standIn?.table.get(runtimeId)?.state === "TERMINATED", "the VM to end after its worker exits");
      expect(standIn.table.get(runtimeId)?.stateReason).toBe("the run hook exited with code 0");
      expect(await standIn.boxes.containers()).toEqual([]);
      const work = await (t as TestServer).clientWith(env.key).beta.environments.work.list(env.id);
      expect(work.data.map((w) => [w.data.id, w.state])).toEqual([[session.id, "stopped"]]);
    } finally {
      activation.stop();
      launcher.close();
    }
  });
});
