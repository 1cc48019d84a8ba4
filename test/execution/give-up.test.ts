/**
 * A turn the worker gives up on (its attempts ran out) ends the session's
 * turn visibly: a `session.error` then `session.status_idle`
 * (`retries_exhausted`), and the session reads `idle` through the official
 * SDK instead of staying `running` forever. Both backends; the real harness
 * records the give-up, only `runTurn` is made to fail every time.
 */

import { silentLogger } from "@openma/api";
import { ExecutionWorker } from "@openma/execution";
import { harnessRunner } from "@openma/execution/harness-runner";
import type { TurnRunnerDeps } from "@openma/harness";
import { newId, systemClock } from "@openma/storage";
import { BACKENDS } from "@openma/storage/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestServer, type TestServer } from "../support/server.ts";

describe.each(BACKENDS)("a given-up turn on %s", (dialect) => {
  let t: TestServer;
  beforeAll(async () => {
    t = await startTestServer(dialect);
  });
  afterAll(async () => t?.close());

  it("ends with session.error and an idle session after the last attempt", async () => {
    const env = await t.client.beta.environments.create({ name: "cloud" });
    const agent = await t.client.beta.agents.create({ name: "doomed", model: "claude-test-1" });
    const session = await t.client.beta.sessions.create({ agent: agent.id, environment_id: env.id });
    const deps = { storage: t.store.storage, clock: systemClock, ids: newId, logger: silentLogger } as unknown as TurnRunnerDeps;
    const real = harnessRunner(deps);
    let attempts = 0;
    const worker = new ExecutionWorker({
      storage: t.store.storage,
      runner: {
        ...real,
        runTurn: async () => {
          attempts += 1;
          throw new Error("the model port exploded");
        },
      },
      maxAttempts: 2,
      retryBackoffMs: () => 0,
      pollIntervalMs: 600_000,
    });
    const stream = await t.client.beta.sessions.events.stream(session.id);
    worker.start();
    try {
      await t.client.beta.sessions.events.send(session.id, { events: [{ type: "user.message", content: [{ type: "text", text: "hi" }] }] });
      const seen: Array<{ type: string; [k: string]: unknown }> = [];
      for await (const event of stream) {
        seen.push(event as never);
        if (event.type === "session.status_idle") break;
      }
      expect(attempts).toBe(2);
      const error = seen.find((e) => e.type === "session.error");
      expect(error).toMatchObject({ error: { type: "unknown_error", retry_status: { type: "exhausted" } } });
      expect(String((error as unknown as { error: { message: string } }).error.message)).toContain("the model port exploded");
      expect(seen.at(-1)).toMatchObject({ type: "session.status_idle", stop_reason: { type: "retries_exhausted" } });
      expect((await t.client.beta.sessions.retrieve(session.id)).status).toBe("idle");
    } finally {
      stream.controller.abort();
      await worker.stop();
    }
  });
});
