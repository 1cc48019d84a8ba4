/**
 * GKE dispatch against `openma serve` (SQLite) and the Kubernetes stand-in,
 * whose warm pods are real Docker containers.
 *
 * - A turn served in the pod: the official SDK creates a session on a
 *   self-hosted environment and sends a message; the dispatcher binds a warm
 *   pod, acks the item with its own token and starts the official worker in
 *   the pod, which runs the turn's bash tool there, heartbeats and stops the
 *   item; the dispatcher then deletes the claim. Debian's kubectl watches the
 *   claim from its creation to its deletion.
 * - Crash, reuse, reaping and the cap: the dispatcher process is killed with
 *   SIGKILL while its claim waits for a pod; a restarted dispatcher reuses
 *   that claim (one live claim) and hands the item to the pod; a pod that
 *   never heartbeats lets the item's lease lapse (the server's clock is moved
 *   past it), the Work comes back and gets a new claim while the spent one is
 *   reaped (still one); past the cap the Work is stopped and no claim is left.
 *
 * Completion is awaited on the session's stream, the store's events, kubectl's
 * watch and the dispatcher's passes (each a server-side long poll), never on
 * sleeps.
 */
import { execFile, spawn } from "node:child_process";
import { promisify } from "node:util";
import type Anthropic from "@anthropic-ai/sdk";
import { defaultKubeConfig, GkeDispatcher, HANDOFF_ANNOTATION, KubeCluster, LABEL_DISPATCH } from "@openma/dispatch-gke";
import { buildWorkerBundle, type WorkerBundle } from "@openma/runtime-host";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { type KObject, type KubernetesStandIn, startKubernetesStandIn } from "@openma/standin-kubernetes";
import { debianKubectl } from "@openma/standin-kubernetes/kubectl";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";
import { until } from "../support/until.ts";
import { allEvents, createSelfHostedEnvironment, endTurnIdle, resultText, sendAndWait } from "../support/worker-e2e.ts";

const run = promisify(execFile);
const MODEL_KEY = "sk-scripted-gke-dispatch";
const USAGE = { input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 };
const NS = "default";
/** The server's first-beat grace (packages/api work-queue.ts): an acked item nobody heartbeats is offered again after it. */
const FIRST_BEAT_GRACE_MS = 90_000;
const BRAIN = { OPENMA_BRAIN: "on", OPENMA_MODEL_API_KEY: MODEL_KEY };

let model: ScriptedModel;
let standIn: KubernetesStandIn;
let bundle: Promise<WorkerBundle>;

const claimType = () => standIn.types.byKind("SandboxClaim");
const liveClaims = (environmentId?: string) =>
  standIn.store
    .list(claimType(), NS, () => true)
    .filter((c) => environmentId === undefined || c.metadata.labels?.["openma.dev/environment-id"] === environmentId);

async function kubectl(...args: string[]): Promise<string> {
  const { stdout } = await run(debianKubectl(), ["--kubeconfig", standIn.kubeconfigPath, ...args], { timeout: 30_000 });
  return stdout;
}

/** Resolves when the store holds a claim for which `test` holds (subscribed before looking, so nothing is missed). */
function claimWhere(test: (claim: KObject) => boolean): Promise<KObject> {
  return new Promise((resolve) => {
    const unsubscribe = standIn.store.subscribe((event) => {
      if (event.resource === claimType() && event.type !== "DELETED" && test(event.object)) {
        unsubscribe();
        resolve(event.object);
      }
    });
    const found = liveClaims().find(test);
    if (found) {
      unsubscribe();
      resolve(found);
    }
  });
}

/** Resolves when no claim of the environment is left (subscribed before looking). */
function noClaimsOf(environmentId: string): Promise<void> {
  return new Promise((resolve) => {
    const check = () => {
      if (liveClaims(environmentId).length > 0) return false;
      unsubscribe();
      resolve();
      return true;
    };
    const unsubscribe = standIn.store.subscribe((event) => {
      if (event.resource === claimType() && event.type === "DELETED") check();
    });
    check();
  });
}

async function createPool(name: string, replicas: number): Promise<void> {
  const pools = standIn.types.byKind("SandboxWarmPool");
  standIn.store.create(pools, NS, { metadata: { name }, spec: { replicas, sandboxTemplateRef: { name: "openma-worker" } } });
  await standIn.controller.settled();
}

function dispatcher(t: TestServer, env: { id: string; key: string }, extra: Partial<ConstructorParameters<typeof GkeDispatcher>[0]> = {}) {
  return new GkeDispatcher({
    client: t.client,
    environmentId: env.id,
    environmentKey: env.key,
    cluster: new KubeCluster({ namespace: NS, kubeConfig: defaultKubeConfig() }),
    warmPool: "warm",
    apiUrl: t.baseURL,
    bundle: () => bundle,
    workerMaxIdleMs: 200,
    ...extra,
  });
}

