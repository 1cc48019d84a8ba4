import { describe, expect, it } from "vitest";
import { AMA_WORKER_HARNESS, HARNESS_SUPERVISOR_PROTOCOL, type HarnessDriver, harnessIdentityOf } from "./driver.ts";

const supervised: HarnessDriver = {
  type: "openma_supervised",
  protocol: HARNESS_SUPERVISOR_PROTOCOL,
  supervisor: { command: "openma-acp-supervisor", args: ["--agent", "codex"], cwd: "/workspace" },
  harness: { id: "acp:codex", version: "0.4.1" },
  readyTimeoutMs: 30_000,
  heartbeatTimeoutMs: 15_000,
  drainTimeoutMs: 60_000,
};

describe("harnessIdentityOf", () => {
  it("identifies the official worker by its process and a fixed protocol generation", () => {
    const identity = harnessIdentityOf({ type: "ama_worker", process: { command: "ant-worker" } });
    expect(identity).toEqual({
      ...AMA_WORKER_HARNESS,
      runtimeIdentity: '{"process":{"args":[],"command":"ant-worker"},"type":"ama_worker"}',
    });
    // Omitted args and an explicit empty list are the same process.
    expect(harnessIdentityOf({ type: "ama_worker", process: { command: "ant-worker", args: [] } })).toEqual(identity);
  });

  it("identifies a supervised harness by id, version and process, not by timeouts", () => {
    const identity = harnessIdentityOf(supervised);
    expect(identity.id).toBe("acp:codex");
    expect(identity.version).toBe("0.4.1");
    expect(identity.runtimeIdentity).toContain('"command":"openma-acp-supervisor"');
    expect(harnessIdentityOf({ ...supervised, readyTimeoutMs: 1, drainTimeoutMs: 2, heartbeatTimeoutMs: 3 })).toEqual(identity);
    expect(harnessIdentityOf({ ...supervised, supervisor: { ...supervised.supervisor, args: ["--agent", "claude"] } })).not.toEqual(
      identity,
    );
    expect(harnessIdentityOf({ ...supervised, harness: { id: "acp:codex", version: "0.4.2" } }).runtimeIdentity).not.toBe(
      identity.runtimeIdentity,
    );
  });
});
