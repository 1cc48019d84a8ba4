import { describe, expect, it } from "vitest";
import { type SandboxOwnerRecord, sandboxOwnerVerdict } from "./ownership.ts";

const record = (leaseExpiresAt: number, idleDeadlineAt: number): SandboxOwnerRecord => ({
  id: "sbo_1",
  scope: { environmentId: "env", sessionId: "sesn" },
  driver: "node-docker",
  deployment: "dep_1",
  lease: null,
  createdAt: 0,
  lastUsedAt: 0,
  idleDeadlineAt,
  leaseExpiresAt,
});

describe("sandboxOwnerVerdict", () => {
  it("judges from stored times: an expired lease wins over idleness, a live owner's sandbox is live", () => {
    expect(sandboxOwnerVerdict(null, 100)).toBe("unowned");
    expect(sandboxOwnerVerdict(record(100, 50), 100)).toBe("expired");
    expect(sandboxOwnerVerdict(record(101, 100), 100)).toBe("idle");
    expect(sandboxOwnerVerdict(record(101, 101), 100)).toBe("live");
  });
});