/** Passes until one dispatches something; each pass long-polls the queue, so this waits on the server, not on a clock. */
async function dispatchNext(d: GkeDispatcher) {
  for (;;) {
    const outcome = await d.pass(AbortSignal.timeout(60_000));
    if (outcome.type !== "idle") return outcome;
  }
}

async function sessionOn(client: Anthropic, env: { id: string }, name: string) {
  const agent = await client.beta.agents.create({ name, model: "claude-test-1", tools: [{ type: "agent_toolset_20260401" }] });
  return client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
}

beforeAll(async () => {
  model = await startScriptedModel({
    apiKey: MODEL_KEY,
    script: [
      {
        label: "probe",
        match: { last_user_text_contains: "WHERE_AM_I" },
        response: {
          // Only the pod has the launcher the dispatcher installed; the worker's workdir is the pod's /workspace.
          content: [
            {
              type: "tool_use",
              name: "bash",
              input: { command: 'test -f /tmp/.openma/launcher/ama-worker.mjs && echo "in-the-pod $(pwd)"' },
            },
          ],
          usage: USAGE,
        },
      },
      {
        label: "done",
        match: { tool_result_for: "bash" },
        response: { content: [{ type: "text", text: "served from the pod" }], usage: USAGE },
      },
    ],
  });
  standIn = await startKubernetesStandIn();
  vi.stubEnv("KUBECONFIG", standIn.kubeconfigPath);
  bundle = buildWorkerBundle();
  standIn.store.create(standIn.types.byKind("SandboxTemplate"), NS, {
    metadata: { name: "openma-worker" },
    spec: { podTemplate: { spec: { containers: [{ name: "worker", image: "openma/sandbox-base" }] } } },
  });
});
afterAll(async () => {
  vi.unstubAllEnvs();
  await standIn?.close();
  await model?.close();
});

