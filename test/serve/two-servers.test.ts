/**
 * Two `openma serve` processes on one Postgres sharing one Docker Engine
 * (issue 21): killing one (`kill -9`) never makes the other lose a sandbox
 * it uses. Sessions take a tool turn until both servers hold sandboxes
 * (the execution queue's owner ids name the process that ran a turn); then
 * one server is killed. Its containers are reaped by the survivor once its
 * owner leases expire; the survivor's containers stay, are the same
 * containers (by id, at the engine), and serve the next turn of their
 * sessions.
 */
import { connectDocker } from "@openma/driver-node-docker";
import { type ScriptedModel, startScriptedModel } from "@openma/scripted-model";
import { deploymentId } from "@openma/storage/sandbox-owners";
import { openTestStorage, type TestStorage } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hostProbes } from "../../apps/openma/src/sandbox.ts";
import { type ChildServer, startServeProcess } from "../support/child-server.ts";
import { TEST_API_KEY } from "../support/server.ts";
import { until } from "../support/until.ts";

const MODEL_KEY = "sk-scripted-two-servers";
const ENV = {
  // Warnings and errors only: a failure below prints the survivor's latest lines.
  LOG_LEVEL: "warn",
  OPENMA_BRAIN: "on",
  OPENMA_SANDBOX: "docker",
  OPENMA_MODEL_API_KEY: MODEL_KEY,
  OPENMA_AUTO_PROVISION: "off",
  OPENMA_EXECUTION_POLL_MS: "200",
  OPENMA_SANDBOX_LEASE_TTL_MS: "1500",
  OPENMA_SANDBOX_REAP_INTERVAL_MS: "250",
};

describe("two servers on one Postgres and one Docker Engine", () => {
  let store: TestStorage;
  let model: ScriptedModel;
  const servers: ChildServer[] = [];
  beforeAll(async () => {
    const docker = await hostProbes.docker();
    if (!docker.ok) throw new Error(`Docker is required for this test: ${docker.reason}`);
    store = await openTestStorage("postgres");
    model = await startScriptedModel({
      apiKey: MODEL_KEY,
      script: [
        { match: { tool_result_for: "bash" }, response: "the tool ran", times: 1000 },
        { response: { content: [{ type: "tool_use", name: "bash", input: { command: "echo tool-ran" } }] }, times: 1000 },
      ],
    });
  });
  afterAll(async () => {
    for (const s of servers) await s.close();
    await model?.close();
    await store?.cleanup();
  });

  it("killing one never takes a sandbox from the other", async () => {
    const deployment = await deploymentId(store.storage.db);
    const start = async () => {
      const s = await startServeProcess({ apiKey: TEST_API_KEY, postgres: store, env: { ...ENV, OPENMA_MODEL_BASE_URL: model.url } });
      servers.push(s);
      return s;
    };
    const [a, b] = [await start(), await start()];
    const client = b.client;
    const env = await client.beta.environments.create({ name: "cloud" });
    const agent = await client.beta.agents.create({
      name: "two",
      model: "claude-test-1",
      tools: [{ type: "agent_toolset_20260401", default_config: { permission_policy: { type: "always_allow" } } }],
    });

    // In log order: without an ORDER BY, Postgres returns rows in heap order, and an updated row (a user event
    // marked processed) moves to the end of the heap.
    const events = (id: string) =>
      store.storage.db.selectFrom("session_events").select(["type", "body"]).where("session_id", "=", id).orderBy("seq").execute();
    const answered = async (id: string, n: number) => {
      const log = await events(id);
      return log.filter((e) => e.type === "agent.message").length === n && log.at(-1)?.type === "session.status_idle";
    };
    /** Waits for a session's n-th answer; a timeout names the session's log and both servers' latest lines. */
    const turn = (id: string, n: number, what: string) =>
      until(() => answered(id, n), what).catch(async (err: unknown) => {
        const log = (await events(id)).map((e) => (e.type.endsWith("error") ? `${e.type} ${e.body}` : e.type)).join(", ");
        throw new Error(`${String(err)}\nsession ${id}: ${log}\n${servers.map((s) => `server ${s.pid}:\n${s.output()}`).join("\n")}`);
      });
    /** Which process ran each session's last turn (and so holds its sandbox). */
    const runner = async (id: string) =>
      (await store.storage.db.selectFrom("session_executions").select("owner_id").where("session_id", "=", id).executeTakeFirstOrThrow())
        .owner_id ?? "";
    const containers = async () => {
      const list = await connectDocker().listContainers({ filters: { label: [`openma.deployment=${deployment}`], status: ["running"] } });
      return new Map(list.map((c) => [c.Labels["openma.session"] ?? "", c.Id]));
    };

    const byServer = new Map<number, string[]>([
      [a.pid, []],
      [b.pid, []],
    ]);
    for (let i = 0; i < 12 && [...byServer.values()].some((ids) => ids.length === 0); i++) {
      const session = await client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
      await client.beta.sessions.events.send(session.id, {
        events: [{ type: "user.message", content: [{ type: "text", text: "run it" }] }],
      });
      await turn(session.id, 1, "the first turn");
      const owner = await runner(session.id);
      for (const [pid, ids] of byServer) if (owner.startsWith(`pid${pid}:`)) ids.push(session.id);
    }
    const mine = byServer.get(b.pid) ?? [];
    const theirs = byServer.get(a.pid) ?? [];
    expect(mine.length).toBeGreaterThan(0);
    expect(theirs.length).toBeGreaterThan(0);
    const before = await containers();
    const owners = await store.storage.db.selectFrom("sandbox_owners").select("session_id").execute();
    // Every session's container is running, and has exactly one owner record.
    expect(owners.map((o) => o.session_id).sort()).toEqual([...mine, ...theirs].sort());
    for (const id of [...mine, ...theirs]) expect(before.has(id)).toBe(true);
    // The API's environment stats count them too (an OpenMA extension of the work queue stats).
    const sandboxStats = async () => ((await client.beta.environments.work.stats(env.id)) as { sandboxes?: unknown }).sandboxes;
    expect(await sandboxStats()).toEqual([{ driver: "node-docker", owned: mine.length + theirs.length, idle: 0, orphaned: 0, pooled: 0 }]);

    await a.kill9();
    // The survivor's reaper ends the dead server's containers once their owner leases run out.
    await until(async () => (await containers()).size === mine.length, "the dead server's containers to be reaped", 30_000);
    const after = await containers();
    expect([...after.keys()].sort()).toEqual([...mine].sort());
    for (const id of mine) expect(after.get(id)).toBe(before.get(id));
    expect(await sandboxStats()).toEqual([{ driver: "node-docker", owned: mine.length, idle: 0, orphaned: 0, pooled: 0 }]);

    // The survivor answers the next turn of its sessions in the very same containers.
    for (const id of mine) {
      await client.beta.sessions.events.send(id, { events: [{ type: "user.message", content: [{ type: "text", text: "again" }] }] });
      await turn(id, 2, "the second turn");
    }
    const still = await containers();
    for (const id of mine) expect(still.get(id)).toBe(before.get(id));
  }, 180_000); // two child servers, eight sessions' containers and a lease expiry: a deadline, not a timing assertion
});