describe("GKE dispatch through the Kubernetes stand-in", () => {
  it("a session's turn is served by the official worker in a warm pod, and its claim is deleted at the end", {
    timeout: 180_000,
  }, async () => {
    const t = await startTestServer("sqlite", { ...BRAIN, OPENMA_MODEL_BASE_URL: model.url });
    const stop = new AbortController();
    let watch: ReturnType<typeof spawn> | undefined;
    let running: Promise<void> | undefined;
    try {
      await createPool("warm", 1);
      const env = await createSelfHostedEnvironment(t.client, "gke-turn");
      const session = await sessionOn(t.client, env, "gke-turn");

      // kubectl watches the environment's claims from before the first one exists until after the last is gone.
      watch = spawn(
        debianKubectl(),
        [
          "--kubeconfig",
          standIn.kubeconfigPath,
          "get",
          "sandboxclaims",
          "--watch",
          "--output-watch-events",
          "-l",
          `openma.dev/environment-id=${env.id}`,
        ],
        { stdio: ["ignore", "pipe", "pipe"] },
      );
      let watched = "";
      watch.stdout?.on("data", (chunk: Buffer) => {
        watched += chunk.toString("utf8");
      });

      // kubectl lists, then watches from that list: dispatch only once its watch is open, or a fast turn can
      // create and delete the claim before kubectl looks (suspected when this test failed in 6 s on a loaded CI run).
      const watchOpen = (r: { method: string; path: string; query: string }) =>
        r.method === "GET" && r.path.endsWith("/sandboxclaims") && /[?&]watch=(true|1)\b/.test(r.query);
      await until(async () => standIn.requests.some(watchOpen), "kubectl's watch on the claims to open");
      running = dispatcher(t, env).run(stop.signal);
      const seen = await sendAndWait(
        t.client,
        session.id,
        [{ type: "user.message", content: [{ type: "text", text: "WHERE_AM_I" }] }],
        endTurnIdle,
      );
      expect(seen.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "end_turn" } });
      const events = await allEvents(t.client, session.id);
      const result = events.find((e) => e.type === "user.tool_result");
      expect(resultText(result as never)).toBe("in-the-pod /workspace");
      expect(events.filter((e) => e.type === "agent.message").map((e) => resultText(e))).toEqual(["served from the pod"]);

      // The worker stops its item when the session is idle; the dispatcher's next pass deletes the claim.
      await noClaimsOf(env.id);
      const work = await t.clientWith(env.key).beta.environments.work.list(env.id);
      expect(work.data.map((w) => [w.data.id, w.state])).toEqual([[session.id, "stopped"]]);
      const ended = watch.exitCode !== null ? Promise.resolve() : new Promise((resolve) => watch?.once("exit", resolve));
      watch.kill("SIGTERM");
      await ended;
      // kubectl saw the claim bound and Ready while it lived, then its deletion.
      const name = /ADDED\s+(openma-\S+)/.exec(watched)?.[1];
      expect(name).toMatch(/^openma-work-\S+-1$/);
      expect(watched).toMatch(new RegExp(`(ADDED|MODIFIED)\\s+${name}\\s+True\\s+\\S+\\s+DependenciesReady`));
      expect(watched).toMatch(new RegExp(`DELETED\\s+${name}\\s`));
    } finally {
      stop.abort();
      await running;
      watch?.kill("SIGKILL");
      await t.close();
    }
  });

  it("after kill -9 mid-dispatch keeps one live claim per Work, reaps stale claims, and stops the Work past the cap", {
    timeout: 180_000,
  }, async () => {
    // The server's clock: moved past a lease instead of waiting for it.
    let skewMs = 0;
    const t = await startTestServer(
      "sqlite",
      { ...BRAIN, OPENMA_MODEL_BASE_URL: model.url },
      { clock: { now: () => Date.now() + skewMs } },
    );
    try {
      await createPool("held", 0);
      const env = await createSelfHostedEnvironment(t.client, "gke-crash");
      const session = await sessionOn(t.client, env, "gke-crash");
      await t.client.beta.sessions.events.send(session.id, {
        events: [{ type: "user.message", content: [{ type: "text", text: "WHERE_AM_I" }] }] as never,
      });

      // A dispatcher process claims for the Work; the pool has no pod, so it waits, and is killed there.
      const created = claimWhere((c) => c.metadata.labels?.["openma.dev/session-id"] === session.id);
      const child = spawn(process.execPath, ["--import", "tsx", "packages/dispatch-gke/src/bin.ts"], {
        env: {
          ...process.env,
          OPENMA_API_URL: t.baseURL,
          ANTHROPIC_ENVIRONMENT_ID: env.id,
          ANTHROPIC_ENVIRONMENT_KEY: env.key,
          OPENMA_GKE_WARM_POOL: "held",
          OPENMA_GKE_ONE_PASS: "1",
        },
        stdio: ["ignore", "pipe", "pipe"],
      });
      const exited = new Promise<NodeJS.Signals | null>((resolve) => child.once("exit", (_code, signal) => resolve(signal)));
      const first = await created;
      child.kill("SIGKILL");
      expect(await exited).toBe("SIGKILL");
      expect(liveClaims(env.id).map((c) => c.metadata.name)).toEqual([first.metadata.name]);
      expect(first.metadata.annotations?.[HANDOFF_ANNOTATION]).toBeUndefined();

      // Restarted (in process), with a pod available now, an immediate reclaim window (the killed one never acked)
      // and a cap of 2. Its pods are told a control plane that does not answer, so no worker ever heartbeats.
      standIn.store.patch(
        standIn.types.byKind("SandboxWarmPool"),
        NS,
        "held",
        (o) => ({ ...o, spec: { ...(o.spec as object), replicas: 1 } }),
        null,
      );
      const d = dispatcher(t, env, { warmPool: "held", reclaimOlderThanMs: 0, maxDispatches: 2, apiUrl: "http://127.0.0.1:9/" });
      const resumed = await dispatchNext(d);
      expect(resumed).toMatchObject({ type: "dispatched", claim: first.metadata.name, attempt: 1, reusedClaim: true });
      expect(liveClaims(env.id).map((c) => c.metadata.name)).toEqual([first.metadata.name]);
      // Debian's kubectl sees the live claim, bound and Ready.
      expect(await kubectl("get", "sandboxclaims")).toMatch(new RegExp(`${first.metadata.name}\\s+True\\s+\\S+\\s+DependenciesReady`));
      // The dispatcher acked the item: it is held by its lease, not offered again while that runs.
      const workId = (resumed as { workId: string }).workId;
      expect((await t.client.beta.environments.work.retrieve(workId, { environment_id: env.id })).state).toBe("starting");
      expect(await d.pass(AbortSignal.timeout(10_000))).toEqual({ type: "idle" });

      // No heartbeat came: past the first-beat grace the Work is offered again and gets a new claim.
      skewMs += FIRST_BEAT_GRACE_MS + 1000;
      const second = await dispatchNext(d);
      expect(second).toMatchObject({ type: "dispatched", attempt: 2, reusedClaim: false });
      await standIn.controller.settled();
      // The spent claim was reaped: one live claim for the Work.
      expect(liveClaims(env.id).map((c) => c.metadata.labels?.[LABEL_DISPATCH])).toEqual(["2"]);

      skewMs += FIRST_BEAT_GRACE_MS + 1000;
      const capped = await dispatchNext(d);
      expect(capped).toMatchObject({ type: "capped", attempts: 2 });
      await standIn.controller.settled();
      expect(liveClaims(env.id)).toEqual([]);
      const work = await t.client.beta.environments.work.retrieve((capped as { workId: string }).workId, { environment_id: env.id });
      expect(work.state).toBe("stopped");
      // Nothing else to dispatch for this environment.
      expect(await d.pass(AbortSignal.timeout(10_000))).toEqual({ type: "idle" });
    } finally {
      await t.close();
    }
  });
});
